"""XLL / XLLR known answers: batches are each anchor's nearest correlates, the reference's
own XLL is its joint log-likelihood, a model's own marginals do not matter, and true
correlations beat independence by the expected log-determinant."""

import jax
import numpy as np
from scipy import stats

from neural_testbed.diagnostics import xll

# Q = 12 test points on a line: an RBF kernel makes near points correlated (so the nearest
# are the most correlated), scaled per point, and noise keeps batches well conditioned.
X = np.array([0.0, 0.3, 0.35, 1.0, 1.6, 1.7, 2.5, 3.1, 3.2, 4.0, 4.9, 5.0])
SCALES = np.linspace(0.5, 2.0, len(X))
COVARIANCE = (SCALES[:, None] * SCALES[None, :]
              * (np.exp(-0.5 * (X[:, None] - X[None]) ** 2) + 0.05 * np.eye(len(X))))
MEAN = np.sin(X)
Y = MEAN + np.linalg.cholesky(COVARIANCE) @ np.random.default_rng(0).normal(size=len(X))

# The functions under test, each compiled as one program (not op by op).
_top_correlated_batches = jax.jit(xll.top_correlated_batches, static_argnums=1)
_cross_normalized_log_likelihood = jax.jit(xll.cross_normalized_log_likelihood,
                                           static_argnums=4)
_xll_matrix = jax.jit(xll.xll_matrix, static_argnums=3)
_xll_ranks = jax.jit(xll.xll_ranks)


def _batches_by_distance(batch_size):
    """Each anchor, then its nearest points on the line (the most correlated)."""
    return np.argsort(np.abs(X[:, None] - X[None]), axis=1, kind="stable")[:, :batch_size]


def test_batches_are_each_anchor_and_its_most_correlated_points():
    # Flipping a point's sign makes its correlations negative: absolute values still rank.
    flip = np.where(np.arange(len(X)) == 4, -1.0, 1.0)
    batches = _top_correlated_batches(flip[:, None] * COVARIANCE * flip, 3)
    expected = _batches_by_distance(3)
    np.testing.assert_array_equal(np.asarray(batches)[:, 0], np.arange(len(X)))
    for got, want in zip(np.asarray(batches), expected):  # order of equal distances aside
        assert set(got) == set(want)


def test_the_references_own_xll_is_its_joint_log_likelihood():
    value = _cross_normalized_log_likelihood(Y, MEAN, COVARIANCE, COVARIANCE, 5)
    direct = np.mean([stats.multivariate_normal(MEAN[b], COVARIANCE[np.ix_(b, b)]).logpdf(Y[b])
                      for b in _batches_by_distance(5)])
    np.testing.assert_allclose(float(value), direct, rtol=1e-5)


def test_a_models_own_means_and_variances_do_not_change_its_xll():
    other = 0.6 * COVARIANCE + 0.4 * np.diag(np.diag(COVARIANCE))  # weaker correlations
    scale = np.linspace(0.2, 5.0, len(X))
    rescaled = scale[:, None] * other * scale[None, :]
    means = np.stack([MEAN, MEAN, MEAN + 3.0])
    covariances = np.stack([COVARIANCE, other, rescaled])
    matrix = np.asarray(_xll_matrix(Y, means, covariances, 5))
    # Under references 0 and 1, models 1 and 2 (same correlations) score the same ...
    np.testing.assert_allclose(matrix[:2, 1], matrix[:2, 2], rtol=1e-5)
    # ... and each entry is equation 3 with that reference's marginals.
    np.testing.assert_allclose(matrix[0, 1], float(_cross_normalized_log_likelihood(
        Y, MEAN, COVARIANCE, other, 5)), rtol=1e-5)
    # As the reference, model 2's shifted means and scaled variances do matter.
    assert abs(matrix[2, 0] - matrix[1, 0]) > 1.0


def test_true_correlations_beat_independence_by_the_expected_log_determinant():
    """On targets drawn from the reference, E[XLL(true C) - XLL(identity)] is the mean over
    batches of KL(N(0, C_B) || N(0, I)) = -log det(C_B) / 2. Tolerance: 4 standard errors
    of the mean difference over 4000 draws (seed fixed)."""
    draws = MEAN + np.random.default_rng(1).multivariate_normal(
        np.zeros(len(X)), COVARIANCE, size=4000)
    independent = np.diag(np.diag(COVARIANCE))
    score = jax.jit(jax.vmap(lambda y, c: xll.cross_normalized_log_likelihood(
        y, MEAN, COVARIANCE, c, 5), in_axes=(0, None)))
    difference = np.asarray(score(draws, COVARIANCE), np.float64) - np.asarray(
        score(draws, independent), np.float64)
    scale = np.sqrt(np.diag(COVARIANCE))
    correlation = COVARIANCE / np.outer(scale, scale)
    expected = np.mean([-0.5 * np.linalg.slogdet(correlation[np.ix_(b, b)])[1]
                        for b in _batches_by_distance(5)])
    stderr = difference.std(ddof=1) / np.sqrt(len(difference))
    assert abs(difference.mean() - expected) < 4 * stderr, (difference.mean(), expected, stderr)
    assert expected > 20 * stderr  # the check can fail: the correlations carry information


def test_ranks_are_zero_for_the_best_share_ties_and_put_nan_last():
    ranks = _xll_ranks(np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 0.0], [np.nan, 1.0, 2.0]],
                                np.float32))
    np.testing.assert_array_equal(np.asarray(ranks), [[2, 0, 1], [0.5, 0.5, 2], [2, 1, 0]])


def test_algorithm_2_averages_scores_and_ranks_over_the_references():
    independent = np.diag(np.diag(COVARIANCE))
    means = np.stack([MEAN, MEAN + 0.1, MEAN - 0.2])
    covariances = np.stack([COVARIANCE, independent, 4.0 * COVARIANCE])
    scores, ranks = xll.xll_and_xllr(Y, means, covariances, batch_size=4)
    matrix = np.asarray(_xll_matrix(Y, means, covariances, 4))
    np.testing.assert_allclose(np.asarray(scores), matrix.mean(0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ranks), np.asarray(_xll_ranks(matrix)).mean(0))
    # Models 0 and 2 have the same correlations (4 x: bit for bit): they tie everywhere.
    np.testing.assert_allclose(matrix[:, 0], matrix[:, 2], rtol=1e-5)
    assert np.asarray(ranks)[0] == np.asarray(ranks)[2]


def test_the_predictive_of_weighted_members_has_their_moments():
    members = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    weights = np.array([0.1, 0.2, 0.3, 0.4], np.float32)

    @jax.jit
    def moments(members, weights):
        belief = xll.predictive(members, weights, 0.01)
        return belief.mean, belief.covariance()

    belief_mean, belief_covariance = moments(members, weights)
    mean = weights.astype(np.float64) @ members.astype(np.float64)
    centred = members.astype(np.float64) - mean
    expected = (centred.T * weights.astype(np.float64)) @ centred + 0.01 * np.eye(6)
    np.testing.assert_allclose(np.asarray(belief_mean), mean, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(belief_covariance), expected, rtol=1e-4, atol=1e-6)
