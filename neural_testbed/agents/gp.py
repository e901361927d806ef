"""A Gaussian process whose kernel hyperparameters are fitted to the training pairs.

The agent is told the noise variance (its prior knowledge) and does not fit
it; it fits its kernel's hyperparameters by maximising the log marginal
likelihood of the T training pairs (type-II maximum likelihood), with Adam on
their logarithms in one ``lax.scan``, then predicts with the exact posterior
of that kernel. Its belief samples are joint posterior draws, one per call, as
the oracle's are (:mod:`neural_testbed.agents.oracle_gp`).

Kernels (``GPConfig.kernel``):

- ``"relu_nngp"`` (the default): the arc-cosine kernel of a wide
  one-hidden-layer ReLU network, the family the environment draws from, with
  its first-layer weight and bias variances fitted. It is the sound default:
  the agent is told the environment's kernel family, and at the environment's
  values (the starting point) the agent *is* the oracle, so fitting can only
  trade the oracle's exact prior for what T points say about it.
- ``"rbf"``: the squared-exponential kernel with a signal variance and one
  lengthscale for every input dimension. Isotropic rather than one lengthscale
  per dimension (ARD): the environment's kernel is rotation invariant, and
  with T = d training pairs (the sweeps' smallest ratio) d lengthscales would
  be fitted from as many points.

Both kernels add the environment's ridge (:data:`gaussian_process.RIDGE`, known
to the agent as part of the problem's prior), so that with ``relu_nngp`` at
the environment's variances and fitting off the agent equals the oracle.

References: Rasmussen and Williams, "Gaussian processes for machine learning"
(2006), chapter 5 (the marginal likelihood); Cho and Saul (2009) (the
arc-cosine kernel).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, gaussian_process, kernels
from neural_testbed.agents import validation

__all__ = ["GPConfig", "GPState", "gp_sweep", "hyperparameters", "make_gp_agent", "posterior"]

# Kernel name -> (covariance function, its hyperparameters: keyword arguments fitted in log space).
_KERNELS = {
    "relu_nngp": (kernels.relu_nngp_kernel, ("weight_variance", "bias_variance")),
    "rbf": (kernels.rbf_kernel, ("signal_variance", "lengthscale")),
}


@dataclasses.dataclass(frozen=True)
class GPConfig:
    """Hyperparameters of the gp agent: its kernel, how it is fitted, where fitting starts.

    The kernel's hyperparameters below are the starting point of the fit (or,
    with ``fit`` off, the values used); the defaults are the environment's
    (``relu_nngp``) and a lengthscale of the inputs' scale (``rbf``).
    """

    kernel: Literal["relu_nngp", "rbf"] = "relu_nngp"  # the covariance function's family
    fit: bool = True  # maximise the log marginal likelihood over the kernel's hyperparameters
    num_steps: int = 200  # Adam steps of the fit
    learning_rate: float = 0.05  # Adam step size on the log hyperparameters
    weight_variance: float = 1.0  # relu_nngp: first-layer weight variance, times d
    bias_variance: float = 1.0  # relu_nngp: first-layer bias variance, times d
    signal_variance: float = 1.0  # rbf: k(x, x)
    lengthscale: float = 1.0  # rbf: in units of sqrt(d) (|x - x'| ~ sqrt(2 d) for N(0, I) inputs)

    def __post_init__(self):
        if self.num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {self.num_steps!r}")
        for name in ("learning_rate", "weight_variance", "bias_variance", "signal_variance",
                     "lengthscale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        validation.check_fields(self)


@flax.struct.dataclass
class GPState:
    """The fitted hyperparameters and the posterior they give."""

    log_hyperparameters: dict[str, jax.Array]  # keyword argument of the kernel -> float32 scalar
    posterior: gaussian_process.Posterior
    kernel: str = flax.struct.field(pytree_node=False)


def _kernel(name: str, log_hyperparameters: dict[str, jax.Array]) -> gaussian_process.Kernel:
    function, _ = _KERNELS[name]
    return functools.partial(function, **jax.tree.map(jnp.exp, log_hyperparameters))


def hyperparameters(state: GPState) -> dict[str, jax.Array]:
    """The kernel's fitted hyperparameters (an rbf lengthscale in input units, not sqrt(d))."""
    return jax.tree.map(jnp.exp, state.log_hyperparameters)


def posterior(state: GPState, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The posterior mean ``[n]`` and covariance ``[n, n]`` of ``f`` at inputs ``x [n, d]``."""
    return gaussian_process.posterior_at(_kernel(state.kernel, state.log_hyperparameters),
                                         state.posterior, x)


def make_gp_agent(config: GPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the gp agent; its belief index is a PRNG key (one joint draw per call).

    It conditions on every row of its data, so it does not accept padding.

    Example:
      >>> agent = make_gp_agent(GPConfig(kernel="rbf"), base.Shapes(1, 1))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> f = agent.enn.apply(state, x, agent.enn.sample_index(key))  # [n, 1]
    """
    del shapes  # one value per input at any input dimension
    _, names = _KERNELS[config.kernel]
    optimizer = optax.adam(config.learning_rate)

    def train(key: jax.Array, data: base.Data, prior: base.RegressionPriorKnowledge):
        del key  # nothing random: the fit starts from the config's values
        start = {name: getattr(config, name) for name in names}
        if config.kernel == "rbf":
            start["lengthscale"] *= math.sqrt(prior.input_dim)
        log_params = {name: jnp.log(jnp.float32(value)) for name, value in start.items()}

        def loss(log_params):
            return -gaussian_process.log_marginal_likelihood(
                _kernel(config.kernel, log_params), data, prior.noise_variance)

        def step(carry, _):
            log_params, opt_state = carry
            grads = jax.grad(loss)(log_params)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(log_params, updates), opt_state), None

        if config.fit:
            (log_params, _), _ = jax.lax.scan(step, (log_params, optimizer.init(log_params)),
                                              length=config.num_steps)
        kernel = _kernel(config.kernel, log_params)
        return GPState(log_params,
                       gaussian_process.condition(kernel, data, prior.noise_variance),
                       config.kernel)

    def apply(state: GPState, x: jax.Array, key: jax.Array) -> jax.Array:
        return gaussian_process.joint_sample(key, *posterior(state, x))[:, None]

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key))


def gp_sweep() -> tuple[GPConfig, ...]:
    """Each kernel, fitted and at its starting values (4 configs)."""
    return tuple(GPConfig(kernel=kernel, fit=fit)
                 for kernel, fit in itertools.product(("relu_nngp", "rbf"), (True, False)))
