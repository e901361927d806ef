"""Posterior predictive correlations on regression problems (Wang et al.).

An agent's belief samples at the Q probe inputs give its correlation matrix
of ``f`` between them; its *metacorrelation* is the Pearson correlation, over
the Q (Q - 1) / 2 pairs of probes, between those correlations and the exact
posterior's. A single model has no predictive correlations (its samples do
not vary): its metacorrelation is not applicable (NaN, stored as null), never 0.

Beside it, from the same samples, the agent's Gaussian predictive of the
targets at the probes (:class:`xll.Predictive`) and its XLL with the exact
posterior as the reference (:mod:`neural_testbed.diagnostics.xll`). The XLL is
of the targets, whose predictive covariance includes the known noise, so a
single model has one: that of the identity correlation matrix (independent
targets), the value any agent's correlations should beat.

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
section 3.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed.diagnostics import xll

__all__ = ["REGRESSION_METRICS", "RegressionDiagnostics", "as_regression_record",
           "metacorrelation", "metacorrelation_of_correlation", "regression_diagnostics",
           "sample_correlation"]

# Scalars a regression row's diagnostics hold, by the names `leaderboard --metrics` takes.
REGRESSION_METRICS = ("metacorrelation", "predictive_variance", "xll")


class RegressionDiagnostics(NamedTuple):
    """One regression evaluation's diagnostics (a leading problem axis when vmapped)."""

    metacorrelation: jax.Array  # NaN where the agent's samples do not vary
    predictive_variance: jax.Array  # mean over probes of the variance of f across samples
    xll: jax.Array  # XLL of the probes' targets, the exact posterior the reference
    predictive: xll.Predictive  # the agent's predictive at the probes (not a row metric)


def sample_correlation(samples: jax.Array) -> jax.Array:
    """``[M, Q]`` samples -> ``[Q, Q]`` correlation matrix (NaN where a probe's values
    do not vary)."""
    centred = samples - jnp.mean(samples, axis=0)
    cov = centred.T @ centred / samples.shape[0]
    scale = jnp.sqrt(jnp.diag(cov))
    return cov / (scale[:, None] * scale[None, :])


def metacorrelation(samples: jax.Array, reference_correlation: jax.Array) -> jax.Array:
    """Pearson correlation over the probe pairs ``i < j`` of the samples' correlations
    and ``reference_correlation``."""
    return metacorrelation_of_correlation(sample_correlation(samples), reference_correlation)


def metacorrelation_of_correlation(correlation: jax.Array,
                                   reference_correlation: jax.Array) -> jax.Array:
    """Pearson correlation over the pairs ``i < j`` of two ``[Q, Q]`` correlation matrices:
    the metacorrelation of a belief known by its covariance rather than its samples."""
    rows, cols = np.triu_indices(reference_correlation.shape[0], k=1)
    ours = correlation[rows, cols]
    theirs = reference_correlation[rows, cols]
    ours, theirs = ours - jnp.mean(ours), theirs - jnp.mean(theirs)
    return jnp.sum(ours * theirs) / jnp.sqrt(jnp.sum(ours**2) * jnp.sum(theirs**2))


def regression_diagnostics(samples: jax.Array, belief: xll.Predictive, targets: jax.Array,
                           reference_mean: jax.Array, reference_variance: jax.Array,
                           reference_correlation: jax.Array) -> RegressionDiagnostics:
    """The diagnostics of belief samples ``[M, Q]`` at the probes and their predictive
    ``belief``, against the exact posterior's mean, variance and correlations of f there
    and the probes' noisy ``targets [Q]``."""
    scale = jnp.sqrt(reference_variance)
    reference_covariance = (reference_correlation * scale[:, None] * scale[None, :]
                            + belief.noise_variance * jnp.eye(scale.shape[0]))
    batch_size = min(xll.BATCH_SIZE, scale.shape[0])
    return RegressionDiagnostics(
        metacorrelation(samples, reference_correlation), jnp.mean(jnp.var(samples, axis=0)),
        xll.cross_normalized_log_likelihood(targets, reference_mean, reference_covariance,
                                            belief.covariance(), batch_size),
        belief)


def as_regression_record(diagnostics: RegressionDiagnostics,
                         i: int | None = None) -> dict[str, Any]:
    """Problem ``i``'s diagnostics (or the only one's) as a JSON-ready dict (None for NaN)."""
    record = {}
    for name in REGRESSION_METRICS:
        value = float(np.asarray(getattr(diagnostics, name)) if i is None
                      else np.asarray(getattr(diagnostics, name))[i])
        record[name] = None if math.isnan(value) else value
    return record
