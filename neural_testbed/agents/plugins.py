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

    A dotted name is looked up on ``sys.path`` as it is and, only if it is not
    there, in the working directory (a ``NAME.py`` file, or a package folder
    holding the first part of the name), which is loaded from where it lies:
    the working directory is never added to ``sys.path``, so no later import
    (JAX looking for ``libtpu``, say) finds a stray file there, and a file there
    can never shadow an installed package. Such a module's own imports of other
    files in the working directory fail likewise; a package's relative imports
    work. A file imported by path is registered under its file name, which must
    not be the name of a module that is installed or already imported.

    Raises:
      ValueError: if it cannot be found, fails to import, or calls ``sys.exit``.
    """
    try:
        if name.endswith(".py") or os.sep in name or (os.altsep and os.altsep in name):
            return _import_file(name)
        if _find_spec(name) is None:
            _import_from_working_directory(name)
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


def _find_spec(name: str):
    """The module's spec on ``sys.path`` (or imported already), or None."""
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package is missing
        return None


def _import_from_working_directory(name: str) -> None:
    """Loads the top-level module of ``name`` from the working directory, if it is there;
    the rest of the name is then imported from it as usual (a package's ``__path__``)."""
    top = name.partition(".")[0]
    folder = os.path.join(os.getcwd(), top)
    if os.path.isfile(os.path.join(folder, "__init__.py")):
        spec = importlib.util.spec_from_file_location(
            top, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
    elif top == name and os.path.isfile(folder + ".py"):
        spec = importlib.util.spec_from_file_location(top, folder + ".py")
    else:
        return
    _execute(spec)


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
    return _execute(importlib.util.spec_from_file_location(module_name, path))


def _execute(spec) -> ModuleType:
    """Runs a module found by file location, registered under its name so that its config
    classes pickle by name (and workers find them by it)."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
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
