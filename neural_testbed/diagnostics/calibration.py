"""Accuracy and expected calibration error of a predictive distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["RELIABILITY_DIAGRAM_BINS", "accuracy", "ece_from_bins", "expected_calibration_error",
           "reliability_bins", "reliability_diagram"]

RELIABILITY_DIAGRAM_BINS = 10  # Li & Zhu's reliability diagrams: 10 bins of width 0.1


def accuracy(probs: jax.Array, labels: jax.Array) -> jax.Array:
    """Fraction of ``labels [n]`` equal to the argmax of ``probs [n, K]``."""
    return jnp.mean(jnp.argmax(probs, axis=-1) == labels)


def reliability_bins(
    probs: jax.Array, labels: jax.Array, num_bins: int = 15
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The reliability diagram's sums: per confidence bin, the count, the number
    correct and the summed confidence.

    Predictions are binned by their confidence (the top class probability)
    into ``num_bins`` equal-width bins of [0, 1], ``[m/B, (m+1)/B)`` as the ECE
    always was (a confidence exactly on an edge goes up; the UPDS bins of
    :mod:`divergence` follow the paper's ``((m-1)/B, m/B]``, which only differs
    there). Sums rather than means, so that chunks of inputs add up.
    """
    confidence = jnp.max(probs, axis=-1)
    bins = jnp.clip((confidence * num_bins).astype(jnp.int32), 0, num_bins - 1)
    return _bin_sums(probs, labels, confidence, bins, num_bins)


def reliability_diagram(
    probs: jax.Array, labels: jax.Array, num_bins: int = RELIABILITY_DIAGRAM_BINS
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Li & Zhu's reliability diagram (section 3.2.1): per confidence interval
    ``I_m = ((m - 1)/B, m/B]``, 10 of them as in their figures, the count, the number
    correct and the summed confidence (a confidence of 0 goes in the first).

    The ECE keeps its own 15 bins (:func:`reliability_bins`), as Li & Zhu's does.
    """
    confidence = jnp.max(probs, axis=-1)
    bins = jnp.clip(jnp.ceil(confidence * num_bins).astype(jnp.int32) - 1, 0, num_bins - 1)
    return _bin_sums(probs, labels, confidence, bins, num_bins)


def _bin_sums(probs, labels, confidence, bins, num_bins):
    """Count, number correct and summed confidence of the inputs in each bin."""
    correct = (jnp.argmax(probs, axis=-1) == labels).astype(probs.dtype)
    in_bin = jax.nn.one_hot(bins, num_bins, dtype=probs.dtype)  # [n, bins]
    return jnp.sum(in_bin, axis=0), in_bin.T @ correct, in_bin.T @ confidence


def expected_calibration_error(
    probs: jax.Array, labels: jax.Array, num_bins: int = 15
) -> jax.Array:
    """ECE: ``sum_b (n_b / n) |accuracy_b - confidence_b|`` over :func:`reliability_bins`.

    Args:
      probs: ``[n, K]`` predicted class probabilities.
      labels: ``[n]`` integer labels.
      num_bins: number of confidence bins.

    Returns:
      The ECE, a scalar in [0, 1].
    """
    return ece_from_bins(jnp.stack(reliability_bins(probs, labels, num_bins)), probs.shape[0])


def ece_from_bins(bins: jax.Array, num_inputs: int) -> jax.Array:
    """The ECE of stacked :func:`reliability_bins` ``[3, B]`` over ``num_inputs`` inputs."""
    return jnp.sum(jnp.abs(bins[1] - bins[2])) / num_inputs
