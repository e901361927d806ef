"""Cross-normalized log-likelihood (XLL) and its rank (XLLR): Wang et al.'s Algorithm 2.

A joint log-likelihood of test targets is dominated by the predictive
marginals. XLL keeps only the model's predictive *correlations*: on a batch B
of test points it is ``log N(y_B; mu_ref[B], diag(s_ref) C[B, B] diag(s_ref))``,
with ``C`` the model's correlation matrix of the targets and ``mu_ref``,
``s_ref**2`` a reference model's predictive means and variances (equation 3).
Changing a model's own means or variances leaves its XLL as it was.

Batches (Algorithm 2, lines 6-9): every test point is an anchor, and its batch
is the anchor and the ``b - 1`` other test points most correlated with it by
the absolute value of the reference's correlations (b = 5 in the paper). XLL is
the mean over the anchors' batches. XLLR: under one reference, the models are
ranked by XLL, 0 for the highest (ties share their mean rank); with every model
serving once as the reference, XLL and XLLR are averaged over the references.
The paper's Table 1 reports such mean ranks, 0-based, lower is better.

Covariances are those of the targets ``y = f + noise`` (the paper's Remark 2):
a model's covariance of ``f`` plus the known noise variance on the diagonal,
which also keeps every batch's correlation matrix positive definite. So a
single model (no spread of f) has an XLL: that of the identity correlation
matrix, independent targets.

Where this differs from the paper (docs/differences.md): it does not say how
tied models rank (here: their mean rank); the testbed applies XLL to a
problem's Q probes with one draw of noisy targets there, and each row's XLL
uses the exact posterior as the reference.

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
section 3.3.2 and Algorithm 2 (appendix).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "BATCH_SIZE",
    "Predictive",
    "cross_normalized_log_likelihood",
    "predictive",
    "top_correlated_batches",
    "xll_and_xllr",
    "xll_matrix",
    "xll_ranks",
]

BATCH_SIZE = 5  # b, test points per batch, as in the paper


class Predictive(NamedTuple):
    """A Gaussian predictive distribution of the targets at Q test points.

    ``spread`` holds rows whose Gram matrix is the covariance of ``f``: the
    weighted, centred members of a finite belief (r = members), or the centred
    belief samples over sqrt(M) (r = M). A few rows are a compact covariance.
    """

    mean: jax.Array  # [Q] of f, and of y
    spread: jax.Array  # [r, Q]: covariance of f = spread.T @ spread
    noise_variance: jax.Array  # scalar, the targets' Gaussian noise

    def covariance(self) -> jax.Array:
        """``[Q, Q]`` covariance of the targets: of f plus the noise."""
        return (self.spread.T @ self.spread
                + self.noise_variance * jnp.eye(self.mean.shape[-1], dtype=self.mean.dtype))


def predictive(values: jax.Array, weights: jax.Array, noise_variance) -> Predictive:
    """The moments of belief values ``[r, Q]`` drawn with probabilities ``weights [r]``
    (1 / M each for M samples; a member's count / M for a finite belief)."""
    mean = weights @ values
    return Predictive(mean, jnp.sqrt(weights)[:, None] * (values - mean),
                      jnp.asarray(noise_variance, values.dtype))


def _correlation(covariance: jax.Array) -> jax.Array:
    scale = jnp.sqrt(jnp.diag(covariance))
    return covariance / (scale[:, None] * scale[None, :])


def top_correlated_batches(reference_covariance: jax.Array,
                           batch_size: int = BATCH_SIZE) -> jax.Array:
    """``[Q, b]`` test-point indices: row i is anchor i, then the ``b - 1`` others with the
    largest absolute correlation with it under the reference."""
    strength = jnp.abs(_correlation(jnp.asarray(reference_covariance)))
    strength = jnp.where(jnp.eye(strength.shape[0], dtype=bool), jnp.inf, strength)
    return jax.lax.top_k(strength, batch_size)[1]


def _batch_log_density(y, mean, scale, correlation) -> jax.Array:
    """``log N(y; mean, diag(scale) correlation diag(scale))`` of one small batch."""
    chol = jnp.linalg.cholesky(correlation)
    z = jax.scipy.linalg.solve_triangular(chol, (y - mean) / scale, lower=True)
    return (-0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diag(chol))) - jnp.sum(jnp.log(scale))
            - 0.5 * y.shape[0] * jnp.log(2 * jnp.pi))


def _xll_on_batches(y, reference_mean, reference_scale, correlation, batches) -> jax.Array:
    y, reference_mean, correlation = jnp.asarray(y), jnp.asarray(reference_mean), jnp.asarray(
        correlation)

    def one(batch):
        return _batch_log_density(y[batch], reference_mean[batch], reference_scale[batch],
                                  correlation[batch][:, batch])

    return jnp.mean(jax.vmap(one)(batches))


def cross_normalized_log_likelihood(y: jax.Array, reference_mean: jax.Array,
                                    reference_covariance: jax.Array, covariance: jax.Array,
                                    batch_size: int = BATCH_SIZE) -> jax.Array:
    """XLL of a model with target covariance ``covariance [Q, Q]`` on targets ``y [Q]``,
    normalised by a reference's mean ``[Q]`` and target covariance ``[Q, Q]``: the mean
    over the reference's top-correlated batches (equation 3)."""
    reference_covariance = jnp.asarray(reference_covariance)
    batches = top_correlated_batches(reference_covariance, batch_size)
    return _xll_on_batches(y, reference_mean, jnp.sqrt(jnp.diag(reference_covariance)),
                           _correlation(jnp.asarray(covariance)), batches)


def xll_matrix(y: jax.Array, means: jax.Array, covariances: jax.Array,
               batch_size: int = BATCH_SIZE) -> jax.Array:
    """``[m, m]``: entry ``[j, i]`` is model i's XLL with model j as the reference
    (Algorithm 2's lld_i^j), from m models' means ``[m, Q]`` and target covariances
    ``[m, Q, Q]``."""
    y, means, covariances = jnp.asarray(y), jnp.asarray(means), jnp.asarray(covariances)
    correlations = jax.vmap(_correlation)(covariances)

    def under(reference_mean, reference_covariance):
        batches = top_correlated_batches(reference_covariance, batch_size)
        scale = jnp.sqrt(jnp.diag(reference_covariance))
        return jax.vmap(lambda c: _xll_on_batches(y, reference_mean, scale, c, batches))(
            correlations)

    return jax.vmap(under)(means, covariances)


def xll_ranks(values: jax.Array) -> jax.Array:
    """Ranks along the last axis, 0 for the highest value; ties share their mean rank, and
    NaN (an undefined XLL) ranks last."""
    values = jnp.where(jnp.isnan(values), -jnp.inf, values)
    higher = jnp.sum(values[..., None, :] > values[..., :, None], axis=-1)
    tied = jnp.sum(values[..., None, :] == values[..., :, None], axis=-1)
    return higher + 0.5 * (tied - 1)


@functools.partial(jax.jit, static_argnames="batch_size")
def xll_and_xllr(y: jax.Array, means: jax.Array, covariances: jax.Array,
                 batch_size: int = BATCH_SIZE) -> tuple[jax.Array, jax.Array]:
    """Algorithm 2: each model's XLL and XLLR ``[m]``, averaged over the m models serving
    once each as the reference (see :func:`xll_matrix`)."""
    matrix = xll_matrix(y, means, covariances, batch_size)
    return jnp.mean(matrix, axis=0), jnp.mean(xll_ranks(matrix), axis=0)
