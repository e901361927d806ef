"""Agents trained as ordinary Python (NumPy, scikit-learn, PyTorch): the bridge to the evaluator.

A :class:`~neural_testbed.base.HostAgent` trains on the host, problem by
problem, into any Python object, and samples NumPy logits for many networks at
once. The evaluator is a compiled JAX program, so the trained state stays on
the host in a :class:`HostStates` table and travels through the program as an
int32 handle; the ENN's ``apply`` is a ``jax.pure_callback`` that, under the
evaluator's ``vmap`` over belief samples and test samples, receives a whole
chunk of networks and calls the agent's ``sample`` once for all of them (never
once per network or per test sample).
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base

__all__ = ["HostStates", "host_enn", "host_seed"]


class HostStates:
    """Trained host states by handle, for the duration of a batch of problems."""

    def __init__(self):
        self._states: dict[int, Any] = {}
        self._next = itertools.count()

    def put(self, state: Any) -> int:
        handle = next(self._next)
        self._states[handle] = state
        return handle

    def get(self, handle: int) -> Any:
        return self._states[handle]

    def clear(self) -> None:
        self._states.clear()


def host_seed(key: jax.Array) -> int:
    """A Python int seed (uint32) for host code, drawn from a JAX key."""
    return int(jax.random.bits(key, dtype=jnp.uint32))


def host_enn(agent: base.HostAgent, states: HostStates, num_classes: int) -> base.ENN:
    """The ENN of a host agent; its state is a handle into ``states``.

    Indices are member ids in ``[0, num_indices)`` (drawn uniformly) or, for
    ``num_indices=None``, uint32 seeds, one per network.
    """

    def call_sample(handle, x, index):
        # Under vmap (vmap_method="expand_dims") unbatched arguments arrive with
        # size-1 axes: broadcast x [..., n, d] and index [...] to one batch of networks.
        x, index = np.asarray(x), np.asarray(index)
        batch = np.broadcast_shapes(x.shape[:-2], index.shape)
        networks = int(np.prod(batch, dtype=np.int64))
        inputs = np.broadcast_to(x, batch + x.shape[-2:]).reshape(networks, *x.shape[-2:])
        indices = np.broadcast_to(index, batch).reshape(networks)
        logits = np.asarray(agent.sample(states.get(int(np.ravel(handle)[0])), inputs, indices))
        expected = (networks, x.shape[-2], num_classes)
        if logits.shape != expected:
            raise ValueError(f"host agent's sample returned logits of shape {logits.shape} for "
                             f"{networks} networks on {x.shape[-2]} inputs; expected {expected}")
        return logits.reshape(batch + logits.shape[1:]).astype(np.float32)

    def apply(handle, x, index):
        shape = jax.ShapeDtypeStruct((x.shape[0], num_classes), jnp.float32)
        return jax.pure_callback(call_sample, shape, handle, x, index,
                                 vmap_method="expand_dims")

    if agent.num_indices is None:
        sample_index = lambda key: jax.random.bits(key, dtype=jnp.uint32)
    else:
        sample_index = lambda key: jax.random.randint(key, (), 0, agent.num_indices)
    return base.ENN(apply, sample_index, agent.num_indices)
