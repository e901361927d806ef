"""Acquisition criteria of (transductive) active learning on a Gaussian belief.

Every criterion reads one predictive covariance of ``f`` over the candidate
(pool) inputs followed by the target (test) inputs, ``cov [P + U, P + U]``
with the P candidates first, and the known noise variance of a queried label
``y = f(x) + e``. With a Gaussian predictive distribution the information
gains of Wang et al. (Appendix C) have closed forms:

- TIG (total information gain, MacKay 1992), eq. (4):
  ``1/2 log(1 + var(x) / noise)``, the information a label carries about the
  model: the largest predictive variance wins; blind to the targets.
- MIG (marginal information gain), eq. (5), averaged over the targets as the
  paper does: ``mean_u -1/2 log(1 - cov(x, u)^2 / (var(u) (var(x) + noise)))``,
  what one label tells about the function at the targets.
- BatchMIG, eq. (6): the same information for a whole batch of labels,
  ``mean_u -1/2 log(1 - c_u^T (C_BB + noise I)^-1 c_u / var(u))``.
  The best batch is combinatorial; as the paper (after BatchBALD) does, it is
  built greedily, one point at a time. By the chain rule the gain of adding x
  to the batch A is MIG of x under the covariance conditioned on A's noisy
  labels, so the greedy step is "pick the best MIG, then condition on it" (a
  rank-one update): points redundant with those already picked lose their gain.

A batch of TIG or MIG is the top scores at once (the paper's Algorithm 1);
random selection is uniform without replacement. Every function is pure and
jittable; ``available [P]`` marks the candidates not queried yet.

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
section 3.2 and Appendix C.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

__all__ = [
    "METHODS",
    "batch_mig",
    "condition_on_label",
    "greedy_batch_mig",
    "mig",
    "select",
    "tig",
]

METHODS = ("batchmig", "tig", "mig", "random")

# The explained fraction of a target's variance is below var(x) / (var(x) + noise) < 1 in
# exact arithmetic; clipping it keeps a float32 rounding from reaching log(0).
_MAX_EXPLAINED = 1.0 - 1e-6


def _information(explained: jax.Array, target_variance: jax.Array) -> jax.Array:
    """``-1/2 log(1 - explained / var(u))``, the mutual information of labels with a
    target whose variance they explain by ``explained``; 0 for a target the belief
    does not vary at (nothing to learn there, e.g. a single model's)."""
    varies = target_variance > 0
    fraction = explained / jnp.where(varies, target_variance, 1.0)
    fraction = jnp.where(varies, jnp.clip(fraction, 0.0, _MAX_EXPLAINED), 0.0)
    return -0.5 * jnp.log1p(-fraction)


def tig(cov: jax.Array, num_candidates: int, noise_variance) -> jax.Array:
    """TIG ``[P]`` of each candidate, eq. (4)."""
    variance = jnp.clip(jnp.diag(cov)[:num_candidates], 0.0)
    return 0.5 * jnp.log1p(variance / noise_variance)


def mig(cov: jax.Array, num_candidates: int, noise_variance) -> jax.Array:
    """MIG ``[P]`` of each candidate, eq. (5), averaged over the targets."""
    variance = jnp.diag(cov)
    cross = cov[:num_candidates, num_candidates:]  # [P, U]
    explained = cross**2 / (variance[:num_candidates, None] + noise_variance)
    return jnp.mean(_information(explained, variance[None, num_candidates:]), axis=1)


def batch_mig(cov: jax.Array, batch: jax.Array, num_candidates: int,
              noise_variance) -> jax.Array:
    """BatchMIG of the candidates ``batch [q]`` (indices), eq. (6) in closed form,
    averaged over the targets."""
    rows = cov[batch]  # [q, P + U]
    cross = rows[:, num_candidates:]  # [q, U]
    batch_cov = rows[:, batch] + noise_variance * jnp.eye(batch.shape[0])
    explained = jnp.sum(cross * jnp.linalg.solve(batch_cov, cross), axis=0)  # [U]
    return jnp.mean(_information(explained, jnp.diag(cov)[num_candidates:]))


def condition_on_label(cov: jax.Array, index: jax.Array, noise_variance) -> jax.Array:
    """The covariance of ``f`` after observing the noisy label at input ``index``."""
    column = cov[:, index]
    return cov - jnp.outer(column, column) / (column[index] + noise_variance)


def greedy_batch_mig(cov: jax.Array, available: jax.Array, batch_size: int,
                     noise_variance) -> tuple[jax.Array, jax.Array]:
    """A batch of ``batch_size`` available candidates chosen greedily for BatchMIG.

    Returns:
      The chosen indices ``[batch_size]`` in the order picked, and each one's gain
      ``[batch_size]``, whose sum is the batch's BatchMIG (the chain rule).
    """
    num_candidates = available.shape[0]

    def step(carry, _):
        cov, available = carry
        gains = jnp.where(available, mig(cov, num_candidates, noise_variance), -jnp.inf)
        index = jnp.argmax(gains)
        carry = condition_on_label(cov, index, noise_variance), available.at[index].set(False)
        return carry, (index, gains[index])

    _, (indices, gains) = jax.lax.scan(step, (cov, available), None, length=batch_size)
    return indices, gains


def _top_available(scores: jax.Array, available: jax.Array, batch_size: int) -> jax.Array:
    """The ``batch_size`` available candidates of highest score (ties: lowest index)."""
    return jax.lax.top_k(jnp.where(available, scores, -jnp.inf), batch_size)[1]


@functools.partial(jax.jit, static_argnames=("method", "batch_size"))
def select(method: str, key: jax.Array, cov: jax.Array | None, available: jax.Array,
           batch_size: int, noise_variance) -> jax.Array:
    """The next batch ``[batch_size]`` of candidate indices by ``method`` (one of
    :data:`METHODS`); ``cov`` is unused by ``"random"`` (may be None), ``key`` only by it.

    A belief that does not vary (a single model) scores every candidate 0 by
    every criterion, and the tie goes to the lowest indices.
    """
    num_candidates = available.shape[0]
    if method == "random":
        return _top_available(jax.random.uniform(key, (num_candidates,)), available, batch_size)
    if method == "batchmig":
        return greedy_batch_mig(cov, available, batch_size, noise_variance)[0]
    if method == "mig":
        return _top_available(mig(cov, num_candidates, noise_variance), available, batch_size)
    if method == "tig":
        return _top_available(tig(cov, num_candidates, noise_variance), available, batch_size)
    raise ValueError(f"unknown selection method {method!r}; allowed: {', '.join(METHODS)}")
