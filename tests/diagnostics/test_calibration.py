"""Accuracy and ECE on hand-built predictions with known answers."""

import jax.numpy as jnp
import numpy as np

from neural_testbed import diagnostics


def _predictions(confidence, num_correct, n=100):
    """n predictions of class 0 with the given confidence; the first num_correct are right."""
    probs = jnp.tile(jnp.array([[confidence, 1 - confidence]]), (n, 1))
    labels = jnp.array([0] * num_correct + [1] * (n - num_correct))
    return probs, labels


def test_calibrated_predictions_have_zero_ece():
    probs, labels = _predictions(0.7, 70)
    np.testing.assert_allclose(diagnostics.expected_calibration_error(probs, labels), 0.0, atol=1e-6)
    np.testing.assert_allclose(diagnostics.accuracy(probs, labels), 0.7)


def test_overconfident_predictions_have_ece_equal_to_the_gap():
    probs, labels = _predictions(0.9, 60)
    np.testing.assert_allclose(diagnostics.expected_calibration_error(probs, labels), 0.3, atol=1e-6)


def test_ece_weights_bins_by_their_size():
    p1, y1 = _predictions(0.9, 60, n=100)  # gap 0.3 in the 0.9 bin
    p2, y2 = _predictions(0.55, 165, n=300)  # calibrated in the 0.55 bin
    probs, labels = jnp.concatenate([p1, p2]), jnp.concatenate([y1, y2])
    np.testing.assert_allclose(
        diagnostics.expected_calibration_error(probs, labels), 0.3 * 100 / 400, atol=1e-6)


def test_reliability_diagram_has_li_and_zhus_ten_bins_and_the_ece_keeps_fifteen():
    """Li & Zhu's diagram (section 4.2.1: "10 bins, each bin has range 0.1") over their
    intervals I_m = ((m - 1)/M, m/M], so an edge belongs to the bin below it (0.5 to
    (0.4, 0.5], 1 to (0.9, 1]); their ECE has 15 bins, and so does ours."""
    confidence = jnp.array([0.5, 0.55, 0.62, 0.68, 0.91, 1.0, 0.999])
    probs = jnp.stack([confidence, 1 - confidence], axis=1)  # class 0 predicted
    labels = jnp.array([0, 0, 1, 0, 0, 0, 1])
    count, correct, summed = diagnostics.reliability_diagram(probs, labels)
    assert diagnostics.RELIABILITY_DIAGRAM_BINS == 10
    np.testing.assert_array_equal(count, [0, 0, 0, 0, 1, 1, 2, 0, 0, 3])
    np.testing.assert_array_equal(correct, [0, 0, 0, 0, 1, 1, 1, 0, 0, 2])
    np.testing.assert_allclose(summed, [0, 0, 0, 0, 0.5, 0.55, 1.30, 0, 0, 2.909], rtol=1e-6)
    # The ECE's bins are the 15 of [m/15, (m+1)/15): 0.5 in [7/15, 8/15).
    ece_count = np.asarray(diagnostics.reliability_bins(probs, labels)[0])
    assert ece_count.shape == (15,) and ece_count[7] == 1
