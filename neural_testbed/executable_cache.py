"""Compiled programs found again from their traced form, without lowering them.

JAX's persistent cache (``compilation_cache``) keys a program by its lowered XLA
module, so even a warm run traces *and lowers* each program before it can load
it. Lowering is the larger part: for the smoke sweep's four problems about
0.6 s, next to 0.3 s of tracing and 0.3 s of loading. This cache keys a compiled
executable by what lowering is a function of (the traced jaxpr with its
constants, the arguments' structure and types, JAX's settings and versions, the
device) and loads it without lowering. A program whose code changed traces to
another jaxpr, so an entry is never stale. A program that calls back into
Python is not kept: its executable points into the process that compiled it.
Only a program XLA compiled in this call is written out: one that JAX loaded from
its own cache, or handed out again from memory after loading it, cannot be written
out whole (the next process fails to run it, "Function ... not found"); it is lowered
and loaded as before. Before the first load, LAPACK is set up as lowering would
(:func:`_initialise_lapack`).

It is on only where the command turns the persistent cache on (:func:`use`, from
``compilation_cache.enable``), in that cache's ``executables`` folder, which keeps
at most :data:`MAX_BYTES`, the least recently used executables dropped first.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pickle
import platform
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.extend
import jax.monitoring
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

__all__ = ["MAX_BYTES", "compile_program", "compile_traced", "use"]

MAX_BYTES = 1 << 30  # 1 GiB
_SUFFIX = ".executable"
_STALE_PARTIAL_SECONDS = 3600  # a partial write this old was left by a killed process
# In every key: entries of an earlier format are never loaded again (format 1 could hold an
# executable JAX had loaded from its own cache, which fails to run in another process).
_FORMAT = "2"

_log = logging.getLogger(__name__)
_directory: str | None = None
_JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_XLA_COMPILED = "/jax/core/compile/backend_compile_duration"  # also timed for a cache hit
_compiling = threading.local()  # .compiled, .loaded: this thread's last program
_listening = False
_told_unwritable = False


def use(directory: str | None) -> None:
    """Keeps compiled executables in ``directory`` from now on (None: keep none)."""
    global _directory, _listening
    if directory is not None and not _listening:
        jax.monitoring.register_event_listener(_note_jax_cache_hit)
        jax.monitoring.register_event_duration_secs_listener(_note_compilation)
        _listening = True
    _directory = directory


def _note_jax_cache_hit(event: str, **_) -> None:
    if event == _JAX_CACHE_HIT:  # JAX reports it in the thread that compiles
        _compiling.loaded = True


def _note_compilation(event: str, *_, **__) -> None:
    if event == _XLA_COMPILED:  # not reported when JAX hands out a program it holds
        _compiling.compiled = True


def compile_program(program: Callable, args: tuple) -> Any:
    """``jax.jit(program)`` compiled for ``args``, loaded from the cache when it holds it."""
    return compile_traced(jax.jit(program).trace(*args), args)


def compile_traced(traced: Any, args: tuple) -> Any:
    """:func:`compile_program` for a program already traced for ``args``."""
    directory = _directory
    key = _key(traced, args) if directory is not None else None
    if key is None:
        return traced.lower().compile()
    path = os.path.join(directory, key + _SUFFIX)
    compiled = _load(path)
    if compiled is not None:
        _initialise_lapack()
        return _Loaded(compiled, traced, path)
    _compiling.compiled = _compiling.loaded = False
    compiled = traced.lower().compile()
    # An executable JAX loaded from its own cache, at once or from memory later, is written
    # out without its compiled functions (the next process fails to run it, "Function ...
    # not found"), so only what XLA compiled here is kept.
    if _compiling.compiled and not _compiling.loaded:
        _save(path, compiled)
    return compiled


class _Loaded:
    """A loaded executable which, if its first run fails, is dropped from the cache and
    replaced by the program compiled afresh (an executable that loads may still not run
    here; its failure must not become failed rows run after run)."""

    def __init__(self, compiled: Any, traced: Any, path: str):
        self._compiled, self._traced, self._path = compiled, traced, path
        self._ran = False

    def __call__(self, *args):
        if self._ran:
            return self._compiled(*args)
        try:
            result = jax.block_until_ready(self._compiled(*args))
        except Exception as error:
            _log.warning("compiling again: the cached executable %s failed to run (%s)",
                         self._path, error)
            with contextlib.suppress(OSError):
                os.remove(self._path)
            self._compiled = self._traced.lower().compile()
            result = self._compiled(*args)
        self._ran = True
        return result


@functools.cache
def _initialise_lapack() -> None:
    """jaxlib points its LAPACK kernels at SciPy's when it first lowers a factorisation;
    an executable loaded whole was never lowered here, and one that factorises called
    through null pointers (a segmentation fault, the first program of a process). One
    1x1 Cholesky lowered (not compiled) does it, once a process."""
    jax.jit(jnp.linalg.cholesky).trace(jax.ShapeDtypeStruct((1, 1), jnp.float32)).lower()


def _key(traced, args) -> str | None:
    """The hash of everything the compiled program depends on, or None if it has no
    key that holds across processes."""
    jaxpr_text = str(traced.jaxpr)
    if "callback" in jaxpr_text:  # its executable points into this process
        return None
    digest = hashlib.sha256()
    avals = [jax.typeof(leaf) for leaf in jax.tree.leaves(args)]
    settings = sorted((name, str(value)) for name, value in jax.config.values.items())
    for part in (_FORMAT, jaxpr_text, str(jax.tree.structure(args)), str(avals),
                 str(settings), os.environ.get("XLA_FLAGS", ""), _machine()):
        digest.update(part.encode())
        digest.update(b"\0")
    for const in traced.jaxpr.consts:
        if jax.dtypes.issubdtype(getattr(const, "dtype", None), jax.dtypes.prng_key):
            const = jax.random.key_data(const)
        value = np.asarray(const)
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


@functools.cache
def _machine() -> str:
    """JAX's versions, the devices, and (on a CPU, where XLA compiles for the host's
    instruction set) the processor's feature flags."""
    backend = jax.extend.backend.get_backend()
    parts = [jax.__version__, jaxlib.__version__, backend.platform, backend.platform_version,
             ",".join(d.device_kind for d in jax.devices()), platform.machine()]
    if backend.platform == "cpu":
        try:
            with open("/proc/cpuinfo") as cpuinfo:
                parts += [line for line in cpuinfo if line.startswith("flags")][:1]
        except OSError:
            parts.append(platform.processor())
    return "|".join(parts)


