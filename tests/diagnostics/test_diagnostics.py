"""Known answers of the diagnostics' pure functions (Li & Zhu, equations 3-5, sections 3.2-3.3).

The uncertainty split, the ECE and its reliability bins, rejection ability and the
uncertainty-probability diagrams' binned sums and average uncertainty divergence, on
hand-built inputs and on random ones with fixed seeds.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import diagnostics
from neural_testbed.diagnostics import uncertainty

LOG2 = float(np.log(2.0))

# The functions under test, jitted: one compilation per input shape instead of one per
# operation run eagerly (a third of this file's time from a cold compilation cache).
jitted = types.SimpleNamespace(
    **{name: jax.jit(getattr(diagnostics, name)) for name in (
        "split", "covariances", "accuracy", "rescaled_confidence", "rejection_ability",
        "ecdf_area", "average_uncertainty_divergence", "diagram")},
    expected_calibration_error=jax.jit(diagnostics.expected_calibration_error,
                                       static_argnums=2),
    reliability_bins=jax.jit(diagnostics.reliability_bins, static_argnums=2),
    binned_sums=jax.jit(diagnostics.binned_sums, static_argnums=3),
)


# Random inputs come from numpy (fixed seeds): eager jax.random calls would each compile.
def _softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _random_probs(seed, shape):
    return _softmax(2.0 * np.random.RandomState(seed).normal(size=shape))


def _random_weights(seed, num_members):
    return np.random.RandomState(seed).dirichlet(np.ones(num_members)).astype(np.float32)


def _random_beliefs(seed, num_members=7, num_classes=4):
    """Class probabilities of ``num_members`` belief samples and random weights summing to 1."""
    return _random_probs(seed, (num_members, num_classes)), _random_weights(seed + 100,
                                                                              num_members)


# ----- The aleatoric / epistemic split (equations 3 and 4) ---------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_covariances_add_up_to_the_covariance_of_the_mean_prediction(seed):
    probs, weights = _random_beliefs(seed)
    np.testing.assert_allclose(np.sum(weights), 1.0, rtol=1e-6)
    aleatoric, epistemic = jitted.covariances(probs, weights)
    mean = np.asarray(weights @ probs, np.float64)
    np.testing.assert_allclose(aleatoric + epistemic, np.diag(mean) - np.outer(mean, mean),
                               atol=1e-6)
    for matrix in (np.asarray(aleatoric, np.float64), np.asarray(epistemic, np.float64)):
        np.testing.assert_allclose(matrix, matrix.T, atol=1e-7)
        assert np.linalg.eigvalsh(matrix).min() >= -1e-6  # positive semi-definite
    # Both are non-trivial here: the test would not pass with either one zero.
    assert np.trace(aleatoric) > 0.05 and np.trace(epistemic) > 0.05

    split = jitted.split(probs, weights)
    np.testing.assert_allclose(split.aleatoric, np.trace(aleatoric), atol=1e-6)
    np.testing.assert_allclose(split.epistemic, np.trace(epistemic), atol=1e-6)
    np.testing.assert_allclose(split.total, np.trace(aleatoric) + np.trace(epistemic), atol=1e-6)
    np.testing.assert_allclose(split.total, 1.0 - np.sum(mean**2), atol=1e-6)


def test_split_by_hand_numpy_formulas():
    """Equations 3 and 4 written out in float64 numpy, against ``covariances`` and ``split``."""
    probs, weights = _random_beliefs(7, num_members=5, num_classes=3)
    p, w = np.asarray(probs, np.float64), np.asarray(weights, np.float64)
    mean = w @ p
    aleatoric = sum(w_m * (np.diag(p_m) - np.outer(p_m, p_m)) for w_m, p_m in zip(w, p))
    epistemic = sum(w_m * np.outer(p_m - mean, p_m - mean) for w_m, p_m in zip(w, p))
    got_aleatoric, got_epistemic = jitted.covariances(probs, weights)
    np.testing.assert_allclose(got_aleatoric, aleatoric, atol=1e-6)
    np.testing.assert_allclose(got_epistemic, epistemic, atol=1e-6)
    entropy = lambda q: -np.sum(q * np.log(q), axis=-1)
    split = jitted.split(probs, weights)
    np.testing.assert_allclose(split.total_entropy, entropy(mean), atol=1e-5)
    np.testing.assert_allclose(split.expected_entropy, w @ entropy(p), atol=1e-5)


def test_split_keeps_the_input_axes():
    """``probs [M, n, K]`` gives one value per input, as for each input alone."""
    probs, weights = _random_probs(3, (6, 5, 4)), _random_weights(4, 6)
    batched = jitted.split(probs, weights)
    for i in range(5):
        alone = jitted.split(probs[:, i], weights)
        for got, want in zip(batched, alone):
            np.testing.assert_allclose(got[i], want, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entropy_split_adds_up(seed):
    """H(p_bar) = E_m H(p_m) + MI; MI > 0 by Jensen for different samples, so not clamped."""
    probs, weights = _random_beliefs(seed)
    split = jitted.split(probs, weights)
    assert float(split.mutual_information) > 0.01  # far from the clamp at 0
    np.testing.assert_allclose(split.total_entropy,
                               split.expected_entropy + split.mutual_information, atol=1e-6)


def test_two_confident_samples_that_disagree():
    """Two equally weighted one-hot predictions on different classes (K = 2): no noise
    expected by either sample, all the uncertainty is disagreement."""
    probs = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    weights = jnp.array([0.5, 0.5])
    split = jitted.split(probs, weights)
    np.testing.assert_allclose(split.expected_entropy, 0.0, atol=1e-7)
    np.testing.assert_allclose(split.total_entropy, LOG2, rtol=1e-6)
    np.testing.assert_allclose(split.mutual_information, LOG2, rtol=1e-6)
    np.testing.assert_allclose(split.aleatoric, 0.0, atol=1e-7)
    np.testing.assert_allclose(split.epistemic, 0.5, rtol=1e-6)
    np.testing.assert_allclose(split.total, 0.5, rtol=1e-6)
    aleatoric, epistemic = jitted.covariances(probs, weights)
    np.testing.assert_allclose(aleatoric, np.zeros((2, 2)), atol=1e-7)
    np.testing.assert_allclose(epistemic, [[0.25, -0.25], [-0.25, 0.25]], rtol=1e-6)


def test_two_uncertain_samples_that_agree():
    """The mirror case: two uniform predictions (K = 2) are pure aleatoric uncertainty."""
    split = jitted.split(jnp.full((2, 2), 0.5), jnp.array([0.3, 0.7]))
    np.testing.assert_allclose(split.aleatoric, 0.5, rtol=1e-6)
    np.testing.assert_allclose(split.epistemic, 0.0, atol=1e-7)
    np.testing.assert_allclose(split.expected_entropy, LOG2, rtol=1e-6)
    np.testing.assert_allclose(split.mutual_information, 0.0, atol=1e-6)


def test_one_belief_sample_has_no_epistemic_uncertainty():
    probs = _random_probs(5, (1, 4))
    split = jitted.split(probs, jnp.ones(1))
    np.testing.assert_allclose(split.epistemic, 0.0, atol=1e-7)
    np.testing.assert_allclose(split.mutual_information, 0.0, atol=1e-6)
    np.testing.assert_allclose(split.aleatoric, 1.0 - np.sum(probs**2), rtol=1e-6)
    np.testing.assert_allclose(split.total, split.aleatoric, rtol=1e-6)
    np.testing.assert_allclose(split.total_entropy, split.expected_entropy, rtol=1e-6)
    _, epistemic = jitted.covariances(probs, jnp.ones(1))
    np.testing.assert_allclose(epistemic, np.zeros((4, 4)), atol=1e-7)


def test_identical_belief_samples_have_no_epistemic_uncertainty():
    one = _random_probs(6, (4,))
    probs = np.tile(one, (7, 1))
    weights = _random_weights(7, 7)
    split = jitted.split(probs, weights)
    np.testing.assert_allclose(split.epistemic, 0.0, atol=1e-6)
    np.testing.assert_allclose(split.mutual_information, 0.0, atol=1e-6)
    np.testing.assert_allclose(split.aleatoric, 1.0 - jnp.sum(one**2), atol=1e-6)
    _, epistemic = jitted.covariances(probs, weights)
    np.testing.assert_allclose(epistemic, np.zeros((4, 4)), atol=1e-6)


def test_split_fields_are_the_documented_names():
    assert uncertainty.Split._fields == ("aleatoric", "epistemic", "total", "total_entropy",
                                         "expected_entropy", "mutual_information")


# ----- Calibration: reliability bins and ECE (section 3.2) --------------------------------
NUM_BINS = 15


def _bins(confidence):
    """The bin of each confidence as ``reliability_bins`` computes it: floor(c B), 1 in the
    last bin. (On an exact edge m / B that is bin m, where the paper's ((m - 1) / B, m / B]
    says m - 1; uniform random confidences never land on one.)"""
    return np.minimum((confidence * np.float32(NUM_BINS)).astype(np.int64), NUM_BINS - 1)


def _calibrated_by_construction(confidence):
    """Labels such that in every confidence bin the number right is the rounded sum of the
    confidences (K = 2, class 0 predicted): |correct - confidence| <= 1/2 in every bin."""
    bins = _bins(confidence)
    labels = np.ones(confidence.shape, np.int32)
    for b in range(NUM_BINS):
        members = np.flatnonzero(bins == b)
        labels[members[:int(np.round(confidence[members].sum(dtype=np.float64)))]] = 0
    return labels


@pytest.mark.parametrize("seed", range(20))
def test_ece_of_calibrated_by_construction_and_of_calibrated_labels(seed):
    """n = 1000 predictions of class 0 with confidences ~ U(0.5, 1) (K = 2).

    By construction every bin's gap is a rounding error, at most 1/2, so the ECE is at
    most (occupied bins) x 0.5 / n <= 15 x 0.5 / 1000. Labels drawn from the calibrated
    model itself (right with probability = confidence) have per-bin gaps of a standard
    deviation sqrt(sum c (1 - c)), 2 to 5 here: their ECE is about 0.05, an order of
    magnitude above the bound (over 3000 seeds the smallest ratio of the two ECEs was 3.2),
    so it falls below the constructed one only if the library's ECE or bins are wrong.
    """
    rng = np.random.RandomState(seed)
    n = 1000
    confidence = rng.uniform(0.5, 1.0, n).astype(np.float32)
    probs = jnp.asarray(np.stack([confidence, 1.0 - confidence], axis=1))
    constructed = jnp.asarray(_calibrated_by_construction(confidence))
    drawn = jnp.asarray(np.where(rng.uniform(size=n) < confidence, 0, 1).astype(np.int32))

    ece_constructed = float(jitted.expected_calibration_error(probs, constructed))
    ece_drawn = float(jitted.expected_calibration_error(probs, drawn))
    occupied = len(np.unique(_bins(confidence)))
    assert ece_constructed <= occupied * 0.5 / n <= NUM_BINS * 0.5 / n
    assert ece_constructed <= ece_drawn

    # The exact value: the bins' rounding errors, in float64.
    bins = _bins(confidence)
    sums = np.bincount(bins, confidence.astype(np.float64), NUM_BINS)
    np.testing.assert_allclose(ece_constructed, np.sum(np.abs(np.round(sums) - sums)) / n,
                               atol=1e-5)

    # The reliability bins, against numpy's histogram, and the ECE from them.
    for labels in (constructed, drawn):
        count, correct, conf_sum = jitted.reliability_bins(probs, labels, NUM_BINS)
        right = np.asarray(labels) == 0
        np.testing.assert_array_equal(count, np.bincount(bins, minlength=NUM_BINS))
        np.testing.assert_array_equal(correct, np.bincount(bins, right, NUM_BINS))
        np.testing.assert_allclose(conf_sum, sums, rtol=1e-5)
        np.testing.assert_allclose(jitted.expected_calibration_error(probs, labels),
                                   np.sum(np.abs(np.asarray(correct) - np.asarray(conf_sum))) / n,
                                   rtol=1e-6)
        np.testing.assert_allclose(jitted.accuracy(probs, labels), right.mean(), rtol=1e-6)


# ----- Rejection ability (equation 5, rescaled confidence of section 3.3.3) ----------------
@pytest.mark.parametrize("num_classes", [2, 10])
def test_rescaled_confidence_maps_chance_to_0_and_certainty_to_1(num_classes):
    uniform = jnp.full((3, num_classes), 1.0 / num_classes)
    one_hot = jax.nn.one_hot(jnp.array([0, 1, num_classes - 1]), num_classes)
    np.testing.assert_allclose(jitted.rescaled_confidence(uniform), 0.0, atol=1e-6)
    np.testing.assert_allclose(jitted.rescaled_confidence(one_hot), 1.0, rtol=1e-6)
    # In between it is linear in the top probability (the paper's equation 11).
    probs = _random_probs(num_classes, (20, num_classes))
    top = np.max(np.asarray(probs), axis=-1)
    np.testing.assert_allclose(jitted.rescaled_confidence(probs),
                               (top - 1 / num_classes) / (1 - 1 / num_classes), atol=1e-6)


def test_rejection_ability_of_equal_confidences_is_0():
    confidence = np.random.RandomState(0).uniform(size=100).astype(np.float32)
    assert float(jitted.rejection_ability(confidence, confidence)) == 0.0


def test_rejection_ability_of_the_ideal_and_the_reversed_agent():
    """Fully confident in distribution and uniform out of it scores 1; the reverse -1."""
    num_classes = 10
    sure = jitted.rescaled_confidence(jax.nn.one_hot(jnp.arange(50) % num_classes,
                                                          num_classes))
    unsure = jitted.rescaled_confidence(jnp.full((30, num_classes), 1 / num_classes))
    np.testing.assert_allclose(jitted.rejection_ability(sure, unsure), 1.0, atol=1e-6)
    np.testing.assert_allclose(jitted.rejection_ability(unsure, sure), -1.0, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ecdf_area_is_the_area_under_the_empirical_cdf(seed):
    """The area under F(t) = #{c_i <= t} / n on [0, 1], by the trapezoid rule on a grid of
    step h = 1e-5: each of the n jumps costs at most h / 2, so the grid is exact to 1e-5."""
    rng = np.random.RandomState(seed)
    values = rng.beta(0.7, 1.5, 200).astype(np.float32)
    grid = np.linspace(0.0, 1.0, 100_001)
    cdf = np.searchsorted(np.sort(values), grid, side="right") / values.size
    area = np.sum((cdf[1:] + cdf[:-1]) / 2 * np.diff(grid))
    np.testing.assert_allclose(jitted.ecdf_area(jnp.asarray(values)), area, atol=1e-3)
    # and equation 5 from two such areas
    other = rng.uniform(size=100).astype(np.float32)
    other_cdf = np.searchsorted(np.sort(other), grid, side="right") / other.size
    other_area = np.sum((other_cdf[1:] + other_cdf[:-1]) / 2 * np.diff(grid))
    np.testing.assert_allclose(jitted.rejection_ability(jnp.asarray(values),
                                                             jnp.asarray(other)),
                               other_area - area, atol=1e-3)


# ----- UPDS binned sums and AUD (section 3.3) ----------------------------------------------
def test_binned_sums_by_hand():
    """Three bins, (0, 1/3], (1/3, 2/3], (2/3, 1]; two uncertainties per input; a mask."""
    confidence = jnp.array([0.1, 0.2, 0.5, 0.9, 0.95, 0.6])
    values = jnp.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [5.0, 50.0],
                        [6.0, 60.0]])
    mask = jnp.array([True, True, True, True, True, False])  # the last input is left out
    counts, sums = jitted.binned_sums(confidence, values, mask, 3)
    np.testing.assert_array_equal(counts, [2, 1, 2])
    np.testing.assert_allclose(sums, [[3.0, 3.0, 9.0], [30.0, 30.0, 90.0]])
    np.testing.assert_allclose(jitted.diagram(counts, sums),
                               [[1.5, 3.0, 4.5], [15.0, 30.0, 45.0]])


def test_binned_sums_follow_the_papers_intervals_at_the_edges():
    """I_m = ((m - 1) / B, m / B]: a confidence exactly on an edge belongs to the lower bin;
    0 belongs to the first. B = 4, whose edges are exact in float32."""
    confidence = jnp.array([0.0, 0.25, 0.2500001, 0.5, 0.75, 0.7500001, 1.0])
    counts, sums = jitted.binned_sums(confidence, jnp.arange(7.0)[:, None],
                                           jnp.ones(7, bool), 4)
    # bins:                 0    0       1         1    2      3        3
    np.testing.assert_array_equal(counts, [2, 2, 1, 2])
    np.testing.assert_allclose(sums, [[0 + 1, 2 + 3, 4, 5 + 6]])
    # three bins of 1/3: the float32 edges 1/3 and 2/3 land in the lower bin as well
    counts, _ = jitted.binned_sums(jnp.array([1 / 3, 2 / 3, 1.0]), jnp.zeros((3, 1)),
                                        jnp.ones(3, bool), 3)
    np.testing.assert_array_equal(counts, [1, 1, 1])


def test_aud_by_hand_ignores_bins_of_one_condition_only():
    """Condition a fills bins 0, 1, 2; condition b bins 0, 1 (and not 2): the AUD is the
    mean gap over bins 0 and 1 only."""
    confidence_a = jnp.array([0.1, 0.2, 0.5, 0.9])
    values_a = jnp.array([[0.1], [0.3], [0.5], [0.9]])  # bin means 0.2, 0.5, 0.9
    confidence_b = jnp.array([0.3, 0.4, 0.6])
    values_b = jnp.array([[0.6], [0.2], [0.4]])  # bin means 0.6, 0.3, (none)
    a = jitted.binned_sums(confidence_a, values_a, jnp.ones(4, bool), 3)
    b = jitted.binned_sums(confidence_b, values_b, jnp.ones(3, bool), 3)
    np.testing.assert_array_equal(a[0], [2, 1, 1])
    np.testing.assert_array_equal(b[0], [1, 2, 0])
    aud = jitted.average_uncertainty_divergence(*a, *b)
    assert aud.shape == (1,)
    np.testing.assert_allclose(aud, [(abs(0.2 - 0.6) + abs(0.5 - 0.3)) / 2], rtol=1e-6)
    np.testing.assert_allclose(jitted.average_uncertainty_divergence(*b, *a), aud)


def test_aud_of_identical_conditions_is_0():
    rng = np.random.RandomState(0)
    confidence = rng.uniform(size=50).astype(np.float32)
    values = rng.uniform(size=(50, 3)).astype(np.float32)
    counts, sums = jitted.binned_sums(confidence, values, jnp.ones(50, bool), 15)
    np.testing.assert_array_equal(
        jitted.average_uncertainty_divergence(counts, sums, counts, sums), [0.0, 0.0, 0.0])
    # the same inputs twice over have the same means: still 0
    np.testing.assert_allclose(
        jitted.average_uncertainty_divergence(counts, sums, 2 * counts, 2 * sums),
        [0.0, 0.0, 0.0], atol=1e-7)


def test_aud_without_a_shared_bin_is_nan():
    a = jitted.binned_sums(jnp.array([0.1, 0.2]), jnp.ones((2, 2)), jnp.ones(2, bool), 3)
    b = jitted.binned_sums(jnp.array([0.9, 0.5]), jnp.ones((2, 2)), jnp.ones(2, bool), 3)
    aud = jitted.average_uncertainty_divergence(*a, *b)
    assert aud.shape == (2,) and np.all(np.isnan(aud))
    empty = jitted.binned_sums(jnp.array([0.5]), jnp.ones((1, 2)), jnp.zeros(1, bool), 3)
    np.testing.assert_array_equal(empty[0], [0, 0, 0])
    assert np.all(np.isnan(jitted.average_uncertainty_divergence(*a, *empty)))
    assert np.all(np.isnan(jitted.diagram(*empty)))
