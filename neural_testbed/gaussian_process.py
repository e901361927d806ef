"""Gaussian-process algebra shared by the regression problems and the agents that know
or fit a Gaussian process: the prior covariance (a kernel plus the environment's
ridge), conditioning on noisy pairs, the posterior at new inputs, the evidence,
joint draws and correlations.

The GP regression family (:mod:`neural_testbed.generative.gp_regression`) draws its
functions and its exact posterior with these, and the ``oracle_gp``, ``gp``, ``cnp``
agents and transductive active learning use the same ones, so that none of them has
to import a problem family for its algebra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base, kernels

__all__ = [
    "KERNELS",
    "Kernel",
    "Posterior",
    "RIDGE",
    "condition",
    "correlation",
    "covariance_root",
    "joint_sample",
    "log_marginal_likelihood",
    "posterior_at",
    "prior_covariance",
    "same_input",
    "square_root",
    "square_root_of_distinct",
]

KERNELS = {"relu_nngp": kernels.relu_nngp_kernel}

# A covariance function ``(x1 [n, d], x2 [m, d]) -> [n, m]``; where a kernel is
# asked for, a name in KERNELS (the environment's) or such a function (an agent's
# fitted kernel) is accepted.
Kernel = Callable[[jax.Array, jax.Array], jax.Array]

# Variance of an independent jitter on f at each distinct input, part of the
# environment's definition (the oracle's prior includes it): it keeps the
# joint Cholesky factor of T + P nearby inputs finite in float32.
RIDGE = 1e-4


# The most [rows, m, d] comparisons same_input makes at a time: T = 10,000 training and
# 1,000 pool inputs of d = 100 would otherwise be 12 GB of them.
_SAME_INPUT_BLOCK = 2**25


def same_input(x1: jax.Array, x2: jax.Array, block: int = _SAME_INPUT_BLOCK) -> jax.Array:
    """``[n, m]`` float 1.0 where two inputs are identical: where the ridge applies.
    Compared ``block`` elements at a time, rows of ``x1`` by rows."""
    n, m, d = x1.shape[0], x2.shape[0], x1.shape[-1]
    rows = max(1, block // max(1, m * d))

    def compare(a):
        return jnp.all(a[:, None, :] == x2[None, :, :], axis=-1)

    if n <= rows:
        return compare(x1).astype(x1.dtype)
    blocks = jnp.pad(x1, ((0, -n % rows), (0, 0))).reshape(-1, rows, d)
    return jax.lax.map(compare, blocks).reshape(-1, m)[:n].astype(x1.dtype)


def _kernel_function(kernel: str | Kernel) -> Kernel:
    return KERNELS[kernel] if isinstance(kernel, str) else kernel


def prior_covariance(kernel: str | Kernel, x1: jax.Array, x2: jax.Array) -> jax.Array:
    """The prior covariance of ``f``: the kernel plus the environment's ridge."""
    return _kernel_function(kernel)(x1, x2) + RIDGE * same_input(x1, x2)


class Posterior(NamedTuple):
    """The training inputs and the Cholesky solve of their noisy prior covariance."""

    x: jax.Array  # [T, d]
    chol: jax.Array  # [T, T] lower Cholesky factor of K + ridge + noise
    alpha: jax.Array  # [T] (K + ridge + noise)^-1 y


def condition(kernel: str | Kernel, data: base.Data, noise_variance) -> Posterior:
    """The Gaussian process of ``kernel`` (plus the ridge) conditioned on noisy
    training pairs."""
    cov = prior_covariance(kernel, data.x, data.x)
    chol = jnp.linalg.cholesky(cov + noise_variance * jnp.eye(data.x.shape[0]))
    return Posterior(data.x, chol, jax.scipy.linalg.cho_solve((chol, True), data.y))


def posterior_at(kernel: str | Kernel, posterior: Posterior,
                 x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The posterior mean ``[n]`` and covariance ``[n, n]`` of ``f`` at inputs ``x [n, d]``
    (``kernel`` the one ``posterior`` was conditioned with)."""
    cross = _kernel_function(kernel)(x, posterior.x)  # [n, T]
    v = jax.scipy.linalg.solve_triangular(posterior.chol, cross.T, lower=True)  # [T, n]
    return cross @ posterior.alpha, prior_covariance(kernel, x, x) - v.T @ v


def log_marginal_likelihood(kernel: str | Kernel, data: base.Data, noise_variance) -> jax.Array:
    """``log N(y; 0, K + ridge + noise_variance I)``, the evidence of the T pairs."""
    posterior = condition(kernel, data, noise_variance)
    return (-0.5 * jnp.dot(data.y, posterior.alpha) - jnp.sum(jnp.log(jnp.diag(posterior.chol)))
            - 0.5 * data.y.shape[0] * jnp.log(2 * jnp.pi))


def joint_sample(key: jax.Array, mean: jax.Array, cov: jax.Array) -> jax.Array:
    """One draw ``[n]`` from ``N(mean, cov)``, through :func:`covariance_root`."""
    return mean + covariance_root(cov) @ jax.random.normal(key, mean.shape)


def covariance_root(cov: jax.Array) -> jax.Array:
    """``root [n, n]`` with ``root root^T = cov``, for drawing from ``N(., cov)``.

    A repeated input has a singular covariance: a square root by eigenvalues
    (clipped at 0) draws from it where a Cholesky factor would not exist. On a GPU,
    cuSOLVER's float32 eigendecomposition fails on a few such matrices (NaN for 2 of 6000
    of the `regression` sweep's 1-d tau = 100 ones on an H200, enough to fail most of the
    GP agents' rows on those problems; ``benchmarks/gp_sampler_nans.py``), so there the
    repeated inputs are set aside first (:func:`square_root_of_distinct`); a CPU keeps
    LAPACK's square root of the whole matrix, and its draws as they were.
    """
    return jax.lax.platform_dependent(cov, default=square_root, cuda=square_root_of_distinct)


def square_root(cov: jax.Array) -> jax.Array:
    """``root`` with ``root root^T = cov``, by eigenvalues clipped at 0."""
    values, vectors = jnp.linalg.eigh(cov)
    return vectors * jnp.sqrt(jnp.clip(values, 0.0))


def square_root_of_distinct(cov: jax.Array) -> jax.Array:
    """:func:`square_root` of ``cov`` without its repeated inputs' rows and columns, each
    then given its first occurrence's row: exact, as equal inputs have equal rows (their
    values are one value), and it leaves the eigendecomposition no exactly repeated
    eigenvalue of 0."""
    n = cov.shape[0]
    first = jnp.argmax(jnp.all(cov[:, None, :] == cov[None, :, :], axis=-1), axis=1)
    repeat = first != jnp.arange(n)
    distinct = jnp.where(repeat[:, None] | repeat[None, :], jnp.eye(n, dtype=cov.dtype), cov)
    return square_root(distinct)[first]


def correlation(cov: jax.Array) -> jax.Array:
    """The correlation matrix of a covariance matrix."""
    scale = jnp.sqrt(jnp.diag(cov))
    return cov / (scale[:, None] * scale[None, :])
