"""Configs of one agent that share programs: vmapped over the float fields it declares.

An agent's spec declares ``batchable`` float fields (``AgentSpec.batchable``): those
its ``make`` uses only in array arithmetic (learning rates, weight-decay scales,
prior scales, dropout rates). Configs that differ only in declared fields build the
same program shapes, so one compiled program trains and evaluates several of them
at once, with their values as a ``[configs, fields]`` argument (``vmap`` over
configs). That turns a config sweep on a GPU from many small launches into a few
large ones, and on a CPU compiles once per group instead of once per config.

Every other field is part of the group's identity, floats included. An agent that
declares nothing is run one config at a time. Nothing falls back: a batched program
that fails (an agent that reads a declared float in Python after all) gives failed
rows with its error, as any failure does.

Inside the program ``make`` gets :func:`with_arrays`: the batch's first config with
its declared fields set to traced float32 scalars. Every value it holds is one of a
concrete config of the batch, validated when that config was made, so it is not
validated again (a validator compares in Python, which a traced value refuses): its
class is the config's class without ``__post_init__``, built by the dataclass's own
constructor, its other fields, methods and properties the config's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["array_fields", "batch_configs", "group_key", "values_of", "with_arrays"]


def group_key(config: Any, batchable: Collection[str]) -> Hashable | None:
    """What configs of one batch share: the type and every field not in ``batchable``;
    None (never batched) when nothing is declared or ``config`` is not a dataclass."""
    if not batchable or not dataclasses.is_dataclass(config) or isinstance(config, type):
        return None
    fixed = tuple((f.name, repr(getattr(config, f.name))) for f in dataclasses.fields(config)
                  if f.name not in batchable)
    return type(config), fixed


def array_fields(configs: Sequence[Any], batchable: Collection[str]) -> tuple[str, ...]:
    """The fields whose values differ across ``configs``, all of which must be declared.

    Raises:
      ValueError: naming a differing field that is not in ``batchable``.
    """
    first = configs[0]
    differing = tuple(f.name for f in dataclasses.fields(first)
                      if any(getattr(c, f.name) != getattr(first, f.name) for c in configs))
    undeclared = [name for name in differing if name not in batchable]
    if undeclared or any(type(c) is not type(first) for c in configs[1:]):
        raise ValueError(f"configs batched together may differ only in the fields their agent "
                         f"declares batchable ({', '.join(batchable) or 'none'}); these differ "
                         f"in {', '.join(undeclared) or 'their type'}")
    return differing


def values_of(configs: Sequence[Any], names: Sequence[str]) -> np.ndarray:
    """The ``[configs, fields]`` float32 array of ``names``' values."""
    return np.array([[getattr(c, n) for n in names] for c in configs], np.float32)


@functools.cache
def _without_validation(config_type: type) -> type:
    return type(config_type.__name__, (config_type,), {
        "__post_init__": lambda self: None, "__module__": config_type.__module__,
        "__doc__": f"A {config_type.__name__} whose batchable fields hold traced values "
                   "(config_batches.with_arrays)."})


def with_arrays(config: Any, names: Sequence[str], values) -> Any:
    """``config`` with fields ``names`` set to ``values`` (float32 scalars, traced in the
    batch's program), for ``make``: see the module docstring."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    fields.update((name, values[i]) for i, name in enumerate(names))
    return _without_validation(type(config))(**fields)


def batch_configs(configs: Sequence[Any], size: int,
                  batchable: Collection[str]) -> list[tuple[Any, ...]]:
    """``configs`` cut into batches of at most ``size`` configs of one group each.

    Groups in order of first appearance, configs in their order within a group, so
    the batches depend only on the configs, ``size`` and the declaration.
    """
    groups: dict[Any, list[Any]] = {}
    for i, config in enumerate(configs):
        key = group_key(config, batchable) if size > 1 else None
        groups.setdefault(("alone", i) if key is None else key, []).append(config)
    return [tuple(members[i:i + size]) for members in groups.values()
            for i in range(0, len(members), size)]
