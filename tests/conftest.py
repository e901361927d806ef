"""Test-session set-up: one persistent XLA compilation cache for every test process and run.

Compilation dominates this suite: most tests compile a few small programs and then run
them for milliseconds. Compiled programs are kept in pytest's cache directory
(``.pytest_cache/d/xla``), shared with the CLI subprocesses and workers that tests start,
and reused by the next run, so a repeated ``pytest -m "not slow"`` mostly loads programs
instead of compiling them. An entry is keyed by the program, the JAX and jaxlib versions
and the compiler flags, so it never changes a number.

``pytest --cache-clear`` starts cold; ``JAX_COMPILATION_CACHE_DIR`` puts the cache
elsewhere; with ``-p no:cacheprovider`` each session gets a fresh temporary one,
removed when it ends.

The tests also compile with XLA's backend optimisations off
(``JAX_DISABLE_MOST_OPTIMIZATIONS=1``, inherited by the commands they start): the
programs are the same, LLVM just does not optimise them, which about halves compile
times and so the cold suite's. Results agree with optimised code to float32 rounding
(the order of a few float operations may differ), so a test that compares two
programs bit for bit compares programs compiled alike. ``JAX_DISABLE_MOST_OPTIMIZATIONS=0``
tests optimised code.

And without XLA's CPU fusion emitters (``--xla_cpu_use_fusion_emitters=false`` in
``XLA_FLAGS``, inherited likewise): fused loops are emitted by the older elemental
emitter, which compiles about a third faster, with the same results to float32
rounding. And with each program's code generated in one piece
(``--xla_cpu_parallel_codegen_split_count=1``): XLA otherwise splits it for parallel
compilation, which the test processes, each compiling its own programs, gain nothing
from: one piece compiles faster in them. And with XLA's CPU kernels on one thread per
process (``--xla_cpu_multi_thread_eigen=false``): the suite runs one process per core plus
one, so each process's pool of a thread per core only oversubscribed the cores (the
changelog's history has the suite's time with and without it; the programs and their
numbers are the same). And with OpenBLAS, which runs the programs' LAPACK calls, on one
thread, as the command runs it (``benchmarks/openblas_threads.py``). A flag is set only if this JAX's XLA accepts it (XLA ends a process on an unknown flag,
so a short subprocess checks first); flags that ``XLA_FLAGS`` already names are left
as they are.
"""

import collections.abc
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache every program
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    # No size limit: with one, JAX scans the whole cache directory on every write, which
    # made a warm `pytest -m "not slow"` three times slower once the cache held tens of
    # thousands of files. `pytest --cache-clear` empties it.
    "JAX_COMPILATION_CACHE_MAX_SIZE": "-1",
    "JAX_DISABLE_MOST_OPTIMIZATIONS": "1",  # compile fast, run slower (module docstring)
}


_SUITE_FLAGS = ("--xla_cpu_use_fusion_emitters=false",
                "--xla_cpu_parallel_codegen_split_count=1",
                "--xla_cpu_multi_thread_eigen=false")


def _accepted(flags: str) -> bool:
    """Whether this JAX's XLA starts with these XLA_FLAGS (it ends the process otherwise)."""
    check = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1) + 1"],
                           env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu"),
                           capture_output=True, timeout=120)
    return check.returncode == 0


def _add_suite_flags():
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = [f for f in _SUITE_FLAGS if f.split("=")[0] not in flags]  # not set already
    if not wanted:  # by the user, or inherited by a worker
        return
    if _accepted(" ".join([flags, *wanted])):
        os.environ["XLA_FLAGS"] = " ".join([flags, *wanted]).strip()
        return
    for flag in wanted:  # one of them is unknown to this XLA: keep those it accepts
        if _accepted(f"{flags} {flag}"):
            flags = f"{flags} {flag}".strip()
    os.environ["XLA_FLAGS"] = flags


