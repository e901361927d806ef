"""Probes of a regression agent's predictive uncertainty (Grover et al.).

An agent's belief samples ``f_m(x)`` (its ENN's one output per input) give
its predictive mean ``m(x)`` of ``f`` and its predictive standard deviation of
a target, ``s(x) = sqrt(var_m f_m(x) + noise_variance)``: the spread of its
belief about ``f`` plus the known noise, so the ``s(x, D)`` of the paper's
predictive distribution ``p(y | x, D)``. From those, at the training inputs
and at test inputs (a problem's pool):

- *self-certainty*: the mean over the T training inputs of ``(s - sigma)^2``,
  ``sigma`` the noise's standard deviation. The paper writes a sum over the
  observed points (its Eq. 2): T times ours; the mean compares different T.
- *MSE*: the mean over test inputs of ``(f(x) - m(x))^2``, how far the predictive
  mean is from the function (the paper's Table 1 beside its NLL). The paper scores
  held-out targets; against ``y = f + noise`` the squared error is, in expectation,
  this plus the noise variance (the noise is independent of the data and of the
  agent), so scoring f drops a constant every agent shares, and its sampling noise.
  For the exact posterior its expectation is the mean posterior variance of f.
- *inclusion@k*: the fraction of test inputs where ``|f(x) - m(x)| < k s(x)``,
  beside the fraction the agent's own belief expects
  (:func:`belief_inclusion`): for an agent whose belief is the true posterior
  the two agree in expectation over problems, which is what makes inclusion a
  calibration probe.
- *uncertainty-increase@delta*: test inputs binned by their Euclidean distance
  to the nearest training input; per bin, delta is the bin's mean distance and
  UI the fraction of its inputs whose ``s`` exceeds ``s`` at that nearest
  training input (the paper's Eq. 4). The paper gives neither the number nor
  the edges of its bins; ours hold equal counts, so that none is empty at any d.
- *uncertainty-reduction@k*: the mean over test inputs of
  ``|s(x, D + D'_k) - s(x, D)|`` after the agent is trained again with k more
  pairs ``D'_k`` (the paper's Eq. 5), beside the signed mean
  ``s(x, D) - s(x, D + D'_k)``, which says whether the uncertainty fell.

Everything here is a pure function of arrays; training the agent again and
drawing ``D'_k`` is :mod:`neural_testbed.leaderboard.probing`'s.

Reference: Grover, Tran, Shu, Poole and Murphy, "Probing uncertainty estimates
of neural processes", section 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base

__all__ = ["Belief", "belief_inclusion", "belief_samples", "inclusion", "mean_squared_error",
           "moments", "nearest_training_input", "predictive_std", "self_certainty",
           "uncertainty_increase", "uncertainty_reduction"]

# Inputs per call of the agent's apply: bounds the memory of [belief samples, inputs]
# and the size of an exact posterior's matrices (the oracle factorises them per call).
_INPUTS_PER_CALL = 256


class Belief(NamedTuple):
    """Belief samples of ``f`` at n inputs, with their probabilities."""

    values: jax.Array  # [R, n] f of each sample at each input
    weights: jax.Array  # [R] summing to 1


def belief_samples(key: jax.Array, enn: base.ENN, state: base.State, x: jax.Array,
                   num_samples: int) -> Belief:
    """The agent's belief at inputs ``x [n, d]`` from ``num_samples`` draws of its index.

    As in the evaluator, an agent with ``num_indices <= num_samples`` members is
    applied once per member, weighted by how often the draws picked it (a single
    model: one sample of weight 1); otherwise each draw is one sample of weight
    ``1 / num_samples``. Inputs go to ``apply`` in calls of at most 256 (the last
    call padded with the last input), so only the marginals at each input are
    the agent's: what every probe here uses.
    """
    indices = jax.vmap(enn.sample_index)(jax.random.split(key, num_samples))
    counted = enn.num_indices is not None and enn.num_indices <= num_samples
    if counted:
        weights = jnp.bincount(indices, length=enn.num_indices) / num_samples
        indices = jnp.arange(enn.num_indices)
    else:
        weights = jnp.full(num_samples, 1.0 / num_samples)
    n = x.shape[0]
    size = min(n, _INPUTS_PER_CALL)
    padded = jnp.concatenate([x, jnp.repeat(x[-1:], -n % size, axis=0)])

    def values_at(chunk):  # [size, d] -> [R, size]
        f = jax.vmap(lambda index: enn.apply(state, chunk, index))(indices)
        if f.shape[1:] != (size, 1):
            raise ValueError(f"agent returned outputs of shape {f.shape[1:]} for inputs of "
                             f"shape {chunk.shape}; expected ({size}, 1), one value per input")
        return f[..., 0]

    chunks = jax.lax.map(values_at, padded.reshape(-1, size, x.shape[1]))  # [C, R, size]
    values = jnp.moveaxis(chunks, 0, 1).reshape(weights.shape[0], -1)[:, :n]
    return Belief(values, weights)


def moments(belief: Belief) -> tuple[jax.Array, jax.Array]:
    """The belief's mean ``[n]`` and variance ``[n]`` of ``f`` at each input."""
    mean = belief.weights @ belief.values
    return mean, belief.weights @ (belief.values - mean) ** 2


