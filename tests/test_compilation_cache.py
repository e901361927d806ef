"""The persistent compilation cache: where it goes, how it is turned off, and that a second
run of the same sweep into a new store, with worker processes, compiles nothing."""

import os
import pathlib
import subprocess
import sys

import pytest

from neural_testbed import compilation_cache

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "environ, expected",
    [({"NEURAL_TESTBED_CACHE_DIR": "/c", "JAX_COMPILATION_CACHE_DIR": "/j"}, "/c"),
     ({"NEURAL_TESTBED_CACHE_DIR": "off", "JAX_COMPILATION_CACHE_DIR": "/j"}, None),
     ({"NEURAL_TESTBED_CACHE_DIR": "0"}, None),
     ({"NEURAL_TESTBED_CACHE_DIR": "OFF"}, None),
     ({"JAX_COMPILATION_CACHE_DIR": "/j", "XDG_CACHE_HOME": "/x"}, "/j"),
     ({"XDG_CACHE_HOME": "/x"}, "/x/neural-testbed/xla")],
)
def test_the_cache_directory_follows_the_environment(environ, expected):
    assert compilation_cache.cache_directory(environ) == expected


def test_without_settings_the_cache_is_in_the_users_cache_directory():
    expected = os.path.join(os.path.expanduser("~"), ".cache", "neural-testbed", "xla")
    assert compilation_cache.cache_directory({}) == expected
    assert compilation_cache.enable({"NEURAL_TESTBED_CACHE_DIR": "off"}) is None


def test_an_unusable_cache_directory_means_no_cache(tmp_path):
    (tmp_path / "a_file").write_text("x")
    assert compilation_cache.enable({"NEURAL_TESTBED_CACHE_DIR": str(tmp_path / "a_file" / "c")
                                     }) is None


def _run(args, cwd, cache):
    env = dict(os.environ, PYTHONPATH=str(REPO), NEURAL_TESTBED_CACHE_DIR=str(cache))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the suite's own cache: not here
    env.pop("JAX_COMPILATION_CACHE_MAX_SIZE", None)  # the suite's: the command's own applies
    proc = subprocess.run([sys.executable, "-m", "neural_testbed.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _programs(cache):
    """Cached program -> when it was last read or written (JAX's "-atime" file beside it)."""
    return {p.name[:-len("-atime")]: p.read_bytes() for p in cache.iterdir()
            if p.name.endswith("-atime")}


def _executables(cache):
    """Kept executable (executable_cache.py) -> when it was last used."""
    return {p.name: p.stat().st_mtime_ns for p in (cache / "executables").iterdir()}


@pytest.mark.slow  # two runs of the command, the second with worker processes
def test_a_second_run_into_a_new_store_compiles_nothing(tmp_path):
    """The command writes its programs to the cache; the same sweep again, into a new store
    with two worker processes, compiles none (no new entry in JAX's cache) and loads every
    executable the first kept."""
    cache = tmp_path / "cache"
    run = ["run", "--agent", "mlp", "--sweep", "smoke", "--set", "num_steps=10", "--taus", "1",
           "--quiet"]
    _run([*run, "--db", "first.db"], tmp_path, cache)
    programs, first = _programs(cache), _executables(cache)
    assert len(first) >= 3  # building, training, evaluation at least
    out = _run([*run, "--db", "second.db", "--workers", "2"], tmp_path, cache)
    assert "4 rows computed, 0 reused" in out
    assert _programs(cache).keys() == programs.keys()
    second = _executables(cache)
    assert second.keys() == first.keys()
    assert all(second[name] != first[name] for name in first)  # each one loaded again
