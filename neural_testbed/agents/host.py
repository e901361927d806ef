"""Agents trained as ordinary Python (NumPy, scikit-learn, PyTorch): the bridge to the evaluator.

A :class:`~neural_testbed.base.HostAgent` trains on the host, problem by
problem, into any Python object, and samples NumPy logits for many networks at
once. The evaluator is a compiled JAX program, so the trained state stays on
the host in a :class:`HostStates` table and travels through the program as an
int32 handle; the ENN's ``apply`` is a ``jax.pure_callback`` that, under the
evaluator's ``vmap`` over belief samples and test samples, receives a whole
chunk of networks and calls the agent's ``sample`` once for all of them (never
once per network or per test sample).

An error in the agent's ``sample`` (or logits of the wrong shape, or complex ones)
is raised inside XLA, which wraps it in a runtime error whose message holds a
traceback, and JAX logs another: it is raised as a :class:`HostAgentError`, which
the table keeps (:meth:`HostStates.take_failure`) for the runner to raise in its
place, and whose log records are dropped.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base

__all__ = ["HostAgentError", "HostStates", "host_enn", "host_seed", "train_on_host"]


class HostAgentError(ValueError):
    """A host agent's ``sample`` failed or returned logits the evaluator cannot use."""


class _DropHostAgentErrors(logging.Filter):
    """Drops JAX's logged traceback of a :class:`HostAgentError`: the runner reports
    the error in one line (a failed row)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HostAgentError))


logging.getLogger("jax._src.callback").addFilter(_DropHostAgentErrors())  # pure_callback's


class HostStates:
    """Trained host states by handle, for the duration of a batch of problems, and the
    first error of their agent's ``sample``."""

    def __init__(self):
        self._states: dict[int, Any] = {}
        self._next = itertools.count()
        self._failure: HostAgentError | None = None

    def put(self, state: Any) -> int:
        handle = next(self._next)
        self._states[handle] = state
        return handle

    def get(self, handle: int) -> Any:
        return self._states[handle]

    def clear(self) -> None:
        self._states.clear()
        self._failure = None

    def fail(self, message: str) -> HostAgentError:
        """A :class:`HostAgentError` of ``message``, kept unless an earlier one is."""
        error = HostAgentError(message)
        self._failure = self._failure or error
        return error

    def take_failure(self) -> HostAgentError | None:
        """The error kept since the last call (None if there was none), forgotten."""
        failure, self._failure = self._failure, None
        return failure


def host_seed(key: jax.Array) -> int:
    """A Python int seed (uint32) for host code, drawn from a JAX key."""
    return int(jax.random.bits(key, dtype=jnp.uint32))


def train_on_host(agent: base.HostAgent, states: HostStates, agent_keys: jax.Array,
                  instances: Any, problems: Sequence[base.Problem], agent_seed: int) -> np.ndarray:
    """Trains ``agent`` problem by problem, each on its own T pairs (the first rows of a
    padded set: a host agent gets no mask), into ``states``; returns their handles, one
    per key (padding problems beyond ``problems`` reuse the last)."""
    data = jax.device_get(instances.data)
    temperatures = np.asarray(jax.device_get(instances.prior.temperature))
    handles = []
    for i, problem in enumerate(problems):
        prior = instances.prior.replace(temperature=float(temperatures[i]))
        rows = problem.num_train
        state = agent.train(host_seed(jax.random.fold_in(agent_keys[i], agent_seed)),
                            base.Data(x=data.x[i, :rows], y=data.y[i, :rows]), prior)
        handles.append(states.put(state))
    handles += [handles[-1]] * (len(agent_keys) - len(problems))
    return np.array(handles, np.int32)


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
        try:
            logits = np.asarray(agent.sample(states.get(int(np.ravel(handle)[0])), inputs,
                                             indices))
        except Exception as error:  # the agent's own code may raise anything
            raise states.fail(f"host agent's sample raised {type(error).__name__}: "
                              f"{error}") from None
        expected = (networks, x.shape[-2], num_classes)
        if logits.shape != expected:
            raise states.fail(f"host agent's sample returned logits of shape {logits.shape} "
                              f"for {networks} networks on {x.shape[-2]} inputs; expected "
                              f"{expected}")
        if not np.issubdtype(logits.dtype, np.integer) and not np.issubdtype(logits.dtype,
                                                                              np.floating):
            raise states.fail(f"host agent's sample returned logits of dtype {logits.dtype}; "
                              "logits must be real numbers")
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
