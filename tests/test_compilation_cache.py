"""The persistent compilation cache: where it goes, how it is turned off, and that a second
run of the same sweep into a new store, with worker processes, compiles nothing."""

import logging
import os
import pathlib
import pickle
import shutil
import stat
import subprocess
import sys
import zlib

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


RUN = ["run", "--agent", "mlp", "--sweep", "smoke", "--set", "num_steps=10", "--taus", "1",
       "--quiet"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A function giving the cache as one run of :data:`RUN` filled it from empty, afresh
    for each test. Always at the same path: JAX keys a program by the cache's path too
    (it points XLA's own caches into it), so a copy elsewhere would be a cold cache."""
    path = tmp_path_factory.mktemp("first_run")
    cache, saved = path / "cache", path / "saved"
    _run([*RUN, "--db", "first.db"], path, cache)
    cache.rename(saved)

    def fresh():
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(saved, cache)
        return cache
    return fresh


def _programs(cache):
    """Cached program -> when it was last read or written (JAX's "-atime" file beside it)."""
    return {p.name[:-len("-atime")]: p.read_bytes() for p in cache.iterdir()
            if p.name.endswith("-atime")}


@pytest.mark.slow  # two runs of the command, the second with worker processes
def test_a_second_run_into_a_new_store_compiles_nothing(tmp_path, first_run):
    """The command writes its programs to the cache; the same sweep again, into a new store
    with two worker processes, compiles none (no new entry in JAX's cache)."""
    cache = first_run()
    programs = _programs(cache)
    assert len(programs) >= 3  # building, training, evaluation at least
    out = _run([*RUN, "--db", "second.db", "--workers", "2"], tmp_path, cache)
    assert "4 rows computed, 0 reused" in out
    assert _programs(cache).keys() == programs.keys()


def test_a_cache_directory_made_here_is_private(tmp_path, monkeypatch):
    monkeypatch.setattr(compilation_cache.jax.config, "update", lambda *_: None)  # JAX's own
    made = tmp_path / "new" / "xla"
    assert compilation_cache.enable({"NEURAL_TESTBED_CACHE_DIR": str(made)}) == str(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_cache_directory_others_can_write_is_not_used(tmp_path, monkeypatch, caplog, mode):
    """Whoever can write the cache can plant a program the next run executes."""
    settings = {}
    monkeypatch.setattr(compilation_cache.jax.config, "update",
                        lambda name, value: settings.__setitem__(name, value))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with caplog.at_level(logging.WARNING, logger=compilation_cache.__name__):
        assert compilation_cache.enable({"JAX_COMPILATION_CACHE_DIR": str(shared)}) is None
    assert settings == {"jax_compilation_cache_dir": None}  # JAX's variable named it
    [message] = caplog.messages
    assert message == (f"no compilation cache: {shared} is writable by group or others (mode "
                       f"{mode:o}); chmod go-w it or use another folder "
                       "(NEURAL_TESTBED_CACHE_DIR=DIR)")


def test_a_cache_directory_of_another_user_is_not_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(compilation_cache.jax.config, "update", lambda *_: None)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with caplog.at_level(logging.WARNING, logger=compilation_cache.__name__):
        assert compilation_cache.enable({"NEURAL_TESTBED_CACHE_DIR": str(tmp_path)}) is None
    assert caplog.messages == [f"no compilation cache: {tmp_path} belongs to another user "
                               f"(uid {os.stat(tmp_path).st_uid}); use a folder of your own "
                               "(NEURAL_TESTBED_CACHE_DIR=DIR)"]


class _Payload:
    """Unpickled, it runs ``touch MARKER``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow  # two runs of the command
def test_a_crafted_file_in_the_cache_is_never_unpickled(tmp_path, first_run):
    """Every file a run left in the cache folder is replaced by a pickle that would create a
    marker file when loaded (its ``.executable`` files, which the removed executable cache
    unpickled, compressed as it read them); the next run of the same sweep computes its
    rows and the marker never appears."""
    cache = first_run()
    marker = tmp_path / "unpickled"
    blob = pickle.dumps(_Payload(marker))
    entries = [p for p in cache.rglob("*") if p.is_file() and not p.name.endswith("-atime")]
    assert entries  # not vacuous: the first run wrote programs
    for entry in entries:
        entry.write_bytes(zlib.compress(blob) if entry.suffix == ".executable" else blob)
    out = _run([*RUN, "--db", "second.db"], tmp_path, cache)
    assert "4 rows computed, 0 reused" in out
    assert not marker.exists()
