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

    A dotted name is looked up on ``sys.path`` and then in the working
    directory, which is *appended* to ``sys.path`` (never put first), so a
    file in the working directory can never shadow an installed package: a
    stray ``matplotlib.py`` there is not what ``import matplotlib`` finds. A
    file imported by path is registered under its file name, which must not
    be the name of a module that is installed or already imported.

    Raises:
      ValueError: if it cannot be found, fails to import, or calls ``sys.exit``.
    """
    try:
        if name.endswith(".py") or os.sep in name or (os.altsep and os.altsep in name):
            return _import_file(name)
        cwd = os.getcwd()
        if not any(_same_dir(entry, cwd) for entry in sys.path):
            sys.path.append(cwd)  # last: modules here only if no installed one has the name
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise ValueError(f"--import {name}: {error} (is it on PYTHONPATH or in this directory?)") from None
    except ValueError:
        raise
    except Exception as error:  # the user's module raised while importing
        raise ValueError(f"--import {name}: importing it raised {type(error).__name__}: {error}") from None
    except SystemExit as error:  # not the command's own exit: it would end with no message
        raise ValueError(f"--import {name}: the module exited with status {error.code!r} "
                         "while being imported") from None


def _same_dir(entry: str, directory: str) -> bool:
    try:
        return os.path.samefile(entry or os.curdir, directory)
    except OSError:
        return False


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise ValueError(f"--import {path}: no such file")
    module_name = os.path.splitext(os.path.basename(path))[0]
    if not module_name.isidentifier():
        raise ValueError(f"--import {path}: {module_name!r} is not a valid module name; rename "
                         "the file")
    known = sys.modules.get(module_name)
    if known is not None:
        if getattr(known, "__file__", None) and _same_file(known.__file__, path):
            return known  # imported before (e.g. a worker importing it again)
        where = getattr(known, "__file__", None) or "elsewhere"
        raise ValueError(f"--import {path}: it would replace the module {module_name!r}, already "
                         f"imported from {where}; rename the file")
    try:
        installed = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        installed = None
    if installed is not None and not (installed.origin and _same_file(installed.origin, path)):
        raise ValueError(f"--import {path}: it would shadow the installed module {module_name!r} "
                         f"({installed.origin}); rename the file")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so that its config classes pickle by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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
