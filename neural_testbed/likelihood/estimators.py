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

import math
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

# "reference": as the reference testbed computes Algorithm 4: probits clipped to
# [-clip, clip] place the members in cells, the probabilities averaged in a cell
# are Phi(clipped probit), i.e. clipped to [Phi(-clip), Phi(clip)], and every
# cell's average is smoothed as (sum + 1e-6) / (count + 1e-6) in units of
# samples. "paper": Algorithm 4 as printed: unclipped probits, raw probabilities
# and no smoothing.
Numerics = Literal["reference", "paper"]
NUMERICS = ("reference", "paper")
_REFERENCE_SMOOTHING = 1e-6  # samples; the reference's (sum + 1e-6) / (count + 1e-6)
_REFERENCE_PROBIT_CLIP = 5.0  # the reference's clip of the probits, and so its floor Phi(-5)
# Below this log-probability ndtri(exp(.)) would see a float32 that is tiny (under
# 1.8e-35) or flushed to 0; the probit is then found from the log-probability itself.
_LOG_DEEP_TAIL = -80.0
# A probability of exactly 0 (a -inf logit) has probit -inf, which would make A l + b
# NaN (inf - inf); a log-probability below this (0, or a logit gap beyond 1e30 nats) is
# raised to it: a probit of about -1.4e15, small enough that A l cannot overflow.
_LOG_ZERO = -1e30


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


def _ndtri_of_log(log_p: jax.Array) -> jax.Array:
    """``Phi^-1(exp(log_p))`` for ``log_p <= log(1/2)``, accurate where ``exp(log_p)`` is
    below float32's range.

    There (x below -12) it solves ``log Phi(x) = log_p`` with Phi's asymptotic series,
    ``log Phi(x) = -x^2/2 - log(2 pi)/2 - log(x^2)/2 + log(1 - 1/x^2 + 3/x^4)`` (the next
    term, ``15/x^6``, moves x by under 3e-8 of itself), by the fixed point of
    ``x^2 = -2 log_p - log(2 pi) - log(x^2) + 2 log(1 - 1/x^2 + 3/x^4)``, which contracts
    by a factor ``1/x^2 < 0.01``: no difference of two large numbers, so ``x`` is as
    precise as ``log_p`` allows.
    """
    direct = ndtri(jnp.exp(jnp.maximum(log_p, _LOG_DEEP_TAIL)))
    s = -2.0 * jnp.clip(log_p, _LOG_ZERO, _LOG_DEEP_TAIL) - math.log(2 * math.pi)
    x2 = s - jnp.log(s)
    for _ in range(3):
        x2 = s - jnp.log(x2) + 2.0 * jnp.log1p(-1.0 / x2 + 3.0 / (x2 * x2))
    return jnp.where(log_p > _LOG_DEEP_TAIL, direct, -jnp.sqrt(x2))


def _probits(log_probs: jax.Array, probit_clip: float | None = None) -> jax.Array:
    """The probits ``Phi^-1(p)`` of class log-probabilities ``[..., K]``.

    With ``probit_clip``, ``clip(ndtri(exp(log_probs)), -probit_clip, probit_clip)``,
    as the reference computes them. Without, the unclipped probits of the paper's
    Algorithm 4, from the log-probabilities so that neither tail saturates in float32:
    a class of probability above 1/2 (the most likely one) gets ``-Phi^-1(1 - p)``
    with ``log(1 - p)`` the log-sum-exp of the other classes, every other class
    ``Phi^-1(p)`` from ``log p`` (:func:`_ndtri_of_log`). They are finite for every
    probability, even 0 or 1 (about ``-+1.4e15``); with K = 2 the two classes' probits
    are each other's negatives, as in exact arithmetic.
    """
    if probit_clip is not None:
        return jnp.clip(ndtri(jnp.exp(log_probs)), -probit_clip, probit_clip)
    num_classes = log_probs.shape[-1]
    is_top = jnp.arange(num_classes) == jnp.argmax(log_probs, axis=-1, keepdims=True)
    log_rest = logsumexp(jnp.where(is_top, -jnp.inf, log_probs), axis=-1, keepdims=True)
    upper = is_top & (log_probs > math.log(0.5))
    return jnp.where(upper, -_ndtri_of_log(log_rest), _ndtri_of_log(log_probs))


def partition_cells(
    key: jax.Array,
    log_probs: jax.Array,
    num_hyperplanes: int = 7,
    probit_clip: float | None = _REFERENCE_PROBIT_CLIP,
) -> jax.Array:
    """The cell of each member under random hyperplanes (Algorithm 4's partition).

    Args:
      key: PRNG key for the hyperplanes ``A`` and offsets ``b``.
      log_probs: ``[members, tau, K]`` class log-probabilities of each member.
      num_hyperplanes: d, the number of hyperplanes.
      probit_clip: probits are clipped to this absolute value (the reference's 5 by
        default); None: the unclipped probits of the paper (:func:`_probits`).

    Returns:
      ``[members]`` int32 cell ids in ``[0, 2**num_hyperplanes)``: the bits
      of ``A l_m + b >= 0`` for the member's probit vector ``l_m``.
    """
    num_members, tau, num_classes = log_probs.shape
    vectors = _probits(log_probs, probit_clip).reshape(num_members, tau * num_classes)
    a_key, b_key = jax.random.split(key)
    a = jax.random.normal(a_key, (tau * num_classes, num_hyperplanes))
    b = jax.random.normal(b_key, (num_hyperplanes,))
    bits = (vectors @ a + b >= 0).astype(jnp.int32)  # [members, hyperplanes]
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
    probit_clip: float | None = None,
    numerics: Numerics = "reference",
    num_samples: int = 1000,
) -> jax.Array:
    """Algorithm 4: random partitioning of the members by hyperplanes.

    Each member's probits ``Phi^-1(p_{m,t,k})`` (clipped to
    ``[-probit_clip, probit_clip]`` under the reference's numerics) form a vector
    of length ``K * tau``; the signs of ``A l + b`` for ``num_hyperplanes``
    random Gaussian hyperplanes put it in one of ``2**num_hyperplanes`` cells. Within each cell the
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
      probit_clip: probits are clipped to this absolute value, and under the
        reference's numerics probabilities to ``[Phi(-clip), Phi(clip)]``; None
        (the default): the numerics' own, 5 under ``"reference"`` and no clip under
        ``"paper"``.
      numerics: ``"reference"`` (the reference testbed's clipped probits,
        probability floor and cell smoothing, the default) or ``"paper"`` (none
        of them).
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
    probit_clip: float | None = None,
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
    if probit_clip is None and numerics == "reference":
        probit_clip = _REFERENCE_PROBIT_CLIP
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
