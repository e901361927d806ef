"""Checks every agent config shares: each field has the type its annotation names.

Every built-in config's ``__post_init__`` ends with :func:`check_fields`,
after its own range rules (widths >= 1, a rate in [0, 1), ...), so a value of
the wrong kind that passes those (``num_steps=2.5``, ``batch_size=True``,
``hidden=(50.5,)``, ``l2_weight_decay=inf``) is refused with one line naming
the field when the config is made, not later inside jit. The sweep pipeline
calls it on user agents' configs too.

The rules, by annotation:

- ``int``: an integer, not a bool, that fits int32: JAX's integers (64-bit
  ones are off), so a larger count overflows inside jit. A field named
  ``num_steps`` or ending in ``_steps`` is a loop's length: at most
  :data:`MAX_STEPS`.
- ``float``: a finite real number (an integer is accepted), not a bool, that
  float32 holds: 0, or a magnitude from float32's smallest normal number to
  its largest, since a program computes in float32 and would turn ``1e-320``
  into 0 and ``1e39`` into inf.
- ``bool``: ``True`` or ``False``.
- ``str``: a string; ``Literal[...]``: one of the listed values.
- ``tuple[T, ...]`` / ``tuple[T1, T2]``: a tuple whose items obey ``T``.
- ``X | None``: ``None`` or an ``X``.

Fields with other annotations (``Any``, a user's own class) are not checked.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from typing import Any

import numpy as np

__all__ = ["MAX_STEPS", "check_fields"]

# The longest training loop a config may ask for: 200 times sgmcmc's 500,000 steps, the
# longest of any built-in sweep. A loop keeps a key and a loss per step (12 bytes), and
# at a few microseconds a step it already runs for minutes per problem.
MAX_STEPS = 10**8
_INT32 = np.iinfo(np.int32)
# As Python floats: comparing 1e39 with NumPy's float32 maximum warns of an overflow.
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_fields(config: Any) -> None:
    """Checks each field of a config dataclass against its annotation.

    Raises:
      ValueError: naming the first field whose value breaks its annotation,
        the value, and what is allowed.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected a config dataclass instance, got {config!r}")
    try:
        hints = typing.get_type_hints(type(config))
    except Exception:  # an annotation that cannot be resolved: check nothing
        return
    for field in dataclasses.fields(config):
        annotation = hints.get(field.name, Any)
        value = getattr(config, field.name)
        allowed = _allowed(value, annotation)
        if allowed is not None:
            raise ValueError(f"{field.name} must be {allowed}, got {value!r}")
        if annotation is int and _is_steps(field.name) and value > MAX_STEPS:
            raise ValueError(f"{field.name} must be at most {MAX_STEPS} steps, got {value!r}")


def _is_steps(name: str) -> bool:
    return name == "num_steps" or name.endswith("_steps")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy's bool


def _allowed(value: Any, annotation: Any) -> str | None:
    """None if ``value`` obeys ``annotation``; else a description of what is allowed."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is bool:
        return None if _is_bool(value) else "true or false"
    if annotation is int:
        if not _is_int(value):
            return "an integer"
        return (None if _INT32.min <= value <= _INT32.max
                else f"an integer that fits int32 ({_INT32.min} to {_INT32.max})")
    if annotation is float:
        if not (isinstance(value, numbers.Real) and not _is_bool(value)
                and math.isfinite(float(value))):
            return "a finite number"
        size = abs(float(value))
        return (None if size == 0 or _FLOAT32_TINY <= size <= _FLOAT32_MAX
                else f"a number float32 holds (0, or of magnitude {_FLOAT32_TINY:.4g} to "
                     f"{_FLOAT32_MAX:.4g})")
    if annotation is str:
        return None if isinstance(value, str) else "a string"
    if origin is typing.Literal:
        return None if value in args else "one of " + ", ".join(map(repr, args))
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        failures = [_allowed(value, a) for a in options]
        if any(f is None for f in failures):
            return None
        return " or ".join(failures) + (" or None" if len(options) < len(args) else "")
    if origin is tuple:
        if not isinstance(value, tuple):
            return _describe_tuple(args)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(v, args[0]) for v in value]
        elif len(args) == len(value):
            items = list(zip(value, args))
        else:
            return _describe_tuple(args)
        return _describe_tuple(args) if any(_allowed(v, a) for v, a in items) else None
    return None  # Any, or a type we do not know how to check


def _describe_tuple(args: tuple) -> str:
    if len(args) == 2 and args[1] is Ellipsis:
        kind = {int: "integers", float: "finite numbers", bool: "booleans", str: "strings"}
        return f"a tuple of {kind.get(args[0], repr(args[0]))}"
    return f"a tuple of {len(args)} items"
