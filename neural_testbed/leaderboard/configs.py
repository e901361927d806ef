"""Stable identities of agent configs: canonical JSON and a short hash.

Rows of the results store are keyed by the hash, so the same config gets the
same key on every machine and in every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

__all__ = ["config_hash", "config_json"]


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
