"""How much of a prediction's uncertainty is the data's and how much the agent's.

From the class probabilities ``p_m`` of M belief samples at one input (with
weights ``w_m`` summing to one), Kwon et al.'s split of the predictive
covariance (Li & Zhu, equations 3 and 4):

- aleatoric = ``sum_m w_m (diag(p_m) - p_m p_m^T)``: noise the agent expects
  even if it knew the function;
- epistemic = ``sum_m w_m (p_m - p_bar)(p_m - p_bar)^T``: disagreement between
  belief samples, which more data would remove;

and they sum to the covariance of the mean prediction, ``diag(p_bar) - p_bar
p_bar^T``. Each K x K matrix is reduced to one number per input by its trace
(the paper leaves the reduction open): aleatoric ``1 - sum_m w_m |p_m|^2``,
epistemic ``sum_m w_m |p_m|^2 - |p_bar|^2``, total ``1 - |p_bar|^2``. The
entropy split is the same idea in nats: H(p_bar) = E_m H(p_m) + mutual
information.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Split", "covariances", "split"]


class Split(NamedTuple):
    """Per-input uncertainty parts; each array has the probabilities' shape without K."""

    aleatoric: jax.Array  # trace of the mean of diag(p_m) - p_m p_m^T
    epistemic: jax.Array  # trace of the weighted covariance of the p_m
    total: jax.Array  # trace of diag(p_bar) - p_bar p_bar^T = aleatoric + epistemic
    total_entropy: jax.Array  # H(p_bar), nats
    expected_entropy: jax.Array  # sum_m w_m H(p_m)
    mutual_information: jax.Array  # total_entropy - expected_entropy (>= 0)


def split(probs: jax.Array, weights: jax.Array) -> Split:
    """The uncertainty split of belief samples ``probs [M, ..., K]`` with ``weights [M]``."""
    w = weights.reshape(weights.shape + (1,) * (probs.ndim - 1))
    mean = jnp.sum(w * probs, axis=0)  # p_bar [..., K]
    mean_square = jnp.sum(w[..., 0] * jnp.sum(probs**2, axis=-1), axis=0)  # sum_m w_m |p_m|^2
    mean_norm = jnp.sum(mean**2, axis=-1)
    total_entropy = jnp.sum(jax.scipy.special.entr(mean), axis=-1)
    expected_entropy = jnp.sum(w[..., 0] * jnp.sum(jax.scipy.special.entr(probs), axis=-1), axis=0)
    return Split(
        aleatoric=1.0 - mean_square,
        epistemic=jnp.maximum(mean_square - mean_norm, 0.0),  # >= 0 up to rounding
        total=1.0 - mean_norm,
        total_entropy=total_entropy,
        expected_entropy=expected_entropy,
        mutual_information=jnp.maximum(total_entropy - expected_entropy, 0.0),
    )


def covariances(probs: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The full K x K aleatoric and epistemic matrices of ``probs [M, K]`` (equations 3, 4)."""
    mean = weights @ probs
    aleatoric = jnp.einsum("m,mk,kl->kl", weights, probs, jnp.eye(probs.shape[-1])) - jnp.einsum(
        "m,mk,ml->kl", weights, probs, probs)
    centred = probs - mean
    epistemic = jnp.einsum("m,mk,ml->kl", weights, centred, centred)
    return aleatoric, epistemic
