"""Uncertainty-probability diagrams (UPDS) and the average uncertainty divergence (AUD).

Li & Zhu (section 3.3): inputs are grouped by their (rescaled) confidence into
equal-width bins of [0, 1]; a diagram is the mean uncertainty in each bin, one
curve per condition (in or out of distribution; right or wrong predictions).
AUD is the mean absolute difference between two conditions' curves over the
bins that hold inputs of both. Both are computed from per-bin sums and
counts, which add up across chunks of inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["average_uncertainty_divergence", "binned_sums", "diagram"]


def binned_sums(
    confidence: jax.Array, values: jax.Array, mask: jax.Array, num_bins: int
) -> tuple[jax.Array, jax.Array]:
    """Per-bin count and per-bin sums of ``values [..., U]`` over inputs where ``mask``.

    ``confidence`` in [0, 1] picks the bin (``(m - 1) / B < c <= m / B``, the
    paper's intervals, with 0 in the first bin). Returns ``counts [B]`` and
    ``sums [U, B]``.
    """
    bins = jnp.clip(jnp.ceil(confidence * num_bins).astype(jnp.int32) - 1, 0, num_bins - 1)
    one_hot = jax.nn.one_hot(bins.reshape(-1), num_bins) * mask.reshape(-1, 1)  # [n, B]
    flat = values.reshape(-1, values.shape[-1])  # [n, U]
    return jnp.sum(one_hot, axis=0), flat.T @ one_hot


def diagram(counts: jax.Array, sums: jax.Array) -> jax.Array:
    """Mean uncertainty per bin, ``[U, B]``; NaN where a bin is empty."""
    return jnp.where(counts > 0, sums / jnp.maximum(counts, 1), jnp.nan)


def average_uncertainty_divergence(
    counts_a: jax.Array, sums_a: jax.Array, counts_b: jax.Array, sums_b: jax.Array
) -> jax.Array:
    """AUD ``[U]`` between two conditions; NaN if no bin holds inputs of both."""
    both = (counts_a > 0) & (counts_b > 0)
    gap = jnp.abs(sums_a / jnp.maximum(counts_a, 1) - sums_b / jnp.maximum(counts_b, 1))
    num_shared = jnp.sum(both)
    return jnp.where(num_shared > 0,
                     jnp.sum(jnp.where(both, gap, 0.0), axis=-1) / jnp.maximum(num_shared, 1),
                     jnp.nan)
