"""Loading user agents: ``--import MODULE`` and the ``neural_testbed.agents`` entry points.

A user module registers its agents when imported (it calls
:func:`neural_testbed.agents.register`). A package can instead declare an
entry point in the group ``neural_testbed.agents`` whose name is the agent
name and whose object is an :class:`AgentSpec`, e.g. in its pyproject.toml::

    [project.entry-points."neural_testbed.agents"]
    my_agent = "my_package.agent:SPEC"
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
from types import ModuleType

from neural_testbed.agents import registry

__all__ = ["ENTRY_POINT_GROUP", "import_agent_module", "load_entry_points"]

ENTRY_POINT_GROUP = "neural_testbed.agents"
log = logging.getLogger(__name__)


def import_agent_module(name: str) -> ModuleType:
    """Imports a module by dotted name, or a ``.py`` file by path.

    Raises:
      ValueError: if it cannot be found or fails to import.
    """
    try:
        if name.endswith(".py") or os.sep in name:
            if not os.path.isfile(name):
                raise ValueError(f"--import {name}: no such file")
            module_name = os.path.splitext(os.path.basename(name))[0]
            spec = importlib.util.spec_from_file_location(module_name, name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # like `python -m`: modules in the working directory
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise ValueError(f"--import {name}: {error} (is it on PYTHONPATH or in this directory?)") from None
    except ValueError:
        raise
    except Exception as error:  # the user's module raised while importing
        raise ValueError(f"--import {name}: importing it raised {type(error).__name__}: {error}") from None


def load_entry_points() -> list[str]:
    """Registers the agents that installed packages declare; returns their names.

    A broken plugin is logged and skipped, so it cannot stop the command.
    """
    names = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name in registry.AGENTS:
            continue
        try:
            spec = entry_point.load()
            registry.register(entry_point.name, spec)
            names.append(entry_point.name)
        except Exception as error:  # a third-party plugin may fail in any way
            log.warning("skipping agent plugin %r (%s): %s: %s", entry_point.name,
                        entry_point.value, type(error).__name__, error)
    return names
