"""The reference's trivial baselines: predictions that ignore the inputs.

They give the scale of a score: an agent is worth something only where it beats
them. The reference's current leaderboard normalises every agent's KL by the
uniform baseline's (``leaderboard --normalise-by uniform``).

- ``uniform``: equal logits for every class, whatever the data.
- ``average_class_probs``: the training labels' class frequencies, used as the
  logits, as the reference computes them (its sampler returns the frequencies and
  the evaluator applies a softmax, so its predictive is ``softmax(frequencies)``,
  flatter than the frequencies themselves: with frequencies (0.9, 0.1) it predicts
  (0.69, 0.31)).

One network each (``num_indices=1``): no epistemic uncertainty, so the joint
prediction is the product of the marginals.

Reference: google-deepmind/neural_testbed, ``agents/factories/baselines.py``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from neural_testbed import base

__all__ = ["TrivialConfig", "make_average_class_probs_agent", "make_uniform_agent"]


@dataclasses.dataclass(frozen=True)
class TrivialConfig:
    """No hyperparameters: a trivial baseline has none."""


def _one_network(apply) -> base.ENN:
    return base.ENN(apply, lambda key: jnp.zeros((), jnp.int32), num_indices=1)


def _broadcast(logits, x, index):
    return jnp.broadcast_to(logits, (x.shape[0], logits.shape[-1]))


def make_uniform_agent(config: TrivialConfig, shapes: base.Shapes) -> base.Agent:
    """Equal logits for every class at every input."""
    def train(key, data, prior):
        return jnp.zeros(shapes.num_outputs, jnp.float32)
    return base.Agent(train, _one_network(_broadcast), accepts_padding=True)


def make_average_class_probs_agent(config: TrivialConfig, shapes: base.Shapes) -> base.Agent:
    """The training pairs' class frequencies, as logits (the reference's rule)."""
    def train(key, data, prior):
        counts = jax.nn.one_hot(data.y, shapes.num_outputs, dtype=jnp.float32)
        if data.mask is not None:
            counts = counts * data.mask[:, None]
        return counts.sum(0) / base.num_pairs(data)
    return base.Agent(train, _one_network(_broadcast), accepts_padding=True)
