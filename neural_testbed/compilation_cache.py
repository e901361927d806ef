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

A cached entry is machine code that the next run executes (JAX does not unpickle
it, but whoever can write the folder can plant a program), so the cache is used
only in a folder of this user's that group and others cannot write: one made
here is mode 0700, and one owned by another user or writable by group or others
is not used (a one-line warning says so).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping

import jax

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
    directory, or None when it is off or its directory cannot be made or is not
    private (then off in this process, even if ``JAX_COMPILATION_CACHE_DIR`` named it).

    Call it before the first compilation (JAX decides once per process whether a
    cache is in use). Every program is cached, however short its compilation,
    unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise.
    """
    directory = cache_directory(environ)
    if directory is None:
        return None
    refusal = _unsafe(directory)
    if refusal:  # a cache only saves time: run without one
        _log.warning("no compilation cache: %s", refusal)
        jax.config.update("jax_compilation_cache_dir", None)  # JAX reads its variable itself
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in environ:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return directory


def _unsafe(directory: str) -> str | None:
    """Makes ``directory`` (mode 0700) if it is missing; says why it must not hold
    programs this process runs, or None if only this user can write it."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        status = os.stat(directory)
    except OSError as error:
        return f"cannot make {directory} ({error})"
    if hasattr(os, "geteuid") and status.st_uid != os.geteuid():
        return (f"{directory} belongs to another user (uid {status.st_uid}); use a folder of "
                "your own (NEURAL_TESTBED_CACHE_DIR=DIR)")
    if status.st_mode & 0o022:
        return (f"{directory} is writable by group or others (mode "
                f"{stat.S_IMODE(status.st_mode):o}); chmod go-w it or use another folder "
                "(NEURAL_TESTBED_CACHE_DIR=DIR)")
    return None
