"""The exact posterior of a GP regression problem, as an agent (for checks).

Told the kernel and the noise variance (its prior knowledge), it conditions
the environment's Gaussian process on the T training pairs. A belief sample
at the inputs of one call is a joint draw from the posterior there, so the
evaluator, which passes all inputs of a test tau-sample in one call, sees
exact joint posterior samples. No agent can do better on average: its
d_KL^tau is what T points cannot tell about the function.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from neural_testbed import base
from neural_testbed.generative import gp_regression

__all__ = ["OracleGPState", "make_oracle_gp_agent", "posterior"]


@flax.struct.dataclass
class OracleGPState:
    """The training inputs and the Cholesky solve of their noisy covariance."""

    x: jax.Array  # [T, d]
    chol: jax.Array  # [T, T] lower Cholesky factor of K + ridge + noise
    alpha: jax.Array  # [T] (K + ridge + noise)^-1 y
    kernel: str = flax.struct.field(pytree_node=False)


def posterior(state: OracleGPState, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The posterior mean ``[n]`` and covariance ``[n, n]`` of ``f`` at inputs ``x [n, d]``."""
    cross = gp_regression.KERNELS[state.kernel](x, state.x)  # [n, T]
    v = jax.scipy.linalg.solve_triangular(state.chol, cross.T, lower=True)  # [T, n]
    return cross @ state.alpha, gp_regression.prior_covariance(state.kernel, x, x) - v.T @ v


def make_oracle_gp_agent() -> base.Agent:
    """The exact posterior; its belief index is a PRNG key."""

    def train(key: jax.Array, data: base.Data, prior: base.RegressionPriorKnowledge):
        del key  # nothing random: the posterior is exact
        cov = gp_regression.prior_covariance(prior.kernel, data.x, data.x)
        chol = jnp.linalg.cholesky(cov + prior.noise_variance * jnp.eye(data.x.shape[0]))
        alpha = jax.scipy.linalg.cho_solve((chol, True), data.y)
        return OracleGPState(data.x, chol, alpha, prior.kernel)

    def apply(state: OracleGPState, x: jax.Array, key: jax.Array) -> jax.Array:
        mean, cov = posterior(state, x)
        # A repeated input has a singular covariance: a square root by eigenvalues
        # (clipped at 0) draws from it where a Cholesky factor would not exist.
        values, vectors = jnp.linalg.eigh(cov)
        root = vectors * jnp.sqrt(jnp.clip(values, 0.0))
        return (mean + root @ jax.random.normal(key, (x.shape[0],)))[:, None]

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key))
