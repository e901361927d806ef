"""The mlp baseline: one MLP trained by cross-entropy (or, on regression problems, the
Gaussian negative log-likelihood with the known noise) with L2 weight decay.

It has no epistemic uncertainty: every index gives the same network, so the
evaluator evaluates it once. It is the baseline every agent's KL is
normalised by.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp

from neural_testbed import base, networks
from neural_testbed.agents import training, validation

__all__ = ["MLPConfig", "make_mlp_agent", "mlp_sweep", "train_mlp"]


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """Hyperparameters of the mlp agent (paper defaults)."""

    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU; () is a linear model
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / T * |params|^2 (see below)
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    def __post_init__(self):
        training.check_training_fields(self, linear_allowed=True)
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


def train_mlp(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge,
              shapes: base.Shapes, config: MLPConfig) -> networks.MLPParams:
    """The mlp agent's training: Adam on the data loss plus L2, on minibatches of the pairs.

    ``config`` is an :class:`MLPConfig` or any config with its fields (laplace trains
    its mlp from its own; logistic's ``hidden`` is always ``()``).
    """
    init_key, train_key = jax.random.split(key)
    params = networks.init_mlp(init_key, shapes.input_dim, (*config.hidden, shapes.num_outputs))
    scale = training.weight_decay_scale(
        config.l2_weight_decay, base.num_pairs(data), prior, config.adaptive_weight_scale)
    optimizer = training.adam_with_l2(config.learning_rate, scale)

    def loss_fn(key, params, batch):
        del key  # deterministic network
        logits = networks.apply_mlp(params, batch.x)
        return training.data_loss(logits, batch.y, prior).mean()

    params, _ = training.train_minibatch(
        train_key, loss_fn, params, data, optimizer, config.num_steps, config.batch_size)
    return params


def make_mlp_agent(config: MLPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the mlp agent (of an :class:`MLPConfig`, or any config with its fields).

    Example:
      >>> agent = make_mlp_agent(MLPConfig(l2_weight_decay=0.1), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))
    """

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge):
        return train_mlp(key, data, prior, shapes, config)

    def apply(params, x, index):
        del index  # a single network
        return networks.apply_mlp(params, x)

    def sample_index(key):
        del key
        return jnp.zeros((), jnp.int32)

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=1),
                      accepts_padding=True)


def mlp_sweep() -> tuple[MLPConfig, ...]:
    """The paper's sweep: adaptive scaling on/off x lambda in {1e-4, ..., 100} (14 configs)."""
    return tuple(
        MLPConfig(l2_weight_decay=lam, adaptive_weight_scale=adaptive)
        for adaptive, lam in itertools.product((True, False), training.L2_LAMBDAS)
    )
