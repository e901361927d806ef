"""The executable cache: a program it holds is loaded without lowering and computes what
the program compiled afresh computes; a program that differs in code, constants or
argument types is compiled anew; a damaged entry, or one that does not run, is dropped;
a program JAX's own cache loaded, or one calling back into Python, is not written out;
the folder keeps the most recently used executables within its limit."""

import logging
import os
import subprocess
import sys
import time
import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import executable_cache

ARGS = (jax.random.key(0), np.arange(6, dtype=np.float32).reshape(2, 3))
NONCE = 0.0  # in every test program; new in each test (``store``)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(executable_cache, "_directory", executable_cache._directory)  # restored
    executable_cache.use(str(tmp_path))
    # Programs JAX's persistent cache has never seen (the suite's keeps every program across
    # sessions): a program JAX loads from it is not written out (tested below).
    monkeypatch.setattr(sys.modules[__name__], "NONCE", uuid.uuid4().int % 10**6 * 1e-9)
    return tmp_path


@pytest.fixture
def lowerings(monkeypatch):
    """Counts the programs lowered to XLA (the step a cached executable skips), apart from
    the one-off factorisation lowered to set up LAPACK before the first load."""
    executable_cache._initialise_lapack()
    count = []
    lower = jax.stages.Traced.lower

    def counting(self, *args, **kwargs):
        count.append(1)
        return lower(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Traced, "lower", counting)
    return count


def _scaled(scale):
    def program(key, x):
        return jax.random.normal(key, x.shape) * scale + jnp.tanh(x).sum() + NONCE
    return program


def _times(values):
    """A program closing over an array: a constant of its jaxpr, not printed in its text."""
    def program(key, x):
        return x * values + jax.random.uniform(key) + NONCE
    return program


def _entries(store):
    return sorted(store.glob("*.executable"))


def test_a_kept_program_is_loaded_without_lowering_and_computes_the_same(store, lowerings):
    executable_cache.compile_program(_scaled(2.0), ARGS)
    loaded = executable_cache.compile_program(_scaled(2.0), ARGS)  # another function object
    assert len(lowerings) == 1 and len(_entries(store)) == 1
    np.testing.assert_array_equal(loaded(*ARGS), jax.jit(_scaled(2.0))(*ARGS))


def test_programs_differing_in_code_constants_or_argument_types_are_compiled_anew(
        store, lowerings):
    ones, twos = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    cases = [(_scaled(2.0), ARGS), (_scaled(3.0), ARGS), (_times(ones), ARGS),
             (_times(twos), ARGS), (_scaled(2.0), (ARGS[0], ARGS[1][:1])),
             (_scaled(2.0), (ARGS[0], ARGS[1].astype(np.int32)))]
    for program, args in cases:
        compiled = executable_cache.compile_program(program, args)
        np.testing.assert_array_equal(compiled(*args), jax.jit(program)(*args))
    assert len(lowerings) == len(cases) and len(_entries(store)) == len(cases)


def test_a_damaged_entry_is_dropped_and_the_program_compiled_again(store, caplog):
    executable_cache.compile_program(_scaled(2.0), ARGS)
    [entry] = _entries(store)
    entry.write_bytes(b"not an executable")
    compiled = executable_cache.compile_program(_scaled(2.0), ARGS)
    assert "would not load" in caplog.text
    np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(2.0))(*ARGS))
    # JAX's cache now holds the program, so it is not written out again (below).
    assert _entries(store) == []


def test_an_entry_that_loads_but_does_not_run_is_dropped_and_compiled_afresh(store, caplog):
    """Here another program's executable under this program's key (its arguments differ)."""
    executable_cache.compile_program(_scaled(2.0), ARGS)
    [entry] = _entries(store)
    other_args = (ARGS[0], ARGS[1][:1])
    executable_cache.compile_program(_scaled(2.0), other_args)
    [other] = [e for e in _entries(store) if e != entry]
    other.replace(entry)
    compiled = executable_cache.compile_program(_scaled(2.0), ARGS)
    np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(2.0))(*ARGS))
    assert "failed to run" in caplog.text and _entries(store) == []
    np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(2.0))(*ARGS))  # again


@pytest.mark.skipif(not jax.config.values["jax_compilation_cache_dir"],
                    reason="JAX's persistent cache is off")
