"""The ensemble agent: a deep ensemble of independently initialised MLPs.

Each member is an MLP like the mlp agent's, initialised from its own key and
trained by Adam on cross-entropy plus L2 weight decay. Disagreement between
members, which comes only from their random initialisations, is the agent's
epistemic uncertainty. Members are a ``vmap`` axis: every parameter has a
leading ``[num_ensemble]`` axis and all members train in one ``lax.scan``.

The reference testbed draws 100 member indices with replacement at each step;
here every member takes a step on the same minibatch, which is the same in
expectation and keeps each step one dense computation over all members.

Reference: Lakshminarayanan, Pritzel and Blundell, "Simple and scalable
predictive uncertainty estimation using deep ensembles", NeurIPS 2017.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import jax

from neural_testbed import base, networks
from neural_testbed.agents import ensembling, training, validation

__all__ = ["EnsembleConfig", "EnsembleState", "ensemble_appendix_b_sweep", "ensemble_sweep",
           "make_ensemble_agent"]


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
    """Hyperparameters of the ensemble agent (reference testbed defaults)."""

    num_ensemble: int = 100  # number of members
    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths of each member, ReLU
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps; every member takes each one
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / (num_ensemble * T) * |params|^2
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    def __post_init__(self):
        ensembling.check_num_ensemble(self.num_ensemble)
        # The fields shared with the mlp agent obey the same rules.
        training.check_training_fields(self)
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


class EnsembleState(NamedTuple):
    """A trained ensemble."""

    params: networks.MLPParams  # every leaf has a leading [num_ensemble] axis


def make_ensemble_agent(config: EnsembleConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the ensemble agent.

    The loss is the mean over members and minibatch points of the softmax
    cross-entropy (on regression problems, :func:`training.data_loss`'s Gaussian one); the weight decay is that of
    :func:`training.weight_decay_scale` with ``num_members=num_ensemble``. An
    index is a member id, drawn uniformly, so the evaluator evaluates each
    member once.

    Example:
      >>> agent = make_ensemble_agent(EnsembleConfig(num_ensemble=10), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))  # one member
    """

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge) -> EnsembleState:
        keys = ensembling.split_keys(key)
        params = ensembling.init_members(
            keys.init, config.num_ensemble, shapes.input_dim,
            (*config.hidden, shapes.num_outputs)
        )
        scale = training.weight_decay_scale(
            config.l2_weight_decay, base.num_pairs(data), prior, config.adaptive_weight_scale,
            config.num_ensemble
        )
        optimizer = training.adam_with_l2(config.learning_rate, scale)

        def loss_fn(key, params, batch):
            del key  # deterministic networks
            logits = ensembling.apply_members(params, batch.x)  # [num_ensemble, batch, K]
            return training.data_loss(logits, batch.y, prior).mean()

        params, _ = training.train_minibatch(
            keys.train, loss_fn, params, data, optimizer, config.num_steps, config.batch_size)
        return EnsembleState(params=params)

    def apply(state: EnsembleState, x: jax.Array, index: jax.Array) -> jax.Array:
        return networks.apply_mlp(ensembling.select_member(state.params, index), x)

    def sample_index(key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, config.num_ensemble)

    return base.Agent(
        train=train, enn=base.ENN(apply, sample_index, num_indices=config.num_ensemble),
        accepts_padding=True,
    )


def ensemble_sweep() -> tuple[EnsembleConfig, ...]:
    """The reference's sweep, behind the published numbers (18 distinct configs).

    Size in {1, 3, 10, 30, 100} at the default decay, then size 30 with
    adaptive scaling on/off x lambda in {1e-4, ..., 100}; the config that
    appears in both parts is listed once. One factor at a time; the grid the
    paper prints is :func:`ensemble_appendix_b_sweep`.
    """
    sizes = tuple(EnsembleConfig(num_ensemble=n) for n in ensembling.ENSEMBLE_SIZES)
    decays = tuple(
        EnsembleConfig(num_ensemble=30, l2_weight_decay=lam, adaptive_weight_scale=adaptive)
        for adaptive, lam in itertools.product((True, False), training.L2_LAMBDAS)
    )
    return tuple(dict.fromkeys(sizes + decays))


def ensemble_appendix_b_sweep() -> tuple[EnsembleConfig, ...]:
    """The grid of the paper's appendix B.2 (70 configs): every size in {1, 3, 10, 30,
    100} with every lambda in {1e-4, ..., 100} under either decay, ``lambda / (M T)`` or
    ``lambda d sqrt(temperature) / (M T)``; every other field at its default.

    Run it with ``neural-testbed sweep --agent ensemble --configs appendix-b``.
    """
    return tuple(
        EnsembleConfig(num_ensemble=n, l2_weight_decay=lam, adaptive_weight_scale=adaptive)
        for n, adaptive, lam in itertools.product(
            ensembling.ENSEMBLE_SIZES, (True, False), training.L2_LAMBDAS)
    )
