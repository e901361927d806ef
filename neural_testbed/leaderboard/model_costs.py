"""What an agent's default config costs beyond seconds: the size of its trained state and
the floating-point operations of one belief sample, read from its programs.

Seconds depend on the machine; these do not, so they put cost beside quality on any
table. Both come from tracing alone (``jax.eval_shape`` of training, XLA's cost analysis
of the lowered ``apply``), so nothing is trained. Agents that train outside JAX (host
agents) have neither.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from neural_testbed import base
from neural_testbed.agents import registry

__all__ = ["ModelCost", "model_cost"]

_INPUTS = 100  # the inputs one belief sample is evaluated at; FLOPs are per input


@dataclasses.dataclass(frozen=True)
class ModelCost:
    """``state_floats``: floating-point numbers in the trained state (its parameters, and
    for a GP or CNP the training pairs it keeps); ``flops_per_input``: XLA's count of
    floating-point operations for one belief sample at one input (NaN where XLA gives
    none)."""

    state_floats: int
    flops_per_input: float


def model_cost(agent: str, problem: base.Problem) -> ModelCost | None:
    """The cost of ``agent``'s default config on ``problem``'s shapes; None for a host
    agent."""
    spec = registry.get_agent(agent)
    built = spec.make(spec.default, base.Shapes.of(problem))
    if isinstance(built, base.HostAgent):
        return None
    instance = jax.eval_shape(problem.instance)  # shapes only: no data is drawn
    key = jax.random.key(0)
    state = jax.eval_shape(built.train, key, instance.data, instance.prior)
    floats = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(state)
                 if np.issubdtype(leaf.dtype, np.floating))
    index = jax.eval_shape(built.enn.sample_index, key)
    inputs = jax.ShapeDtypeStruct((_INPUTS, base.Shapes.of(problem).input_dim), np.float32)
    analysis = jax.jit(built.enn.apply).lower(state, inputs, index).cost_analysis()
    if isinstance(analysis, list):  # older JAX: one dict per device
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    return ModelCost(int(floats), math.nan if flops is None else float(flops) / _INPUTS)
