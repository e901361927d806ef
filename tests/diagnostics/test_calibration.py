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
