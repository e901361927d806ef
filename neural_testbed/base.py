"""Core types: data, prior knowledge, the agent protocols and result rows.

An agent is an *epistemic neural network* (ENN): training returns a state
pytree, and a posterior sample at inputs ``x`` is
``apply(state, x, sample_index(key))``. Any plain ``sampler(x, key) -> logits``
(the reference testbed's ``EpistemicSampler``) is accepted too, see
:func:`sampler_as_enn`, so agents from any framework can be evaluated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax

__all__ = [
    "ENN",
    "Agent",
    "Data",
    "EpistemicSampler",
    "PriorKnowledge",
    "ProblemResult",
    "as_sampler",
    "sampler_as_enn",
]


class Data(NamedTuple):
    """Labelled inputs."""

    x: jax.Array  # [num_data, input_dim] float32
    y: jax.Array  # [num_data] int32 class labels


@flax.struct.dataclass
class PriorKnowledge:
    """What an agent is told about a problem before training.

    A pytree whose only leaf is ``temperature``, so that problems of the same
    shape but different temperatures can be trained together under ``vmap``.
    The tau of the evaluation is not included: one trained agent is evaluated
    at every tau of the problem.
    """

    input_dim: int = flax.struct.field(pytree_node=False)
    num_classes: int = flax.struct.field(pytree_node=False)
    num_train: int = flax.struct.field(pytree_node=False)  # T
    env_hidden: tuple[int, ...] = flax.struct.field(pytree_node=False)  # environment MLP widths
    temperature: Any  # float or float32 scalar array


State = Any  # an agent's trained state, any pytree
Index = Any  # an ENN index: a member id, a key, a Gaussian vector...
EpistemicSampler = Callable[[jax.Array, jax.Array], jax.Array]  # (x, key) -> logits


class ENN(NamedTuple):
    """The sampling side of an agent.

    Attributes:
      apply: ``(state, x [n, input_dim], index) -> logits [n, num_classes]``.
        Pure and jittable.
      sample_index: ``key -> index``, a draw from the agent's belief.
      num_indices: ``None`` for a continuous index; ``n`` when every index is
        an integer in ``[0, n)`` (an ensemble, SG-MCMC snapshots). Then the
        evaluator counts how often each index is drawn and evaluates each
        distinct member once, weighted by its count.
    """

    apply: Callable[[State, jax.Array, Index], jax.Array]
    sample_index: Callable[[jax.Array], Index]
    num_indices: int | None = None


class Agent(NamedTuple):
    """An agent: a pure training function plus its ENN.

    Attributes:
      train: ``(key, data, prior) -> state``. Pure and jittable, so that the
        runner can ``vmap`` it over problems of the same shape.
      enn: how to draw posterior samples from the trained state.
    """

    train: Callable[[jax.Array, Data, PriorKnowledge], State]
    enn: ENN


def sampler_as_enn(sampler: EpistemicSampler) -> ENN:
    """Wraps a plain ``sampler(x, key) -> logits`` as an ENN with a key index.

    The state passed to ``apply`` is ignored, so evaluate it with any state,
    e.g. ``None``.
    """
    return ENN(apply=lambda state, x, key: sampler(x, key), sample_index=lambda key: key)


def as_sampler(enn: ENN, state: State) -> EpistemicSampler:
    """The ENN's ``sampler(x, key) -> logits`` for a trained state."""

    def sampler(x: jax.Array, key: jax.Array) -> jax.Array:
        return enn.apply(state, x, enn.sample_index(key))

    return sampler


@dataclasses.dataclass(frozen=True)
class ProblemResult:
    """One evaluation of one trained agent on one problem at one tau."""

    agent: str
    problem_id: str
    temperature: float
    num_train: int
    seed: int
    tau: int
    kl: float  # mean over test tau-samples of log p - log p_hat, in nats
    kl_stderr: float  # its standard error over the test tau-samples
    accuracy: float  # of the agent's mean prediction on the test inputs
    ece: float  # expected calibration error of the mean prediction, 15 bins
    train_seconds: float
    eval_seconds: float
    status: str = "ok"  # "ok" or "failed"
    error: str = ""  # what went wrong when status == "failed"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