def predictive_std(variance_f: jax.Array, noise_variance) -> jax.Array:
    """``s``: the predictive standard deviation of a target, ``sqrt(var f + noise)``."""
    return jnp.sqrt(variance_f + noise_variance)


def self_certainty(std_at_train: jax.Array, noise_variance) -> jax.Array:
    """Mean over the training inputs of ``(s - sigma)^2`` (the paper sums; see the module)."""
    return jnp.mean((std_at_train - jnp.sqrt(noise_variance)) ** 2)


def mean_squared_error(f: jax.Array, mean: jax.Array) -> jax.Array:
    """The mean over the inputs of ``(f - m)^2``, the predictive mean's squared error."""
    return jnp.mean((f - mean) ** 2)


def inclusion(f: jax.Array, mean: jax.Array, std: jax.Array,
              ks: Sequence[float]) -> jax.Array:
    """``[len(ks)]``: the fraction of inputs where ``|f - m| < k s``, per k."""
    ks = jnp.asarray(ks)[:, None]
    return jnp.mean(jnp.abs(f - mean)[None, :] < ks * std[None, :], axis=1)


def belief_inclusion(belief: Belief, mean: jax.Array, std: jax.Array,
                     ks: Sequence[float]) -> jax.Array:
    """``[len(ks)]``: the inclusion the agent expects, were ``f`` drawn from its belief:
    the belief's probability of ``|f_m - m| < k s``, averaged over the inputs.

    For a Gaussian belief of variance ``v`` this is ``2 Phi(k s / sqrt(v)) - 1``,
    above the nominal ``2 Phi(k) - 1`` because ``s`` includes the noise; a single
    model (``v = 0``) expects 1.
    """
    ks = jnp.asarray(ks)[:, None, None]
    inside = jnp.abs(belief.values - mean)[None] < ks * std[None, None, :]  # [K, R, n]
    return jnp.mean(jnp.einsum("r,krn->kn", belief.weights, inside.astype(mean.dtype)), axis=1)


def nearest_training_input(train_x: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per input of ``x [n, d]``: the Euclidean distance ``[n]`` to its nearest training
    input and that input's index ``[n]`` into ``train_x [T, d]``."""
    squared = (jnp.sum(x**2, axis=1)[:, None] - 2 * x @ train_x.T
               + jnp.sum(train_x**2, axis=1)[None, :])
    index = jnp.argmin(squared, axis=1)
    return jnp.linalg.norm(x - train_x[index], axis=1), index


def uncertainty_increase(distance: jax.Array, std: jax.Array, std_at_nearest: jax.Array,
                         num_bins: int) -> tuple[jax.Array, jax.Array]:
    """Uncertainty-increase@delta over ``num_bins`` equal-count bins of the distance.

    Inputs are ranked by ``distance`` to their nearest training input and cut
    into ``num_bins`` bins of (as near as possible) equal counts, nearest first.

    Returns:
      ``delta [num_bins]``, the mean distance in each bin, and ``ui [num_bins]``,
      the fraction of the bin's inputs where ``std > std_at_nearest``.
    """
    n = distance.shape[0]
    if not 1 <= num_bins <= n:
        raise ValueError(f"num_bins must be an integer from 1 to the number of inputs ({n}), "
                         f"got {num_bins!r}")
    rank = jnp.argsort(jnp.argsort(distance))
    bins = rank * num_bins // n
    counts = jnp.bincount(bins, length=num_bins)
    delta = jax.ops.segment_sum(distance, bins, num_bins) / counts
    increased = (std > std_at_nearest).astype(distance.dtype)
    return delta, jax.ops.segment_sum(increased, bins, num_bins) / counts


def uncertainty_reduction(std_before: jax.Array,
                          std_after: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The mean of ``|s_after - s_before|`` (the paper's UR) and of ``s_before - s_after``
    (positive where the added data made the agent surer) over the inputs."""
    return jnp.mean(jnp.abs(std_after - std_before)), jnp.mean(std_before - std_after)
