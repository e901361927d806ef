"""The KL estimate d_KL^tau from per-test-sample joint log-likelihoods, and the choice of
estimator.

For each of N independent test tau-samples, the KL contribution is the exact
log-likelihood of its labels minus the agent's estimated joint log-likelihood;
without an exact likelihood (real data) it is the negative log-likelihood alone.
The terms are independent, so their standard error covers the sampling of the
agent too. The evaluators (:mod:`neural_testbed.evaluation`) compute the agent's
log-likelihoods from its belief samples and reduce them here.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "choose_estimator",
    "clip_infinite_terms",
    "evaluations",
    "kl_estimate",
]

Estimator = Literal["auto", "monte_carlo", "partition"]
ESTIMATORS = ("auto", "monte_carlo", "partition")


def choose_estimator(tau: int, estimator: Estimator = "auto",
                     max_monte_carlo_tau: int = 9) -> str:
    """Resolves ``"auto"``: Monte Carlo up to ``max_monte_carlo_tau``, random
    partitioning above (the reference the paper ran: tau < 10; its current version:
    tau <= 10)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    if estimator == "auto":
        return "monte_carlo" if tau <= max_monte_carlo_tau else "partition"
    return estimator


def evaluations(taus: tuple[int, ...], estimator: Estimator = "auto",
                max_monte_carlo_tau: int = 9) -> list[tuple[int, str]]:
    """The (tau, estimator) evaluations of one trained agent at ``taus``.

    Each tau uses ``estimator``; for a tau curve (more than two taus) that
    crosses the switch of ``"auto"`` from Algorithm 3 to 4, the first tau on
    Algorithm 4 is also evaluated with Algorithm 3, stored as
    ``"monte_carlo"``, so that a jump in the curve there can be told apart from
    the agent.
    """
    pairs = [(tau, estimator) for tau in taus]
    if estimator == "auto" and len(taus) > 2:
        on_partition = [t for t in taus
                        if choose_estimator(t, "auto", max_monte_carlo_tau) == "partition"]
        if on_partition and len(on_partition) < len(taus):
            pairs.append((min(on_partition), "monte_carlo"))
    return pairs


def clip_infinite_terms(terms: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Replaces ``+inf`` terms by the largest finite term, as the reference testbed does.

    An infinite term means the agent gave probability 0 to observed labels;
    clipping keeps one such sample from making the whole estimate infinite,
    but it flatters exactly the overconfident agents, so the count is
    returned and stored. NaN terms stay NaN; if no term is finite the mean
    stays infinite.

    Returns:
      The clipped terms and the number of terms clipped (int32).
    """
    infinite = jnp.isposinf(terms)
    largest = jnp.max(jnp.where(jnp.isfinite(terms), terms, -jnp.inf))
    largest = jnp.where(jnp.isfinite(largest), largest, jnp.inf)
    return jnp.where(infinite, largest, terms), jnp.sum(infinite).astype(jnp.int32)


def kl_estimate(log_likelihood: jax.Array, exact_log_likelihood: jax.Array | None
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """d_KL (or the NLL) over N test tau-samples, its standard error, and the terms clipped.

    Args:
      log_likelihood: ``[N]`` the agent's joint log-likelihood of each test sample.
      exact_log_likelihood: ``[N]`` the exact log-likelihood of the same targets, or
        ``None`` (real data): the result is then the negative log-likelihood.

    Returns:
      The mean of the terms (after :func:`clip_infinite_terms`), its standard error
      (0 for one test sample) and the number of infinite terms clipped (int32).
    """
    terms = (-log_likelihood if exact_log_likelihood is None
             else exact_log_likelihood - log_likelihood)
    terms, num_clipped = clip_infinite_terms(terms)
    num_test = terms.shape[0]
    stderr = jnp.std(terms, ddof=1) / jnp.sqrt(num_test) if num_test > 1 else jnp.zeros(())
    return jnp.mean(terms), stderr, num_clipped
