"""A persistent XLA compilation cache for the processes the command owns.

Most of a short run is compiling: `run --agent mlp` on the quick sweep spends
most of its time in XLA, and a sweep compiles each agent config once per
problem shape. With JAX's persistent cache on, compiled programs are written to
disk and the next run that needs the same program (the same sweep into a new
store, another agent's run on the same evaluator shapes, a worker process)
loads it instead of compiling it. An entry is keyed by the program, the JAX
and jaxlib versions, the compiler flags and the device, so a cached program
never changes a number.

The command and its worker processes turn it on (:func:`enable`); the library
alone never does, since the cache is a process-wide JAX setting. Where:

- ``NEURAL_TESTBED_CACHE_DIR=DIR`` puts it in DIR; ``NEURAL_TESTBED_CACHE_DIR=off``
  turns it off;
- else ``JAX_COMPILATION_CACHE_DIR``, if set, is used as JAX itself would;
- else ``$XDG_CACHE_HOME/neural-testbed/xla`` (``~/.cache/neural-testbed/xla``).

The cache keeps at most :data:`MAX_BYTES`, dropping the least recently used
programs first (JAX's eviction, which needs the ``filelock`` package).
:func:`enable` also keeps compiled executables whole in its ``executables``
folder (``executable_cache``), so that a warm run need not lower its programs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import jax

from neural_testbed import executable_cache

__all__ = ["MAX_BYTES", "cache_directory", "enable"]

MAX_BYTES = 2 << 30  # 2 GiB; the Figure 6 sweeps of four agents wrote 547 programs, 148 MB
_OFF = {"off", "0", "false", "no", "none", ""}

_log = logging.getLogger(__name__)


def cache_directory(environ: Mapping[str, str] = os.environ) -> str | None:
    """Where the cache goes under these environment variables, or None when off."""
    chosen = environ.get("NEURAL_TESTBED_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in _OFF else os.path.expanduser(chosen)
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return environ["JAX_COMPILATION_CACHE_DIR"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neural-testbed", "xla")


def enable(environ: Mapping[str, str] = os.environ) -> str | None:
    """Turns JAX's persistent compilation cache on for this process; returns its
    directory, or None when it is off or its directory cannot be made.

    Call it before the first compilation (JAX decides once per process whether a
    cache is in use). Every program is cached, however short its compilation,
    unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise.
    """
    directory = cache_directory(environ)
    if directory is None:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:  # a cache only saves time: run without one
        _log.warning("no compilation cache: cannot make %s (%s)", directory, error)
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in environ:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    executables = os.path.join(directory, "executables")
    try:
        os.makedirs(executables, exist_ok=True)
    except OSError as error:
        _log.warning("compiled programs are not kept whole: cannot make %s (%s)",
                     executables, error)
    else:
        executable_cache.use(executables)
    return directory
