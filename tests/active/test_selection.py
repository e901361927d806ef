"""Acquisition criteria against known answers: the closed-form Gaussian mutual
information, covariances whose best batch is known, uniform random selection."""

import jax
import numpy as np
import pytest

from neural_testbed.active import selection

NOISE = 0.01


def _mutual_information(cov: np.ndarray, batch, num_candidates: int, noise: float) -> float:
    """Mean over the targets u of I(y_batch; f(u)) from entropies, in float64:
    1/2 log(var(u) det(C_yy) / det([[C_yy, c], [c^T, var(u)]]))."""
    cov = np.asarray(cov, np.float64)
    batch = list(batch)
    c_yy = cov[np.ix_(batch, batch)] + noise * np.eye(len(batch))
    values = []
    for u in range(num_candidates, cov.shape[0]):
        joint = np.block([[c_yy, cov[batch, u][:, None]], [cov[u, batch][None, :], cov[u, u]]])
        values.append(0.5 * (np.log(cov[u, u]) + np.linalg.slogdet(c_yy)[1]
                             - np.linalg.slogdet(joint)[1]))
    return float(np.mean(values))


# The criteria, each compiled as one program (``select`` is jitted in the library; these
# are the pieces it is built from, checked one by one).
_tig = jax.jit(selection.tig, static_argnums=1)
_mig = jax.jit(selection.mig, static_argnums=1)
_batch_mig = jax.jit(selection.batch_mig, static_argnums=2)
_greedy_batch_mig = jax.jit(selection.greedy_batch_mig, static_argnums=2)
_condition_on_label = jax.jit(selection.condition_on_label)


def _random_covariance(seed: int, n: int) -> np.ndarray:
    """A full-rank covariance with strong correlations (a Wishart draw, scaled to O(1)),
    float32 as the agents' covariances are."""
    a = np.random.default_rng(seed).normal(size=(n, n))
    return (a @ a.T / n + 0.05 * np.eye(n)).astype(np.float32)