def _load(path: str) -> Any | None:
    try:
        with open(path, "rb") as file:
            payload, in_tree, out_tree = pickle.loads(zlib.decompress(file.read()))
        compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except FileNotFoundError:
        return None
    except Exception as error:  # a damaged or foreign file: compile instead
        _log.warning("compiling again: the cached executable %s would not load (%s)",
                     path, error)
        with contextlib.suppress(OSError):
            os.remove(path)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # most recently used
    return compiled


def _save(path: str, compiled: Any) -> None:
    """Writes ``compiled`` whole or not at all (another process may be reading)."""
    partial = f"{path}.{os.getpid()}.{threading.get_ident()}.partial"
    try:
        # Level 1: a fifth of the size (as JAX's own entries) for a few milliseconds.
        blob = zlib.compress(pickle.dumps(serialize_executable.serialize(compiled)), 1)
        with open(partial, "wb") as file:
            file.write(blob)
        os.replace(partial, path)
    except Exception as error:  # a cache only saves time: go on without the entry
        global _told_unwritable
        _log.log(logging.DEBUG if _told_unwritable else logging.WARNING,
                 "could not keep the compiled program in %s: %s", path, error)
        _told_unwritable = True  # once a process: a read-only folder fails every program
        with contextlib.suppress(OSError):
            os.remove(partial)
        return
    _evict(os.path.dirname(path))


def _evict(directory: str) -> None:
    """Drops the least recently used executables while the folder holds over MAX_BYTES,
    and partial writes of killed processes."""
    entries = []
    with contextlib.suppress(OSError), os.scandir(directory) as scan:
        for entry in scan:
            with contextlib.suppress(OSError):
                stat = entry.stat()
                if entry.name.endswith(_SUFFIX):
                    entries.append((stat.st_mtime, stat.st_size, entry.path))
                elif (entry.name.endswith(".partial")
                      and time.time() - stat.st_mtime > _STALE_PARTIAL_SECONDS):
                    os.remove(entry.path)
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= MAX_BYTES:
            break
        with contextlib.suppress(OSError):
            os.remove(path)
            total -= size
