"""The joint log-density estimators of regression problems' d_KL^tau.

For each of N independent test tau-samples, the KL term is the exact
log-density of its targets under the sampled function and the known Gaussian
noise, minus the agent's joint predictive log-density of them. The agent's
belief samples are functions ``f_m`` (its ENN's one output per input), M of
them drawn afresh for each test sample, and its predictive density adds the
known noise:

- ``"monte_carlo"``: ``log (1/M) sum_m prod_t N(y_t; f_m(x_t), s^2)``, the
  mixture the belief samples define; unbiased in density, but for large tau
  one sample dominates and the estimate is biased low.
- ``"gaussian"``: ``log N(y; mu, C + s^2 I)`` with ``mu`` and ``C`` the mean
  and (1/M) covariance of the M sampled function values at the tau inputs:
  exact for a Gaussian belief as M grows (the exact posterior of a GP is one),
  an approximation of a non-Gaussian one.
- ``"auto"``: Monte Carlo for tau < 10, Gaussian from tau = 10, the switch
  the classification testbed uses between its Algorithms 3 and 4.

Even the exact posterior scores above 0: what T points cannot tell about f. The
regression evaluator (:mod:`neural_testbed.evaluation.regression`) applies them to an
agent's belief samples.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

__all__ = [
    "ESTIMATORS",
    "choose_estimator",
    "gaussian_fit_log_density",
    "gaussian_log_density",
    "monte_carlo_log_density",
]

Estimator = Literal["auto", "monte_carlo", "gaussian"]
ESTIMATORS = ("auto", "monte_carlo", "gaussian")
_GAUSSIAN_FROM_TAU = 10


def choose_estimator(tau: int, estimator: Estimator = "auto") -> str:
    """The estimator ``estimator`` means at ``tau``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    if estimator == "auto":
        return "monte_carlo" if tau < _GAUSSIAN_FROM_TAU else "gaussian"
    return estimator


def gaussian_log_density(residuals: jax.Array, variance) -> jax.Array:
    """``sum_t log N(r_t; 0, variance)`` over the last axis."""
    return -0.5 * jnp.sum(residuals**2 / variance + jnp.log(2 * jnp.pi * variance), axis=-1)


def _weights(f: jax.Array, log_weights: jax.Array | None) -> jax.Array:
    """The members' log-weights: uniform over the rows of ``f`` when not given."""
    return jnp.full(f.shape[0], -jnp.log(f.shape[0])) if log_weights is None else log_weights


def monte_carlo_log_density(f: jax.Array, y: jax.Array, noise_variance,
                            log_weights: jax.Array | None = None) -> jax.Array:
    """``log sum_m w_m prod_t N(y_t; f[m, t], noise_variance)`` for ``f [M, tau]``
    (weights ``1 / M`` unless ``log_weights [M]`` are given)."""
    per_sample = gaussian_log_density(y[None, :] - f, noise_variance)
    return jax.nn.logsumexp(per_sample + _weights(f, log_weights))


def gaussian_fit_log_density(f: jax.Array, y: jax.Array, noise_variance,
                             log_weights: jax.Array | None = None) -> jax.Array:
    """``log N(y; mean, cov + noise_variance I)`` with the (weighted) mean and covariance
    of ``f [M, tau]`` over its M rows (weights ``1 / M`` unless given)."""
    tau = f.shape[1]
    weights = jnp.exp(_weights(f, log_weights))
    mean = weights @ f
    centred = f - mean
    cov = (centred * weights[:, None]).T @ centred + noise_variance * jnp.eye(tau)
    chol = jnp.linalg.cholesky(cov)
    z = jax.scipy.linalg.solve_triangular(chol, y - mean, lower=True)
    return (-0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diag(chol)))
            - 0.5 * tau * jnp.log(2 * jnp.pi))
