"""Test-session set-up: one persistent XLA compilation cache for every test process and run.

Compilation dominates this suite: most tests compile a few small programs and then run
them for milliseconds. Compiled programs are kept in pytest's cache directory
(``.pytest_cache/d/xla``), shared with the CLI subprocesses and workers that tests start,
and reused by the next run, so a repeated ``pytest -m "not slow"`` mostly loads programs
instead of compiling them. An entry is keyed by the program, the JAX and jaxlib versions
and the compiler flags, so it never changes a number.

``pytest --cache-clear`` starts cold; ``JAX_COMPILATION_CACHE_DIR`` puts the cache
elsewhere; with ``-p no:cacheprovider`` each session gets a fresh temporary one.
"""

import os
import sys
import tempfile

_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache every program
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(1 << 30),  # bytes; least recently used go first
}


def pytest_configure(config):
    cache = getattr(config, "cache", None)
    if cache is not None:
        directory = str(cache.mkdir("xla"))
    else:
        directory = tempfile.mkdtemp(prefix="neural_testbed_test_xla_cache_")
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", directory)
    for name, value in _SETTINGS.items():
        os.environ.setdefault(name, value)
    if "jax" in sys.modules:  # imported before this hook ran: set its options directly
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        for name in _SETTINGS:
            jax.config.update(name.lower(), type(jax.config.values[name.lower()])(
                os.environ[name]))
