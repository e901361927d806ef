"""The exact posterior of a GP regression problem, as an agent (for checks).

Told the kernel and the noise variance (its prior knowledge), it conditions
the environment's Gaussian process on the T training pairs. A belief sample
at the inputs of one call is a joint draw from the posterior there, so the
evaluator, which passes all inputs of a test tau-sample in one call, sees
exact joint posterior samples. No agent can do better on average: its
d_KL^tau is what T points cannot tell about the function.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax

from neural_testbed import base, gaussian_process

__all__ = ["OracleGPConfig", "OracleGPState", "make_oracle_gp_agent", "oracle_gp_sweep",
           "posterior"]


@dataclasses.dataclass(frozen=True)
class OracleGPConfig:
    """The oracle has no hyperparameters: everything it needs is its prior knowledge."""


@flax.struct.dataclass
class OracleGPState:
    """The environment's process conditioned on the training pairs."""

    posterior: gaussian_process.Posterior
    kernel: str = flax.struct.field(pytree_node=False)


def posterior(state: OracleGPState, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The posterior mean ``[n]`` and covariance ``[n, n]`` of ``f`` at inputs ``x [n, d]``."""
    return gaussian_process.posterior_at(state.kernel, state.posterior, x)


def make_oracle_gp_agent(config: OracleGPConfig, shapes: base.Shapes) -> base.Agent:
    """The exact posterior; its belief index is a PRNG key. It conditions on every row of
    its data, so it does not accept padding."""
    del config, shapes  # nothing to set; one value per input at any input dimension

    def train(key: jax.Array, data: base.Data, prior: base.RegressionPriorKnowledge):
        del key  # nothing random: the posterior is exact
        return OracleGPState(
            gaussian_process.condition(prior.kernel, data, prior.noise_variance), prior.kernel)

    def apply(state: OracleGPState, x: jax.Array, key: jax.Array) -> jax.Array:
        return gaussian_process.joint_sample(key, *posterior(state, x))[:, None]

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key))


def oracle_gp_sweep() -> tuple[OracleGPConfig, ...]:
    """Its one config."""
    return (OracleGPConfig(),)
