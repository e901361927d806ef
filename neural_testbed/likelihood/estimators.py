"""Estimators of an agent's joint log-likelihood of tau labels.

An agent's belief is represented by weighted *members*: sampled models, each
giving class log-probabilities at the tau inputs. Weights let the evaluator
evaluate each distinct member of a finite ensemble once, weighted by how often
it was drawn among the M samples, which gives the same estimate as evaluating
all M samples. Everything is computed in log space, so no sum of
probabilities can underflow to ``-inf`` while its true value is finite.

Reference: Osband et al., "Evaluating predictive distributions: does Bayesian
deep learning work?", Algorithms 3 (Monte Carlo) and 4 (random partitioning).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, logsumexp, ndtri

__all__ = [
    "NUMERICS",
    "Numerics",
    "monte_carlo_log_likelihood",
    "partition_cells",
    "partition_log_likelihood",
    "partition_log_likelihood_and_cells",
]

# "reference": as the reference testbed computes Algorithm 4: the probabilities
# averaged in a cell are Phi(clipped probit), i.e. clipped to
# [Phi(-clip), Phi(clip)], and every cell's average is smoothed as
# (sum + 1e-6) / (count + 1e-6) in units of samples. "paper": Algorithm 4 as
# printed, raw probabilities and no smoothing.
Numerics = Literal["reference", "paper"]
NUMERICS = ("reference", "paper")
_REFERENCE_SMOOTHING = 1e-6  # samples; the reference's (sum + 1e-6) / (count + 1e-6)


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


def _segment_logsumexp(values: jax.Array, segments: jax.Array, num_segments: int) -> jax.Array:
    """``log sum_{m in s} exp(values_m)`` per segment ``s``, ``-inf`` for an empty one.

    Shifting by each segment's own maximum keeps the largest term at 1, so the
    result is finite whenever one of its terms is.
    """
    peak = jax.ops.segment_max(values, segments, num_segments)  # [segments, ...]
    peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
    total = jax.ops.segment_sum(jnp.exp(values - peak[segments]), segments, num_segments)
    return jnp.log(total) + peak


def _cell_sums(values: jax.Array, cell: jax.Array, num_cells: int) -> jax.Array:
    """The sums of ``values [members, n]`` over each cell's members: ``[cells, n]``.

    On a CPU a scatter-add (with 1024 cells, the real sweep's, much faster there than
    the one-hot matrix product). Elsewhere the matrix product: a GPU adds a scatter with
    atomics, in an order, and so with a rounding, that changes from run to run."""
    if jax.default_backend() == "cpu":
        return jax.ops.segment_sum(values, cell, num_cells)
    return jax.nn.one_hot(cell, num_cells, dtype=values.dtype).T @ values


def partition_log_likelihood(
    key: jax.Array,
    log_probs: jax.Array,
    labels: jax.Array,
    log_weights: jax.Array,
    num_hyperplanes: int = 7,
    probit_clip: float = 5.0,
    numerics: Numerics = "reference",
    num_samples: int = 1000,
) -> jax.Array:
    """Algorithm 4: random partitioning of the members by hyperplanes.

    Each member's probits ``Phi^-1(p_{m,t,k})``, clipped to
    ``[-probit_clip, probit_clip]``, form a vector of length ``K * tau``; the
    signs of ``A l + b`` for ``num_hyperplanes`` random Gaussian hyperplanes
    put it in one of ``2**num_hyperplanes`` cells. Within each cell the
    members' probabilities are averaged (weighted), and the cells' joint
    likelihoods are mixed by the cells' total weights. When every member has
    its own cell this equals the exact mixture likelihood (with
    ``numerics="paper"``). Every sum is a per-cell log-sum-exp.

    Args:
      key: PRNG key for the hyperplanes.
      log_probs: ``[members, tau, K]`` class log-probabilities of each member.
      labels: ``[tau]`` integer labels.
      log_weights: ``[members]`` log of weights that sum to one.
      num_hyperplanes: d, the number of random hyperplanes.
      probit_clip: probits are clipped to this absolute value.
      numerics: ``"reference"`` (the reference testbed's probability floor
        and cell smoothing, the default) or ``"paper"`` (neither).
      num_samples: M, the number of belief samples the weights count: the
        reference's smoothing is in units of samples.

    Returns:
      The estimated joint log-likelihood, a scalar.
    """
    return partition_log_likelihood_and_cells(
        key, log_probs, labels, log_weights, num_hyperplanes, probit_clip, numerics,
        num_samples)[0]


def partition_log_likelihood_and_cells(
    key: jax.Array,
    log_probs: jax.Array,
    labels: jax.Array,
    log_weights: jax.Array,
    num_hyperplanes: int = 7,
    probit_clip: float = 5.0,
    numerics: Numerics = "reference",
    num_samples: int = 1000,
) -> tuple[jax.Array, jax.Array]:
    """:func:`partition_log_likelihood` and how many cells hold a drawn member.

    The count is a health check: one occupied cell makes the estimate that of
    the averaged prediction, blind to how the members disagree. Computing both
    from one partition halves the cost of asking for the count (XLA does not
    merge two partitions of the same key).
    """
    if numerics not in NUMERICS:
        raise ValueError(f"unknown numerics {numerics!r}; allowed: {', '.join(NUMERICS)}")
    if log_probs.shape[0] == 1:
        return _one_member_log_likelihood(log_probs, labels, log_weights, probit_clip,
                                          numerics, num_samples), jnp.array(1, jnp.int32)
    num_cells = 2**num_hyperplanes
    cell = partition_cells(key, log_probs, num_hyperplanes, probit_clip)
    label_log_probs = _label_log_probs(log_probs, labels)  # [members, tau]
    if numerics == "paper":
        cell_log_weight = _segment_logsumexp(log_weights, cell, num_cells)  # [cells]
        cell_log_sum = _segment_logsumexp(label_log_probs + log_weights[:, None], cell, num_cells)
        cell_log_mean = cell_log_sum - cell_log_weight[:, None]
    else:
        # Phi(clip(Phi^-1(p))) = clip(p, Phi(-c), Phi(c)), since Phi is monotone.
        floor = log_ndtr(-probit_clip)
        label_log_probs = jnp.clip(label_log_probs, floor, log_ndtr(probit_clip))
        # With the floor, every term w_m p_{m,t} / max_m' p_{m',t} is at least
        # Phi(-c) / M (about 3e-10 for M = 1000), so one shift per t serves
        # every cell and the cell sums are plain sums, exactly as a per-cell
        # log-sum-exp but without a maximum per cell.
        weights = jnp.exp(log_weights)  # [members]
        drawn = weights[:, None] > 0
        shift = jnp.max(jnp.where(drawn, label_log_probs, floor), axis=0)  # [tau]
        scaled = jnp.where(drawn, jnp.exp(label_log_probs - shift), 0.0) * weights[:, None]
        sums = _cell_sums(jnp.concatenate([weights[:, None], scaled], axis=1), cell, num_cells)
        cell_log_weight = jnp.log(sums[:, 0])  # [cells], -inf where empty
        cell_log_sum = jnp.log(sums[:, 1:]) + shift
        # The reference's (sum + 1e-6) / (count + 1e-6), in units of samples.
        log_smoothing = jnp.log(_REFERENCE_SMOOTHING / num_samples)
        cell_log_mean = (jnp.logaddexp(cell_log_sum, log_smoothing)
                         - jnp.logaddexp(cell_log_weight, log_smoothing)[:, None])
    occupied = jnp.isfinite(cell_log_weight)
    cell_joint = cell_log_weight + jnp.where(occupied[:, None], cell_log_mean, 0.0).sum(axis=-1)
    return logsumexp(jnp.where(occupied, cell_joint, -jnp.inf)), jnp.sum(occupied)


def _one_member_log_likelihood(log_probs, labels, log_weights, probit_clip, numerics,
                               num_samples):
    """Algorithm 4 for a single member (an mlp, a one-member ensemble): whatever the
    hyperplanes, the member is alone in its cell, so the estimate is its cell's joint
    term, computed here with the same operations as the general path on that cell
    (the same numbers) without the other 2^d - 1 empty cells' arithmetic, which made
    the tau = 100 evaluation of a single network four times slower."""
    label_log_probs = _label_log_probs(log_probs, labels)[0]  # [tau]
    log_weight = log_weights[0]
    if numerics == "paper":
        cell_log_mean = (label_log_probs + log_weight) - log_weight
        return log_weight + cell_log_mean.sum()
    label_log_probs = jnp.clip(label_log_probs, log_ndtr(-probit_clip), log_ndtr(probit_clip))
    weight = jnp.exp(log_weight)
    # The general path's cell sums: exp(0) * weight, and log of them plus the shift.
    cell_log_weight = jnp.log(weight)
    cell_log_sum = cell_log_weight + label_log_probs
    log_smoothing = jnp.log(_REFERENCE_SMOOTHING / num_samples)
    cell_log_mean = (jnp.logaddexp(cell_log_sum, log_smoothing)
                     - jnp.logaddexp(cell_log_weight, log_smoothing))
    return cell_log_weight + cell_log_mean.sum()
