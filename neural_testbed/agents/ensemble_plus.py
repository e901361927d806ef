"""The ensemble+ agent: a deep ensemble with randomised prior functions and bootstrapping.

A plain deep ensemble's members agree wherever their random initialisations
happen to be washed out by training, so its uncertainty off the data can be
too small. ensemble+ adds to each member a fixed, untrained random function
(its *prior*), drawn exactly like the environment's network and scaled to the
size of the environment's logits. Training fits the sum to the data, so members
agree on the data but keep their prior's disagreement away from it, which is
what a posterior should do. Optional bootstrap weights make each member fit a
different random reweighting of the data, which spreads members where labels
are noisy.

As in the reference testbed, the trained members start with a nonzero
first-layer bias, where the ensemble agent's start at zero; this bias is all
that separates ``prior_scale=0, bootstrap="none"`` from the ensemble agent of
the same size and seeds (both split their key with
:func:`ensembling.split_keys`, and draw the same weights).
``docs/differences.md`` lists what still differs from the reference.

References:
  Osband, Aslanides and Cassirer, "Randomized prior functions for deep
  reinforcement learning", NeurIPS 2018.
  Dwaracherla et al., "Ensembles for uncertainty estimation: benefits of
  prior functions and bootstrapping", TMLR 2023.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from neural_testbed import base, networks
from neural_testbed.agents import ensembling, training, validation
from neural_testbed.agents.ensembling import Bootstrap, TemperatureScaling

__all__ = [
    "EnsemblePlusConfig",
    "EnsemblePlusState",
    "bootstrap_weights",
    "ensemble_plus_sweep",
    "init_trained_members",
    "make_ensemble_plus_agent",
]


@dataclasses.dataclass(frozen=True)
class EnsemblePlusConfig:
    """Hyperparameters of the ensemble+ agent (reference testbed defaults)."""

    num_ensemble: int = 100  # number of members
    prior_scale: float = 3.0  # >= 0; the prior function is scaled by this / temperature**p
    temperature_scaling: TemperatureScaling = "sqrt"  # p = 1/2 ("sqrt") or 1 ("linear")
    bootstrap: Bootstrap = "none"  # distribution of the per-(point, member) loss weights
    hidden: tuple[int, ...] = (50, 50)  # hidden widths of each trained member, ReLU
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps; every member takes each one
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / (num_ensemble * T) * |params|^2
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    def __post_init__(self):
        ensembling.check_num_ensemble(self.num_ensemble)
        ensembling.check_prior_options(self)
        training.check_training_fields(self)
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


def bootstrap_weights(
    key: jax.Array, bootstrap: Bootstrap, num_members: int, num_train: int
) -> jax.Array:
    """Draws the loss weight of each (member, training point), ``[num_members, num_train]``.

    ``"none"``: all ones. ``"exponential"``: i.i.d. Exp(1), the Bayesian
    bootstrap. ``"bernoulli"``: i.i.d. 2 * Bernoulli(1/2), so each member
    drops about half of the points and counts the rest twice. All have mean 1.
    """
    ensembling.check_bootstrap(bootstrap)
    shape = (num_members, num_train)
    if bootstrap == "exponential":
        return jax.random.exponential(key, shape, jnp.float32)
    if bootstrap == "bernoulli":
        return 2.0 * jax.random.bernoulli(key, 0.5, shape).astype(jnp.float32)
    return jnp.ones(shape, jnp.float32)


def init_trained_members(
    key: jax.Array, num_members: int, input_dim: int, layer_sizes: tuple[int, ...]
) -> networks.MLPParams:
    """The trained members' initialisation: the ensemble agent's, with the reference's first bias.

    The reference's ensemble+ network draws its first layer's bias like its
    weights, a normal cut at two standard deviations with stddev
    ``1 / sqrt(input_dim)``, where its plain ensemble starts that bias at
    zero. The weights are :func:`ensembling.init_members`' draws from the same
    key as the ensemble agent's, so the two agents' members differ only in
    that bias.

    Returns:
      The parameters of all members; every leaf has a leading
      ``[num_members]`` axis.
    """
    stddev = 1.0 / input_dim**0.5
    params = ensembling.init_members(key, num_members, input_dim, layer_sizes, stddev)
    # init_members draws this bias N(0, stddev^2) from a key its weights do not
    # use; sending it through the normal CDF and then the inverse CDF of the
    # normal restricted to [-2, 2] turns it into an exact truncated-normal draw
    # (the inverse-CDF method jax.random.truncated_normal itself uses).
    lower = ndtr(-2.0)
    u = lower + (1.0 - 2.0 * lower) * ndtr(params[0]["b"] / stddev)
    return [{**params[0], "b": stddev * ndtri(u)}, *params[1:]]


class EnsemblePlusState(NamedTuple):
    """A trained ensemble+ agent."""

    params: networks.MLPParams  # trained members; leaves have a leading [num_ensemble] axis
    prior_params: networks.MLPParams  # fixed priors, never trained; leading [num_ensemble]
    prior_scale: jax.Array  # float32 scalar, from ensembling.prior_function_scale


def make_ensemble_plus_agent(config: EnsemblePlusConfig = EnsemblePlusConfig()) -> base.Agent:
    """Builds the ensemble+ agent.

    Member ``m`` outputs ``f_m(x) + s * p_m(x)``: ``f_m`` an MLP of widths
    ``config.hidden`` trained from :func:`init_trained_members`, ``p_m`` a fixed
    random MLP drawn like the environment's network (same widths, same
    initialisation), ``s`` from :func:`ensembling.prior_function_scale`. The loss is the
    mean over members and minibatch points of the bootstrap-weighted
    cross-entropy, plus the ensemble agent's weight decay (on ``f`` only).

    Example:
      >>> agent = make_ensemble_plus_agent(EnsemblePlusConfig(num_ensemble=10))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))  # one member
    """

    def train(
        key: jax.Array, data: base.Data, prior: base.PriorKnowledge
    ) -> EnsemblePlusState:
        keys = ensembling.split_keys(key)
        num_train = data.x.shape[0]
        params = init_trained_members(
            keys.init, config.num_ensemble, prior.input_dim, (*config.hidden, prior.num_classes)
        )
        prior_params = ensembling.init_members(
            keys.prior, config.num_ensemble, prior.input_dim,
            (*prior.env_hidden, prior.num_classes), first_bias_stddev=1.0 / prior.input_dim**0.5,
        )
        scale = ensembling.prior_function_scale(
            config.prior_scale, prior.temperature, config.temperature_scaling
        )
        # The priors are fixed, so their logits at the training inputs are computed once.
        prior_logits = scale * ensembling.apply_members(prior_params, data.x)  # [members, T, K]
        weights = bootstrap_weights(
            keys.bootstrap, config.bootstrap, config.num_ensemble, num_train
        )  # [num_ensemble, T]
        decay = training.weight_decay_scale(
            config.l2_weight_decay, prior, config.adaptive_weight_scale, config.num_ensemble
        )
        optimizer = training.adam_with_l2(config.learning_rate, decay)

        def loss_fn(key, params, batch):
            del key  # deterministic networks
            ids = batch.x  # [batch] ids of the drawn training points
            logits = ensembling.apply_members(params, data.x[ids]) + prior_logits[:, ids]
            xent = ensembling.member_cross_entropy(logits, batch.y)  # [num_ensemble, batch]
            return (weights[:, ids] * xent).mean()

        # Minibatches are drawn over point ids, so that the loss can look up each
        # drawn point's prior logits and bootstrap weights (same draws as ensemble).
        point_ids = base.Data(x=jnp.arange(num_train), y=data.y)
        params, _ = training.train_minibatch(
            keys.train, loss_fn, params, point_ids, optimizer, config.num_steps, config.batch_size
        )
        return EnsemblePlusState(params=params, prior_params=prior_params, prior_scale=scale)

    def apply(state: EnsemblePlusState, x: jax.Array, index: jax.Array) -> jax.Array:
        trained = networks.apply_mlp(ensembling.select_member(state.params, index), x)
        prior_fn = networks.apply_mlp(ensembling.select_member(state.prior_params, index), x)
        return trained + state.prior_scale * prior_fn

    def sample_index(key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, config.num_ensemble)

    return base.Agent(
        train=train, enn=base.ENN(apply, sample_index, num_indices=config.num_ensemble)
    )


def ensemble_plus_sweep() -> tuple[EnsemblePlusConfig, ...]:
    """The paper's sweep, one factor at a time around the default (14 distinct configs).

    Size in {1, 3, 10, 30, 100}; bootstrap in {none, bernoulli, exponential};
    lambda in {0.1, 0.3, 1, 3, 10}; and the paper's prior scales {0,
    sqrt(temperature), 1}. The paper scales a prior drawn from the generating
    process, whose logits are the network's output / temperature, so its
    sqrt(temperature) is ``prior_scale=1, temperature_scaling="sqrt"`` here
    and its 1 is ``prior_scale=1, temperature_scaling="linear"``. The default
    config, which every factor contains, is listed once.
    """
    default = EnsemblePlusConfig()
    replace = dataclasses.replace
    configs = (
        *(replace(default, num_ensemble=n) for n in (1, 3, 10, 30, 100)),
        *(replace(default, bootstrap=b) for b in ("none", "bernoulli", "exponential")),
        *(replace(default, l2_weight_decay=lam) for lam in (0.1, 0.3, 1.0, 3.0, 10.0)),
        replace(default, prior_scale=0.0),
        replace(default, prior_scale=1.0, temperature_scaling="sqrt"),
        replace(default, prior_scale=1.0, temperature_scaling="linear"),
    )
    return tuple(dict.fromkeys(configs))