def pytest_configure(config):
    _add_suite_flags()  # before any test starts JAX's backend, which reads XLA_FLAGS
    cache = getattr(config, "cache", None)
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # else the user's, or inherited
        if cache is not None:
            os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache.mkdir("xla"))
        else:  # removed when the session ends (pytest_unconfigure)
            config._temporary_xla_cache = tempfile.mkdtemp(prefix="neural_testbed_test_xla_cache_")
            os.environ["JAX_COMPILATION_CACHE_DIR"] = config._temporary_xla_cache
    # The command's own cache setting (compilation_cache.py) names the same directory, so
    # a command a test runs never writes into the user's cache.
    os.environ["NEURAL_TESTBED_CACHE_DIR"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    for name, value in _SETTINGS.items():
        os.environ.setdefault(name, value)
    # As the command sets it (cli._set_up): before scipy's OpenBLAS is loaded, at the first
    # LAPACK call of a program.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if "jax" in sys.modules:  # imported before this hook ran: set its options directly
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        for name in _SETTINGS:
            current = jax.config.values[name.lower()]
            value = os.environ[name]
            jax.config.update(name.lower(), value.lower() in ("1", "true") if isinstance(
                current, bool) else type(current)(value))



def pytest_unconfigure(config):
    temporary = getattr(config, "_temporary_xla_cache", None)
    if temporary:
        shutil.rmtree(temporary, ignore_errors=True)


def _usable_cores() -> int:
    """The cores this process may use: those it is pinned to, and no more than a cgroup
    CPU quota allows (a container limited to 2 CPUs on a larger host still counts the
    host's cores in ``os.cpu_count()``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        try:
            fields = open(path).read().split()
            if path.endswith("cpu.max"):
                quota, period = fields[0], fields[1]
            else:
                quota = fields[0]
                period = open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read().split()[0]
        except (OSError, IndexError):
            continue
        if quota not in ("max", "-1") and int(period) > 0:
            cores = min(cores, max(1, -(-int(quota) // int(period))))
        break
    return cores


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one test process more than usable cores (capped by ``--maxprocesses``):
    a process spends part of its time waiting on the commands, workers and Ray clusters
    its tests start, and in Python, so a third process on 2 cores keeps both busy (the
    whole suite about 8% faster with 3 than with 2). Those tests are marked slow, so
    ``-m "not slow"`` gets one process per core (there 2 beat 3)."""
    if "not slow" in (config.option.markexpr or ""):
        return _usable_cores()
    return _usable_cores() + 1


@pytest.fixture(autouse=True)
def terminal_width(monkeypatch):
    """Every test's commands see a 100-column terminal, the width where there is none
    (pytest-xdist's workers set ``COLUMNS=80``): tables and wrapped lines come out the
    same in any test process."""
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture
def optimised_compiles():
    """Compile with XLA's optimisations on for one test: for the few tests whose time is in
    running a long program (meta-training thousands of steps), not in compiling many."""
    import jax

    before = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def smoke_rows():
    """A function ``(agent, config, level)`` -> stored rows of that config on every smoke
    problem, KL ``level * tau`` scaled up by a tenth per problem."""
    from neural_testbed import leaderboard
    from neural_testbed.leaderboard import store as store_lib
    from neural_testbed.run import rows as run_rows

    def rows(agent, config, level):
        return [run_rows.result_row(
            agent, store_lib.config_hash(agent, config), store_lib.config_json(config),
            problem, tau, "auto", 0, estimate=level * tau * (1 + 0.1 * i), estimate_stderr=0.01,
            num_clipped=0, accuracy=0.9, ece=0.05, train_seconds=1.0, compile_seconds=0.1,
            eval_seconds=0.5)
            for i, problem in enumerate(leaderboard.get_sweep("smoke").values())
            for tau in problem.taus]
    return rows


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if a run starts computing."""
    from neural_testbed import run as sweep_lib

    def run_sweep(*args, **kwargs):
        raise AssertionError("work started")
    monkeypatch.setattr(sweep_lib, "run_sweep", run_sweep)


@pytest.fixture
def one_error_line(capsys):
    """A function ``(*fragments)``: asserts the command printed exactly one line on
    stderr, an error holding every fragment; returns it. A progress bar erased before
    it (tqdm's ``\r`` redraws) is left out, as a terminal shows it."""
    def check(*fragments):
        printed = capsys.readouterr().err
        err = printed.rsplit("\r", 1)[-1]
        assert printed.count("\n") == 1 and err.startswith("neural-testbed: error: "), printed
        for fragment in fragments:
            assert fragment in err, err
        return err
    return check


@pytest.fixture
def environment_agent():
    """A function ``problem`` -> an agent that is the problem's environment: one member
    whose prediction is the environment's own (its logits; for GP regression ``f`` at
    the pool input it is asked about). Its d_KL is 0 at every tau, the known answer a
    testbed's evaluation must give."""
    import jax.numpy as jnp

    from neural_testbed import base, generative

    def make(problem):
        env = problem.instance().env
        if problem.target == "regression":
            pool_x, pool_f = env.pool_x, env.pool_f

            def train(key, data, prior):
                return jnp.zeros(())

            def apply(state, x, index):
                on_pool = jnp.all(x[:, None, :] == pool_x[None], -1)
                return ((on_pool * pool_f).sum(-1) / on_pool.sum(-1))[:, None]
        else:
            params = env.params

            def train(key, data, prior):
                return prior.temperature

            def apply(temperature, x, index):
                return generative.environment_logits(
                    generative.Environment(params, temperature), x)
        return base.Agent(train, base.ENN(apply, lambda key: jnp.zeros((), jnp.int32), 1))
    return make


SHORT_TRAINING_STEPS = 10  # the most steps an agent trains for under `short_training`


def _shortened(config):
    """``config`` with every ``num_steps`` or ``*_steps`` count at most
    ``SHORT_TRAINING_STEPS`` (an SG-MCMC chain's burn-in and snapshots shortened with it)."""
    import dataclasses

    if "burn_in" in {f.name for f in dataclasses.fields(config)}:
        return dataclasses.replace(config, num_steps=SHORT_TRAINING_STEPS,
                                   burn_in=SHORT_TRAINING_STEPS // 2, snapshot_every=1)
    return dataclasses.replace(config, **{
        f.name: min(getattr(config, f.name), SHORT_TRAINING_STEPS)
        for f in dataclasses.fields(config) if f.name == "num_steps" or f.name.endswith("_steps")})


class _ShortenedAgents(collections.abc.Mapping):
    """The registry's agents, each training at most ``SHORT_TRAINING_STEPS`` steps: looked
    up at each access, so an agent registered later (``--import``) is shortened too."""

    def __init__(self, agents):
        self._agents = agents

    def __getitem__(self, name):
        import dataclasses

        spec = self._agents[name]
        make = spec.make
        return dataclasses.replace(spec, make=lambda config, shapes: make(_shortened(config),
                                                                          shapes))

    def __iter__(self):
        return iter(self._agents)

    def __len__(self):
        return len(self._agents)


@pytest.fixture
def short_training():
    """A function ``(monkeypatch)``: from then on every agent, registered now or later,
    trains at most ``SHORT_TRAINING_STEPS`` steps, for tests of the documented commands,
    whose numbers no one reads (a default ensemble+ trains 100 members for 1,000 steps,
    the cnp meta-trains for 10,000). The programs are the users', with shorter loops; rows
    keep their config's hash, so what a command reads back is found as the docs say."""
    from neural_testbed.agents import registry

    def shorten(monkeypatch):
        monkeypatch.setattr(registry, "AGENTS", _ShortenedAgents(registry.AGENTS))
    return shorten


@pytest.fixture
def own_imports(tmp_path):
    """Modules a test's commands import from its directory (``--import my_agent.py``) and
    the agents registered during it are gone when it ends, so a later test in the same
    process imports its own ``my_agent`` (commands and examples run in this process)."""
    from neural_testbed.agents import registry

    before = set(registry.AGENTS)
    yield
    for name in set(registry.AGENTS) - before:
        registry.unregister(name)
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(f"{tmp_path}{os.sep}"):
            del sys.modules[name]