def test_a_program_jax_loaded_from_its_own_cache_is_not_written_out(store, monkeypatch):
    """Written out, it would fail in the next process ("Function ... not found")."""
    monkeypatch.setattr(executable_cache, "_directory", None)
    executable_cache.compile_program(_scaled(5.0), ARGS)  # into JAX's cache only
    monkeypatch.setattr(executable_cache, "_directory", str(store))
    compiled = executable_cache.compile_program(_scaled(5.0), ARGS)
    np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(5.0))(*ARGS))
    assert _entries(store) == []


@pytest.mark.skipif(not jax.config.values["jax_compilation_cache_dir"],
                    reason="JAX's persistent cache is off")
def test_a_program_jax_loaded_then_found_in_memory_is_not_written_out(store, monkeypatch):
    """JAX keeps what it loaded in memory too, and hands it out again without any event;
    written out then, its executable fails to run in the next process."""
    monkeypatch.setattr(executable_cache, "_directory", None)
    executable_cache.compile_program(_scaled(7.0), ARGS)  # into JAX's cache only
    monkeypatch.setattr(executable_cache, "_directory", str(store))
    program = _scaled(7.0)
    executable_cache.compile_program(program, ARGS)  # loaded from JAX's cache
    compiled = executable_cache.compile_program(program, ARGS)  # from JAX's memory
    np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(7.0))(*ARGS))
    assert _entries(store) == []


def test_a_program_calling_back_into_python_is_not_kept(store, caplog):
    """Its executable points into this process; it is not even tried (no warning)."""
    def program(key, x):
        return jax.pure_callback(np.negative, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    compiled = executable_cache.compile_program(program, ARGS)
    np.testing.assert_array_equal(compiled(*ARGS), -ARGS[1])
    assert _entries(store) == [] and caplog.text == ""


def test_an_unwritable_folder_is_said_once_and_every_program_still_compiles(
        store, monkeypatch, caplog):
    monkeypatch.setattr(executable_cache, "_told_unwritable", False)
    monkeypatch.setattr(executable_cache, "_directory", str(store / "missing"))
    for scale in (2.0, 3.0):
        compiled = executable_cache.compile_program(_scaled(scale), ARGS)
        np.testing.assert_array_equal(compiled(*ARGS), jax.jit(_scaled(scale))(*ARGS))
    warned = [r for r in caplog.records
              if r.levelno >= logging.WARNING and "could not keep" in r.getMessage()]
    assert len(warned) == 1


def test_loading_an_entry_makes_it_the_most_recently_used(store):
    executable_cache.compile_program(_scaled(2.0), ARGS)
    [entry] = _entries(store)
    os.utime(entry, (1.0, 1.0))
    executable_cache.compile_program(_scaled(2.0), ARGS)
    assert entry.stat().st_mtime > time.time() - 600


def test_the_least_recently_used_entries_go_first_beyond_the_limit(store, monkeypatch):
    monkeypatch.setattr(executable_cache, "MAX_BYTES", 250)
    for used, name in enumerate("abcd"):
        path = store / f"{name}.executable"
        path.write_bytes(bytes(100))
        os.utime(path, (used + 1.0, used + 1.0))
    old, fresh = store / "e.executable.1.2.partial", store / "f.executable.1.3.partial"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(old, (1.0, 1.0))
    executable_cache._evict(str(store))
    assert [p.name for p in _entries(store)] == ["c.executable", "d.executable"]
    assert not old.exists() and fresh.exists()  # a partial write may still be going on


_FACTORISING_PROGRAM = """
import subprocess
import sys
import jax.numpy as jnp
from neural_testbed import compilation_cache, executable_cache
compilation_cache.enable({"NEURAL_TESTBED_CACHE_DIR": sys.argv[1]})
compiled = executable_cache.compile_program(
    lambda x: jnp.linalg.cholesky(x @ x.T + 3.0 * jnp.eye(5)).sum(), (jnp.ones((5, 5)),))
print(type(compiled).__name__, float(compiled(jnp.ones((5, 5)))))
"""


def test_a_kept_factorisation_runs_as_the_first_program_of_a_new_process(tmp_path):
    """jaxlib finds its LAPACK kernels when it first lowers a factorisation: a kept
    executable that factorises, run before anything was lowered, crashed its process
    (a segmentation fault, in ensemble+'s and gp's regression sweeps)."""
    runs = [subprocess.run([sys.executable, "-c", _FACTORISING_PROGRAM, str(tmp_path)],
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stderr[-500:]
    (fresh, kind_1), (loaded, kind_2) = (r.stdout.split() for r in runs)
    assert (fresh, loaded) == ("Compiled", "_Loaded") and kind_1 == kind_2
