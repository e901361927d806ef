"""Test-session set-up: one persistent XLA compilation cache for every test process and run.

Compilation dominates this suite: most tests compile a few small programs and then run
them for milliseconds. Compiled programs are kept in pytest's cache directory
(``.pytest_cache/d/xla``), shared with the CLI subprocesses and workers that tests start,
and reused by the next run, so a repeated ``pytest -m "not slow"`` mostly loads programs
instead of compiling them. An entry is keyed by the program, the JAX and jaxlib versions
and the compiler flags, so it never changes a number.

``pytest --cache-clear`` starts cold; ``JAX_COMPILATION_CACHE_DIR`` puts the cache
elsewhere; with ``-p no:cacheprovider`` each session gets a fresh temporary one.

The tests also compile with XLA's backend optimisations off
(``JAX_DISABLE_MOST_OPTIMIZATIONS=1``, inherited by the commands they start): the
programs are the same, LLVM just does not optimise them, which halves compile times
(hypermodel's training program: 4.4 s -> 2.2 s) and cut the cold suite from 616 s to
454 s on the 2-core machine. Results agree with optimised code to float32 rounding
(the order of a few float operations may differ), so a test that compares two
programs bit for bit compares programs compiled alike. ``JAX_DISABLE_MOST_OPTIMIZATIONS=0``
tests optimised code.
"""

import os
import sys
import tempfile

import pytest

_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache every program
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(1 << 30),  # bytes; least recently used go first
    "JAX_DISABLE_MOST_OPTIMIZATIONS": "1",  # compile fast, run slower (module docstring)
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
            current = jax.config.values[name.lower()]
            value = os.environ[name]
            jax.config.update(name.lower(), value.lower() in ("1", "true") if isinstance(
                current, bool) else type(current)(value))



@pytest.fixture
def optimised_compiles():
    """Compile with XLA's optimisations on for one test: for the few tests whose time is in
    running a long program (meta-training thousands of steps), not in compiling many."""
    import jax

    before = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)