def test_greedy_gains_sum_to_the_closed_form_mutual_information_of_the_batch():
    cov = _random_covariance(0, 10)  # 6 candidates, 4 targets
    available = np.ones(6, bool)
    indices, gains = map(np.asarray, _greedy_batch_mig(cov, available, 4, NOISE))
    assert len(set(indices.tolist())) == 4
    for q in range(1, 5):  # every prefix of the greedy batch
        direct = _mutual_information(cov, indices[:q], 6, NOISE)
        closed_form = float(_batch_mig(cov, indices[:q], 6, NOISE))
        np.testing.assert_allclose(float(np.sum(gains[:q])), direct, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(closed_form, direct, rtol=1e-4, atol=1e-5)


def test_mig_is_batch_mig_of_one_point_and_the_greedy_start():
    cov = _random_covariance(1, 9)  # 5 candidates, 4 targets
    single = [float(_batch_mig(cov, np.array([i]), 5, NOISE)) for i in range(5)]
    np.testing.assert_allclose(_mig(cov, 5, NOISE), single, rtol=1e-5, atol=1e-7)
    first = np.asarray(_greedy_batch_mig(cov, np.ones(5, bool), 1, NOISE)[0])[0]
    assert int(first) == int(np.argmax(single))


def _independent_candidates(cross: np.ndarray, candidate_variance: np.ndarray) -> np.ndarray:
    """Candidates independent of each other, one target of variance 1, covariances
    ``cross`` with it: [[diag(v), c], [c^T, 1]] (positive definite for small c)."""
    p = len(cross)
    cov = np.eye(p + 1)
    cov[np.arange(p), np.arange(p)] = candidate_variance
    cov[:p, p] = cov[p, :p] = cross
    return cov.astype(np.float32)


def test_with_independent_candidates_batchmig_picks_the_most_informative_in_order():
    # Gain of candidate i: -1/2 log(1 - c_i^2 / (v_i + noise)); conditioning on the
    # others leaves c_i unchanged, so the order is that of c_i^2 / (v_i + noise).
    cross = np.array([0.1, 0.5, 0.0, 0.3, 0.2])
    variance = np.array([0.5, 0.9, 1.0, 0.3, 0.1])
    cov = _independent_candidates(cross, variance)
    indices, _ = _greedy_batch_mig(cov, np.ones(5, bool), 4, NOISE)
    expected = np.argsort(-(cross**2 / (variance + NOISE)))[:4]
    np.testing.assert_array_equal(np.asarray(indices), expected)
    assert 2 not in np.asarray(indices)  # uncorrelated with the target: never before the rest


def test_a_candidate_uncorrelated_with_every_target_gains_nothing_and_is_not_picked_first():
    cov = _random_covariance(2, 9)  # 5 candidates, 4 targets
    cov[0, 5:] = cov[5:, 0] = 0.0  # candidate 0: uncorrelated with the targets
    cov[0, 0] = 10.0  # and by far the most uncertain (TIG's favourite), still PSD
    assert float(np.asarray(_mig(cov, 5, NOISE))[0]) == 0.0
    for method in ("batchmig", "mig"):
        batch = selection.select(method, jax.random.key(0), cov, np.ones(5, bool), 1, NOISE)
        assert int(np.asarray(batch)[0]) != 0, method
    assert int(np.asarray(selection.select("tig", jax.random.key(0), cov, np.ones(5, bool), 1,
                                           NOISE))[0]) == 0


def _duplicates():
    """Targets u1, u2 independent, variance 1. Candidates a, a2: the function at u1
    itself (two queries of one input); b: 0.9 f(u2). Order: a, a2, b, u1, u2."""
    cov = np.zeros((5, 5))
    cov[np.ix_([0, 1, 3], [0, 1, 3])] = 1.0
    cov[2, 2], cov[4, 4] = 0.81, 1.0
    cov[2, 4] = cov[4, 2] = 0.9
    return cov.astype(np.float32)


def test_batchmig_avoids_the_redundant_point_that_mig_takes():
    cov = _duplicates()
    # MIG (mean over 2 targets): a and a2 1/4 log(1 + 1 / noise) = 1.154, b 1/4 log(1 + 0.81 /
    # noise) = 1.102: the top two are the duplicates. After a's label, a2 adds only
    # 1/4 log(1 + (noise / (1 + noise)) / noise) = 0.172 about u1, below b's 1.102.
    np.testing.assert_allclose(_mig(cov, 3, NOISE),
                               [0.25 * np.log(101), 0.25 * np.log(101), 0.25 * np.log(82)],
                               rtol=1e-5)
    mig_batch = selection.select("mig", jax.random.key(0), cov, np.ones(3, bool), 2, NOISE)
    assert sorted(np.asarray(mig_batch).tolist()) == [0, 1]
    indices, gains = _greedy_batch_mig(cov, np.ones(3, bool), 2, NOISE)
    assert np.asarray(indices).tolist() == [0, 2]
    np.testing.assert_allclose(gains, [0.25 * np.log(101), 0.25 * np.log(82)], rtol=1e-4)
    second_a = float(np.asarray(_mig(_condition_on_label(cov, 0, NOISE), 3, NOISE))[1])
    np.testing.assert_allclose(second_a, 0.25 * np.log(1 + 1 / (1 + NOISE)), rtol=1e-3)


def test_tig_takes_the_largest_variances_and_skips_queried_candidates():
    cov = np.diag(np.array([0.3, 2.0, 1.0, 0.5, 5.0, 1.0], np.float32))  # 5 candidates, 1 target
    np.testing.assert_allclose(_tig(cov, 5, NOISE),
                               0.5 * np.log1p(np.array([0.3, 2.0, 1.0, 0.5, 5.0]) / NOISE),
                               rtol=1e-6)
    available = np.array([True, True, True, True, False])
    batch = selection.select("tig", jax.random.key(0), cov, available, 2, NOISE)
    assert np.asarray(batch).tolist() == [1, 2]


@pytest.mark.parametrize("method", ["batchmig", "mig"])
def test_queried_candidates_are_never_chosen_again(method):
    cov = _random_covariance(3, 12)  # 8 candidates, 4 targets
    best = selection.select(method, jax.random.key(0), cov, np.ones(8, bool), 3, NOISE)
    available = np.ones(8, bool)
    available[np.asarray(best)] = False
    again = selection.select(method, jax.random.key(0), cov, available, 5, NOISE)
    assert not set(np.asarray(best).tolist()) & set(np.asarray(again).tolist())
    assert len(set(np.asarray(again).tolist())) == 5


def test_random_selection_is_uniform_over_the_available_candidates_without_replacement():
    available = np.ones(10, bool)
    available[[0, 7]] = False
    draws = np.asarray(jax.jit(lambda key: jax.vmap(
        lambda key: selection.select("random", key, None, available, 3, NOISE))(
        jax.random.split(key, 4000)))(jax.random.key(4)))
    assert all(len(set(row)) == 3 for row in draws)
    counts = np.bincount(draws.ravel(), minlength=10)
    assert counts[0] == counts[7] == 0
    # Each of the 8 available is in a batch with probability 3/8: a binomial count over
    # 4000 batches, tolerance 4 of its standard errors.
    p = 3 / 8
    assert np.all(np.abs(counts[available] - 4000 * p) < 4 * np.sqrt(4000 * p * (1 - p))), counts


def test_a_belief_that_does_not_vary_scores_zero_and_picks_the_first_candidates():
    cov = np.zeros((7, 7), np.float32)  # a single model: no spread anywhere
    for method in ("batchmig", "mig", "tig"):
        batch = selection.select(method, jax.random.key(0), cov, np.ones(4, bool), 2, NOISE)
        assert np.asarray(batch).tolist() == [0, 1], method
    assert np.all(np.asarray(_mig(cov, 4, NOISE)) == 0)
