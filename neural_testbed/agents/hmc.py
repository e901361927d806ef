"""hmc: samples the posterior of the environment's own model under the environment's own
prior, with the No-U-Turn sampler; the Bayes-optimal agent of the testbed.

A testbed environment is a random MLP drawn from a known prior (fan-in scaled
truncated-normal weights, a first-layer bias N(0, 1/d), other biases zero, logits
divided by the temperature; ``generative/mlp_classification.py``). An agent that
knows that prior and samples the exact posterior over the network given the training
pairs predicts as well as any agent can in expectation: its d_KL is the floor, and
the gap to it is the only part of another agent's d_KL that better inference could
remove. Everything the sampler needs is in the prior knowledge the runner gives
every agent: the architecture (``env_hidden``), the input dimension, the class count
and the temperature.

How: each weight is ``w = t / sqrt(fan_in)`` with ``t`` a truncated standard normal
on [-2, 2], written as ``t = Phi^-1(Phi(-2) + (Phi(2) - Phi(-2)) Phi(z))`` of a
standard normal ``z`` (the inverse-CDF map, exact); the first-layer bias is
``z / sqrt(d)``. So the sampler runs on ``z`` with a standard normal prior and no
boundary, and the likelihood is the categorical one of the training pairs. It declines
padded training sets (``accepts_padding`` False): every leapfrog step of NUTS (64 at
most per step by default) evaluates the likelihood of every row, so a set padded to the
sweep's largest T makes its sampling several times slower, where the program per T it
saves compiles in seconds (measured in docs/writing-an-agent.md). ``num_chains`` chains
start from independent prior draws, each adapts its step size and diagonal mass matrix by
Stan's window adaptation and then keeps every ``thinning``-th of its
``num_sampling_steps`` states, all in one program
(``vmap`` over chains, ``lax.scan`` over steps; blackjax's NUTS and adaptation, the
``hmc`` extra). Every kept draw is one belief sample: ``num_indices`` is
``num_chains * num_kept``.

Convergence is checked in function space, as Izmailov et al. (2021) do for neural
networks: the weights of an MLP are not identified (permuting hidden units gives the
same function), so chains that agree on every prediction may disagree on every
weight. The state holds split R-hat and the bulk effective sample size of the
predicted log-probabilities at ``num_probe_inputs`` inputs drawn from N(0, I) (the
largest R-hat and the smallest ESS over inputs and classes), and the share of
divergent transitions; :func:`converged` says whether they pass. The agent reports
all four (``Agent.report``), so every row stores them in its diagnostics
(``agent_rhat``, ``agent_ess``, ``agent_divergent_share``, ``agent_converged``) and
the leaderboard flags the problems whose chains did not converge.

Reference: Hoffman and Gelman, "The No-U-Turn sampler", JMLR 2014; Vehtari et al.,
"Rank-normalization, folding, and localization: an improved R-hat", 2021; Izmailov et
al., "What are Bayesian neural network posteriors really like?", ICML 2021.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy import special

from neural_testbed import base, networks
from neural_testbed.agents import validation

__all__ = ["HMCConfig", "converged", "hmc_sweep", "make_hmc_agent", "weights_of"]

_TRUNCATION = 2.0  # the environment's truncated normal: [-2, 2] standard deviations


@dataclasses.dataclass(frozen=True)
class HMCConfig:
    """Hyperparameters of the hmc agent: the sampler's budget and its convergence rules."""

    num_chains: int = 4  # independent chains, each from its own prior draw
    num_warmup_steps: int = 500  # window-adaptation steps per chain (not kept)
    num_sampling_steps: int = 1000  # NUTS steps per chain after the warm-up...
    thinning: int = 4  # ...of which every thinning-th is kept: 250 draws per chain
    max_num_doublings: int = 6  # NUTS trajectory: at most 2^6 = 64 leapfrog steps
    target_acceptance: float = 0.8  # the adaptation's target acceptance rate
    num_probe_inputs: int = 100  # inputs of the function-space diagnostics
    max_rhat: float = 1.1  # converged: the largest split R-hat at most this...
    min_ess: float = 100.0  # ...the smallest bulk ESS at least this...
    max_divergent_share: float = 0.01  # ...and at most this share of divergent steps

    def __post_init__(self):
        for name in ("num_chains", "num_warmup_steps", "num_sampling_steps", "thinning",
                     "max_num_doublings", "num_probe_inputs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_chains < 2:
            raise ValueError(f"num_chains must be >= 2 (R-hat compares chains), got "
                             f"{self.num_chains}")
        if self.thinning > self.num_sampling_steps:
            raise ValueError(f"thinning must be at most num_sampling_steps "
                             f"({self.num_sampling_steps}), got {self.thinning}")
        if not 0 < self.target_acceptance < 1:
            raise ValueError(f"target_acceptance must be in (0, 1), got "
                             f"{self.target_acceptance!r}")
        if not self.max_rhat > 1:
            raise ValueError(f"max_rhat must be > 1, got {self.max_rhat!r}")
        if not 0 <= self.max_divergent_share <= 1:
            raise ValueError(f"max_divergent_share must be in [0, 1], got "
                             f"{self.max_divergent_share!r}")
        validation.check_fields(self)

    @property
    def num_kept(self) -> int:
        """Draws kept per chain."""
        return self.num_sampling_steps // self.thinning


def _layer_sizes(prior: base.PriorKnowledge) -> list[tuple[int, int]]:
    sizes = (prior.input_dim, *prior.env_hidden, prior.num_classes)
    return list(itertools.pairwise(sizes))


def _initial(key: jax.Array, prior: base.PriorKnowledge) -> dict[str, Any]:
    """A draw of the sampler's variables from their prior: standard normals, one per
    weight and per first-layer bias."""
    layers = _layer_sizes(prior)
    keys = jax.random.split(key, len(layers) + 1)
    return {"w": [jax.random.normal(k, shape) for k, shape in zip(keys, layers)],
            "b": jax.random.normal(keys[-1], (layers[0][1],))}


def weights_of(z: dict[str, Any], prior: base.PriorKnowledge) -> networks.MLPParams:
    """The environment's network of the sampler's variables ``z``: each weight the
    truncated normal of its standard normal by the inverse-CDF map, over sqrt(fan_in);
    the first-layer bias ``z / sqrt(d)``; the other biases zero, as in the prior."""
    low = special.ndtr(-_TRUNCATION)
    mass = special.ndtr(_TRUNCATION) - low
    params = []
    for i, ((fan_in, fan_out), w) in enumerate(zip(_layer_sizes(prior), z["w"])):
        t = jnp.clip(special.ndtri(low + mass * special.ndtr(w)), -_TRUNCATION, _TRUNCATION)
        bias = z["b"] / jnp.sqrt(prior.input_dim) if i == 0 else jnp.zeros(fan_out)
        params.append({"w": t / jnp.sqrt(fan_in), "b": bias})
    return params


def _log_density(data: base.Data, prior: base.PriorKnowledge):
    def log_density(z):
        logits = networks.apply_mlp(weights_of(z, prior), data.x) / prior.temperature
        log_likelihood = jnp.take_along_axis(jax.nn.log_softmax(logits), data.y[:, None],
                                             axis=-1)[:, 0]
        log_prior = -0.5 * sum(jnp.sum(v ** 2) for v in jax.tree.leaves(z))
        return jnp.sum(log_likelihood) + log_prior

    return log_density


def _chain(key: jax.Array, log_density, initial, config: HMCConfig):
    """One chain: window adaptation, then ``num_kept * thinning`` NUTS steps, keeping
    every ``thinning``-th; returns the kept variables and the share of divergent steps."""
    import blackjax  # the hmc extra: only this agent needs it

    warmup_key, sample_key = jax.random.split(key)
    adaptation = blackjax.window_adaptation(
        blackjax.nuts, log_density, target_acceptance_rate=config.target_acceptance,
        max_num_doublings=config.max_num_doublings)
    (state, parameters), _ = adaptation.run(warmup_key, initial,
                                            num_steps=config.num_warmup_steps)
    kernel = blackjax.nuts(log_density, **parameters)  # the step size, mass matrix, depth

    def kept(state, key):
        def step(state, key):
            state, info = kernel.step(key, state)
            return state, info.is_divergent
        state, divergent = jax.lax.scan(step, state, jax.random.split(key, config.thinning))
        return state, (state.position, divergent.sum())

    _, (positions, divergent) = jax.lax.scan(kept, state,
                                             jax.random.split(sample_key, config.num_kept))
    return positions, divergent.sum() / (config.num_kept * config.thinning)


def _diagnostics(key: jax.Array, samples: networks.MLPParams, prior: base.PriorKnowledge,
                 config: HMCConfig, divergent_share: jax.Array) -> dict[str, jax.Array]:
    """Split R-hat and bulk ESS of the predicted log-probabilities at probe inputs from
    N(0, I), over chains ``[chains, draws, ...]`` of ``samples``."""
    from blackjax import diagnostics

    x = jax.random.normal(key, (config.num_probe_inputs, prior.input_dim))
    apply = lambda params: jax.nn.log_softmax(networks.apply_mlp(params, x) / prior.temperature)
    log_probs = jax.vmap(jax.vmap(apply))(samples)  # [chains, draws, inputs, classes]
    return {"rhat": jnp.max(diagnostics.potential_scale_reduction(log_probs)),
            "ess": jnp.min(diagnostics.effective_sample_size(log_probs)),
            "divergent_share": jnp.mean(divergent_share)}


def converged(state: dict[str, Any], config: HMCConfig) -> jax.Array:
    """Whether a trained state's chains pass the config's rules (R-hat, ESS and
    divergences; module docstring)."""
    d = state["diagnostics"]
    return ((d["rhat"] <= config.max_rhat) & (d["ess"] >= config.min_ess)
            & (d["divergent_share"] <= config.max_divergent_share))


def make_hmc_agent(config: HMCConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the hmc agent for classification problems of ``shapes`` (the prior
    knowledge at training gives the environment's architecture and temperature).

    Raises:
      ValueError: where blackjax (the ``hmc`` extra) is not installed.
    """
    if importlib.util.find_spec("blackjax") is None:
        raise ValueError("the hmc agent samples with blackjax, which is not installed: "
                         "pip install 'neural-testbed[hmc]'")
    num_indices = config.num_chains * config.num_kept

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge):
        init_key, chain_key, probe_key = jax.random.split(key, 3)
        initial = jax.vmap(lambda k: _initial(k, prior))(
            jax.random.split(init_key, config.num_chains))
        z, divergent = jax.vmap(lambda k, init: _chain(k, _log_density(data, prior), init,
                                                       config))(
            jax.random.split(chain_key, config.num_chains), initial)
        samples = jax.vmap(jax.vmap(lambda v: weights_of(v, prior)))(z)  # [chains, draws]
        stats = _diagnostics(probe_key, samples, prior, config, divergent)
        flat = jax.tree.map(lambda a: a.reshape(num_indices, *a.shape[2:]), samples)
        return {"samples": flat, "temperature": jnp.asarray(prior.temperature, jnp.float32),
                "diagnostics": stats}

    def apply(state, x, index):
        params = jax.tree.map(lambda a: a[index], state["samples"])
        return networks.apply_mlp(params, x) / state["temperature"]

    def sample_index(key):
        return jax.random.randint(key, (), 0, num_indices)

    def report(state):
        return {**state["diagnostics"], "converged": converged(state, config).astype(jnp.float32)}

    del shapes  # the architecture is the environment's, from the prior knowledge
    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=num_indices),
                      accepts_padding=False, report=report)


def hmc_sweep() -> tuple[HMCConfig, ...]:
    """The default and a longer run: the floor should not move with a longer chain."""
    return (HMCConfig(), HMCConfig(num_warmup_steps=2000, num_sampling_steps=4000, thinning=8))
