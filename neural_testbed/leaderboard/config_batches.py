"""Configs of one agent that can share programs: vmapped with their float fields traced.

Configs that differ only in float-valued fields (learning rates, weight-decay
scales, prior scales, dropout rates) build the same program shapes, so one
compiled program can train and evaluate several of them at once, with the
differing floats as a ``[configs, fields]`` argument (``vmap`` over configs).
That turns a config sweep on a GPU from many small launches into a few large
ones, and on a CPU compiles once per group instead of once per config.

Every other field (ints such as step counts and ensemble sizes, tuples of
widths, strings, bools) is part of the group's identity, because it can change
shapes, loops or Python-level branches. An agent whose construction uses a
traced float in Python (``if``, ``float()``, ``math``) raises while it is
traced; the runner then falls back to one config at a time.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["batch_configs", "group_key", "traced_fields", "values_of", "with_values"]


def _is_float(value: Any) -> bool:
    return type(value) is float  # not bool, not int: those can set shapes and branches


def group_key(config: Any) -> Any:
    """What configs of one batch must share: the type and every field that is not a
    float; None (never batched) for a config that is not a dataclass instance."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return None
    fixed = tuple((f.name, repr(getattr(config, f.name))) for f in dataclasses.fields(config)
                  if not _is_float(getattr(config, f.name)))
    return type(config), fixed


def traced_fields(configs: Sequence[Any]) -> tuple[str, ...]:
    """The float fields whose values differ across ``configs`` (one group)."""
    first = configs[0]
    return tuple(f.name for f in dataclasses.fields(first)
                 if _is_float(getattr(first, f.name))
                 and any(getattr(c, f.name) != getattr(first, f.name) for c in configs))


def values_of(configs: Sequence[Any], names: Sequence[str]) -> np.ndarray:
    """The ``[configs, fields]`` float32 array of ``names``' values."""
    return np.array([[getattr(c, n) for n in names] for c in configs], np.float32)


def with_values(config: Any, names: Sequence[str], values) -> Any:
    """A copy of ``config`` with fields ``names`` set to ``values`` (traced scalars).

    The copy skips the config's validation, which compares values in Python: the
    values set are those of configs that were validated when they were made.
    """
    made = copy.copy(config)
    for i, name in enumerate(names):
        object.__setattr__(made, name, values[i])
    return made


def batch_configs(configs: Sequence[Any], size: int) -> list[tuple[Any, ...]]:
    """``configs`` cut into batches of at most ``size`` configs of one group each.

    Groups in order of first appearance, configs in their order within a group, so
    the batches depend only on the configs and ``size``.
    """
    groups: dict[Any, list[Any]] = {}
    for i, config in enumerate(configs):
        key = group_key(config) if size > 1 else None
        groups.setdefault(("alone", i) if key is None else key, []).append(config)
    return [tuple(members[i:i + size]) for members in groups.values()
            for i in range(0, len(members), size)]
