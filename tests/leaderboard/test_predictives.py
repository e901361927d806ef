"""The stored predictive: both forms give back the mean and the targets' covariance in
float32, the factor form where it is shorter, and a foreign blob is refused."""

import numpy as np
import pytest

from neural_testbed.leaderboard import predictives


def _covariance(spread, noise):
    return spread.T @ spread + noise * np.eye(spread.shape[1])


@pytest.mark.parametrize("rows", [1, 3, 50])
def test_round_trip_gives_the_targets_moments(rows):
    rng = np.random.default_rng(rows)
    mean, spread = rng.normal(size=10), rng.normal(size=(rows, 10)) / np.sqrt(rows)
    moments = predictives.decode(predictives.encode(mean, spread, 0.01))
    np.testing.assert_allclose(moments.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(moments.covariance, _covariance(spread, 0.01), rtol=1e-5,
                               atol=1e-6)
    assert moments.covariance.dtype == np.float32 and moments.mean.shape == (10,)


def test_a_few_members_are_stored_as_a_factor_many_samples_as_a_triangle():
    rng = np.random.default_rng(0)
    q = 100
    ensemble = predictives.encode(np.zeros(q), rng.normal(size=(10, q)), 0.01)
    samples = predictives.encode(np.zeros(q), rng.normal(size=(1000, q)), 0.01)
    single = predictives.encode(np.zeros(q), np.zeros((1, q)), 0.01)
    # Sizes: 10 x 100 and 5050 float32 numbers before compression, plus the 100 means.
    assert len(ensemble) < 4 * (10 * q + q) + 17
    assert 4 * (q * (q + 1) // 2) * 0.6 < len(samples) < 4 * (q * (q + 1) // 2 + q) + 17
    assert len(single) < 100  # zeros compress to almost nothing
    np.testing.assert_array_equal(predictives.decode(single).covariance,
                                  np.float32(0.01) * np.eye(q, dtype=np.float32))


def test_a_foreign_blob_is_refused_and_a_bad_shape_named():
    with pytest.raises(ValueError, match="not a stored predictive"):
        predictives.decode(b"hello, world, not ours")
    with pytest.raises(ValueError, match=r"spread of shape \(2, 3\) for a mean of shape \(4,\)"):
        predictives.encode(np.zeros(4), np.zeros((2, 3)), 0.1)
