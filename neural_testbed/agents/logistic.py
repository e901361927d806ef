"""The logistic baseline: a linear model of the inputs (an mlp with no hidden layer),
trained as the mlp is, by cross-entropy with L2 weight decay.

The reference keeps it beside the mlp (google-deepmind/neural_testbed,
``agents/factories/baselines.py``) as the simplest learned agent: its decision boundary
is a hyperplane, so on the testbed's random-MLP environments its d_KL shows what the
hidden layers buy. Like the mlp it is one network and has no epistemic uncertainty.
On regression problems it is linear regression with the Gaussian likelihood of the
known noise.
"""

from __future__ import annotations

import dataclasses
import itertools

from neural_testbed import base
from neural_testbed.agents import mlp, training, validation

__all__ = ["LogisticConfig", "logistic_sweep", "make_logistic_agent"]


@dataclasses.dataclass(frozen=True)
class LogisticConfig:
    """Hyperparameters of the logistic agent: the mlp's, but ``hidden`` (the reference's
    defaults: lambda = 1, adaptive, 1,000 steps)."""

    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / T * |params|^2
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    @property
    def hidden(self) -> tuple[int, ...]:
        return ()  # what makes it linear; the mlp's training reads it

    def __post_init__(self):
        training.check_training_fields(self, linear_allowed=True)
        validation.check_fields(self)


def make_logistic_agent(config: LogisticConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the logistic agent: the mlp agent, whose training reads the config's fields
    and its ``hidden``, which is ``()``. (The config is passed as it is, not turned into
    an ``MLPConfig``: in a batch of configs its floats are traced, which a validator
    refuses.)"""
    return mlp.make_mlp_agent(config, shapes)


def logistic_sweep() -> tuple[LogisticConfig, ...]:
    """The reference's sweep: adaptive scaling on/off x lambda in {1e-4, ..., 100} (14
    configs), the mlp's."""
    return tuple(LogisticConfig(l2_weight_decay=lam, adaptive_weight_scale=adaptive)
                 for adaptive, lam in itertools.product((True, False), training.L2_LAMBDAS))
