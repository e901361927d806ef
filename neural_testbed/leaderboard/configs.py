"""Stable identities of agent configs: canonical JSON and a short hash.

Rows of the results store are keyed by the hash, so the same config gets the
same key on every machine and in every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

__all__ = ["config_changes", "config_hash", "config_json"]


def config_json(config: Any) -> str:
    """Canonical JSON of a config dataclass (sorted keys, tuples as lists); ``null`` for None.

    None stands for an agent run without a config (e.g. built by hand and
    passed to ``run_agent``).
    """
    value = None if config is None else dataclasses.asdict(config)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def config_hash(agent: str, config: Any) -> str:
    """A stable 12-hex-digit id of (agent name, config)."""
    text = json.dumps({"agent": agent, "config": json.loads(config_json(config))}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _set_syntax(value: Any) -> str:
    """A config value as ``--set`` reads it (``50,50``, ``false``, ``0.1``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_set_syntax(v) for v in value)
    return str(value)


def config_changes(config: str, default: Any) -> str:
    """The fields of a stored config (its JSON) that differ from ``default``, the agent's
    default config (None for an agent not registered here), as ``--set`` reads them:
    a short name for a config beside its hash."""
    try:
        fields = json.loads(config)
    except (TypeError, ValueError):  # e.g. "per setting: 3 configs"
        return str(config)
    if not isinstance(fields, dict):
        return ""
    if default is None:
        return "(unregistered: see --verbose)"
    default = json.loads(config_json(default))
    changed = [f"{k}={_set_syntax(v)}" for k, v in sorted(fields.items()) if default.get(k) != v]
    return " ".join(changed) or "default"
