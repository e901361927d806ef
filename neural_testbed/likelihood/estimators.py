"""Estimators of an agent's joint log-likelihood of tau labels.

An agent's belief is represented by weighted *members*: sampled models, each
giving class log-probabilities at the tau inputs. Weights let the evaluator
evaluate each distinct member of a finite ensemble once, weighted by how often
it was drawn among the M samples, which gives the same estimate as evaluating
all M samples. Everything is computed in log space.

Reference: Osband et al., "Evaluating predictive distributions: does Bayesian
deep learning work?", Algorithms 3 (Monte Carlo) and 4 (random partitioning).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp, ndtri

__all__ = ["monte_carlo_log_likelihood", "partition_cells", "partition_log_likelihood"]


def _label_log_probs(log_probs: jax.Array, labels: jax.Array) -> jax.Array:
    """``log p_{m,t,y_t}``: ``[members, tau, K], [tau] -> [members, tau]``."""
    return jnp.take_along_axis(log_probs, labels[None, :, None], axis=-1)[..., 0]


def monte_carlo_log_likelihood(
    log_probs: jax.Array, labels: jax.Array, log_weights: jax.Array
) -> jax.Array:
    """Algorithm 3: ``log sum_m w_m prod_t p_{m,t,y_t}``.

    Args:
      log_probs: ``[members, tau, K]`` class log-probabilities of each member.
      labels: ``[tau]`` integer labels.
      log_weights: ``[members]`` log of weights that sum to one (``-inf`` for
        a member that was never drawn).

    Returns:
      The estimated joint log-likelihood, a scalar.
    """
    joint = _label_log_probs(log_probs, labels).sum(axis=-1)
    return logsumexp(joint + log_weights)


def partition_cells(
    key: jax.Array,
    log_probs: jax.Array,
    num_hyperplanes: int = 7,
    probit_clip: float = 5.0,
) -> jax.Array:
    """The cell of each member under random hyperplanes (Algorithm 4's partition).

    Args:
      key: PRNG key for the hyperplanes ``A`` and offsets ``b``.
      log_probs: ``[members, tau, K]`` class log-probabilities of each member.
      num_hyperplanes: d, the number of hyperplanes.
      probit_clip: probits are clipped to this absolute value.

    Returns:
      ``[members]`` int32 cell ids in ``[0, 2**num_hyperplanes)``: the bits
      of ``A l_m + b >= 0`` for the member's probit vector ``l_m``.
    """
    num_members, tau, num_classes = log_probs.shape
    probits = jnp.clip(ndtri(jnp.exp(log_probs)), -probit_clip, probit_clip)
    probits = probits.reshape(num_members, tau * num_classes)
    a_key, b_key = jax.random.split(key)
    a = jax.random.normal(a_key, (tau * num_classes, num_hyperplanes))
    b = jax.random.normal(b_key, (num_hyperplanes,))
    bits = (probits @ a + b >= 0).astype(jnp.int32)  # [members, hyperplanes]
    return bits @ (2 ** jnp.arange(num_hyperplanes, dtype=jnp.int32))


def partition_log_likelihood(
    key: jax.Array,
    log_probs: jax.Array,
    labels: jax.Array,
    log_weights: jax.Array,
    num_hyperplanes: int = 7,
    probit_clip: float = 5.0,
) -> jax.Array:
    """Algorithm 4: random partitioning of the members by hyperplanes.

    Each member's probits ``Phi^-1(p_{m,t,k})``, clipped to
    ``[-probit_clip, probit_clip]``, form a vector of length ``K * tau``; the
    signs of ``A l + b`` for ``num_hyperplanes`` random Gaussian hyperplanes
    put it in one of ``2**num_hyperplanes`` cells. Within each cell the
    members' probabilities are averaged (weighted), and the cells' joint
    likelihoods are mixed by the cells' total weights. When every member has
    its own cell this equals the exact mixture likelihood.

    Args:
      key: PRNG key for the hyperplanes.
      log_probs: ``[members, tau, K]`` class log-probabilities of each member.
      labels: ``[tau]`` integer labels.
      log_weights: ``[members]`` log of weights that sum to one.
      num_hyperplanes: d, the number of random hyperplanes.
      probit_clip: probits are clipped to this absolute value.

    Returns:
      The estimated joint log-likelihood, a scalar.
    """
    cell = partition_cells(key, log_probs, num_hyperplanes, probit_clip)
    membership = jax.nn.one_hot(cell, 2**num_hyperplanes)  # [members, cells]

    weights = jnp.exp(log_weights)  # [members]
    label_log_probs = _label_log_probs(log_probs, labels)  # [members, tau]
    # Average probabilities within cells in a rescaled linear space: shifting
    # by the largest drawn member's log-prob at each t keeps the best cell's
    # sum >= its weight, so the result cannot underflow to -inf.
    drawn = weights[:, None] > 0
    shift = jnp.max(jnp.where(drawn, label_log_probs, -jnp.inf), axis=0)  # [tau]
    scaled = jnp.where(drawn, jnp.exp(label_log_probs - shift), 0.0) * weights[:, None]
    # One matmul for weights and sums, so identical members give exactly 1.
    sums = membership.T @ jnp.concatenate([weights[:, None], scaled], axis=1)
    cell_weight, cell_sum = sums[:, 0], sums[:, 1:]  # [cells], [cells, tau]
    occupied = cell_weight > 0
    safe_weight = jnp.where(occupied, cell_weight, 1.0)
    cell_log_mean = jnp.log(cell_sum) - jnp.log(safe_weight)[:, None] + shift
    cell_joint = jnp.log(safe_weight) + cell_log_mean.sum(axis=-1)
    return logsumexp(jnp.where(occupied, cell_joint, -jnp.inf))
