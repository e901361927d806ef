"""Checks a command makes before any work, each failing with one clear error."""

from __future__ import annotations

import os
from collections.abc import Sequence

from neural_testbed.agents import registry
from neural_testbed.leaderboard.store import StoredRow


def output_file(path: str, flag: str) -> None:
    """Refuses, before any work, a file that could not be written."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a directory; give a file name, e.g. "
                         f"{os.path.join(path, 'results.csv')!r}")
    if not os.path.isdir(directory):
        raise ValueError(f"{flag} {path!r}: there is no directory {directory!r}")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path!r} is not writable")
    elif not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: the directory {directory!r} is not writable")


def output_dir(path: str, flag: str) -> None:
    """Refuses, before any work, a directory that could not be made or written."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = ("is a file" if existing == os.path.abspath(path)
                else f"is under the file {existing!r}")
        raise ValueError(f"{flag} {path!r} {what}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: the directory {existing!r} is not writable")


def agent_in_store(name: str, rows: Sequence[StoredRow], db: str, flag: str) -> None:
    """One clear error for an agent name the store has no results for."""
    stored = sorted({r.agent for r in rows})
    if name in stored:
        return
    if name in registry.AGENTS:
        raise ValueError(f"{flag} {name!r}: {db!r} has no results for it yet (run `neural-testbed "
                         f"sweep --agent {name}`); it has results for {', '.join(stored)}")
    raise ValueError(f"{flag} {name!r}: no such agent in {db!r}, which has results for "
                     f"{', '.join(stored)}")


def registered_agent(name: str, rows: Sequence[StoredRow]) -> registry.AgentSpec:
    """The agent's spec; for an agent known only from the store, say how to load it."""
    if name not in registry.AGENTS and any(r.agent == name for r in rows):
        raise ValueError(f"agent {name!r} has results in the store but is not registered in "
                         "this command: load the module that registers it with --import MODULE")
    return registry.get_agent(name)
