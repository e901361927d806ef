"""Where work units run: in this process (one or several at once), in local worker
processes, or on Ray.

A work unit is one agent config on one batch of same-shape problems. Every
backend computes a unit with :func:`compute_unit`, so the same unit gives the
same numbers wherever it runs; the driver writes rows to the store as units
finish, so killing it loses at most the units in flight.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax

from neural_testbed import base, compilation_cache, memory
from neural_testbed.agents import plugins, registry
from neural_testbed.leaderboard import configs, runner

__all__ = ["BACKENDS", "WorkUnit", "check_ray_address", "check_units_at_once", "compute_unit",
           "default_units_at_once", "execute"]

BACKENDS = ("local", "ray")
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A batch of configs of one agent (one config, or several that differ only in fields
    it declares batchable) on one batch of problems of the same shape, or of one padding
    group (``train_rows``)."""

    agent: str
    config: Any
    problems: tuple[base.Problem, ...]
    estimator: str = "auto"
    agent_seed: int = 0
    pad_to: int = 0  # pad the batch to this many problems (0 = its own size)
    train_rows: int = 0  # pad training sets to this many rows, if the agent accepts it (0: no)
    more_configs: tuple[Any, ...] = ()  # configs run in the same programs (config_batches)

    @property
    def configs(self) -> tuple[Any, ...]:
        return (self.config, *self.more_configs)


# Compiled runners of this process, most recently used last, so that the units
# of one config and shape compile once per process.
_RUNNERS: collections.OrderedDict = collections.OrderedDict()
_MAX_RUNNERS = 8


_RUNNERS_LOCK = threading.Lock()  # units computed at once share the runners


def _batch_runner(unit: WorkUnit, build: base.AgentBuilder | None) -> runner.BatchRunner:
    """The runner of the unit's configs and (padded) shape, compiled once per process."""
    with _RUNNERS_LOCK:
        return _cached_runner(unit, build)


def _cached_runner(unit: WorkUnit, build: base.AgentBuilder | None) -> runner.BatchRunner:
    template = unit.problems[0]
    passed = id(build)
    spec = registry.get_agent(unit.agent) if build is None else None
    shapes = base.Shapes.of(template)
    agent = spec.make(unit.config, shapes) if build is None else build(shapes)
    if unit.train_rows and runner.accepts_padding(agent):
        template = dataclasses.replace(template, num_train=unit.train_rows)
    key = (unit.agent, tuple(configs.config_hash(unit.agent, c) for c in unit.configs),
           template.shape, unit.estimator, unit.agent_seed, passed)
    if key in _RUNNERS:
        _RUNNERS.move_to_end(key)
        return _RUNNERS[key][0]
    made = runner.BatchRunner(agent, unit.agent, unit.config, template, unit.estimator,
                              unit.agent_seed, more_configs=unit.more_configs,
                              make=spec.make if spec else None,
                              batchable=spec.batchable if spec else ())
    _RUNNERS[key] = made, build  # holds ``build``, so its id is not reused while cached
    if len(_RUNNERS) > _MAX_RUNNERS:
        _RUNNERS.popitem(last=False)
    return made


def failed_rows(unit: WorkUnit, error: str) -> list[base.ProblemResult]:
    """Failed rows for every (problem, tau) of a unit that could not run at all."""
    return [row for config in unit.configs
            for row in runner.failed_rows(unit.agent, config, unit.problems, unit.estimator,
                                          unit.agent_seed, error)]


def compute_unit(unit: WorkUnit,
                 build: base.AgentBuilder | None = None) -> list[base.ProblemResult]:
    """The rows of a work unit; failures become failed rows, never exceptions.

    A unit of several configs runs them in one vmapped program; if it fails, its
    rows are failed rows with the error, as for one config.

    Args:
      unit: the work.
      build: ``shapes -> agent`` of the agent to run; None builds it from the
        registry (workers, Ray tasks), so only registered agents run outside this
        process.
    """
    size = max(unit.pad_to, len(unit.problems))
    try:
        made = _batch_runner(unit, build)
    except Exception as error:  # building the agent or its runner failed: every row fails
        return failed_rows(unit, f"{type(error).__name__}: {error}")
    return runner.run_batch(made, list(unit.problems), size)


def _die_with_the_driver(driver: int) -> None:
    """Makes this worker end when the process that started it ends, however it ends
    (SIGKILL included, when no handler of the driver's can run).

    On Linux the kernel does it: ``PR_SET_PDEATHSIG`` sends SIGKILL to this process when
    its parent ends (strictly, the parent's thread that started it: the one that submits
    the units). That covers a death from now on; one before (while this worker was
    importing) shows as a changed parent pid, checked after. Elsewhere a daemon thread
    watches the parent pid. multiprocessing's resource tracker then ends by itself: it
    exits when the last process holding its pipe (driver and workers) is gone.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1  # from <linux/prctl.h>
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != driver:
            os._exit(1)
        return

    def watch():
        while os.getppid() == driver:
            time.sleep(1)  # polling: no portable way to wait for the parent
        os._exit(1)

    threading.Thread(target=watch, name="neural-testbed-watchdog", daemon=True).start()


def _init_local_worker(imports: Sequence[str], driver: int) -> None:
    """A local worker process ends with the driver, and starts as :func:`_init_worker`."""
    _die_with_the_driver(driver)
    _init_worker(imports)


def _init_worker(imports: Sequence[str]) -> None:
    """Spawned workers start empty: register plug-in and --import agents again.

    A worker process is ours, so it also gets the evaluator's allocator tuning,
    the persistent compilation cache and the full-float32 products the command uses.
    It ignores SIGINT: Ctrl-C reaches the whole process group, and the driver
    alone handles it (it stops the workers and reports once). The worker was
    started with SIGINT blocked (see :func:`_sigint_blocked`), so a Ctrl-C
    while it was importing is pending; ignoring SIGINT discards it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    memory.keep_freed_memory()
    compilation_cache.enable()
    runner.use_full_float32_products()  # as the command's own process
    plugins.load_entry_points()
    for module in imports:
        plugins.import_agent_module(module)


@contextlib.contextmanager
def _sigint_blocked():
    """Blocks SIGINT in this thread while it spawns worker processes.

    A spawned process inherits the signal mask, so a Ctrl-C while a worker
    is still importing JAX (seconds, before :func:`_init_worker` makes it
    ignore SIGINT) stays pending there instead of printing a traceback. This
    process loses nothing: a Ctrl-C meanwhile is handled by another thread or
    when the mask is restored.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # Starting multiprocessing's resource tracker unblocks SIGINT: start it first.
    with contextlib.suppress(Exception):
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Ends the pool's worker processes now (their units are lost, not half-written).

    The processes are ended and reaped here; the pool's own shutdown (which frees
    its queues' semaphores) is waited for a few seconds only: a Ctrl-C can land
    while this thread holds one of the pool's or a future's locks (inside
    ``as_completed``), and the pool's manager thread, which needs that lock to fail
    the cancelled futures, would then never finish (seen as a rare hang).
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
    shutdown = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True},
                                daemon=True)
    shutdown.start()
    shutdown.join(timeout=10)


def _local_workers(units, workers, imports) -> Iterator[tuple[WorkUnit, list]]:
    """Runs units in spawned processes (fork is unsafe once JAX has started threads).

    If a worker dies (killed, out of memory), the pool is rebuilt and the units
    that were running get another try; a unit whose worker dies three times
    gets failed rows. If the driver is interrupted (Ctrl-C) or the consumer
    stops early, the workers are stopped at once rather than left to finish.
    """
    remaining = list(units)
    attempts = collections.Counter()
    context = multiprocessing.get_context("spawn")
    while remaining:
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_init_local_worker,
            initargs=(tuple(imports), os.getpid()))
        finished = set()
        broken = False
        try:
            with _sigint_blocked():  # the workers are spawned by the first submits
                futures = {pool.submit(compute_unit, unit): i for i, unit in enumerate(remaining)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                try:
                    rows = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    broken = True
                    break
                finished.add(i)
                yield remaining[i], rows
        except BaseException:  # KeyboardInterrupt, or the generator closed early
            _stop_workers(pool)
            raise
        pool.shutdown(wait=not broken, cancel_futures=True)
        if broken:
            running = [i for f, i in futures.items() if i not in finished and f.running()]
            for i in running or [i for i in range(len(remaining)) if i not in finished]:
                attempts[remaining[i]] += 1
            for i, unit in enumerate(remaining):
                if i not in finished and attempts[unit] >= 3:
                    finished.add(i)
                    yield unit, failed_rows(unit, "the worker process died three times "
                                                  "running this unit (out of memory?)")
        remaining = [unit for i, unit in enumerate(remaining) if i not in finished]


def default_units_at_once() -> int:
    """How many units this process computes at once unless told: 2 on a CPU of 2 or more
    cores, else 1. XLA runs a unit's small programs on about one core (mlp's `paper`
    sweep kept 1.1 of 2 cores busy), so a second unit uses the other; a GPU already runs
    one unit's programs in parallel. Memory grows with the count."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    return min(2, cores) if jax.default_backend() == "cpu" else 1


def _in_threads(units, build, units_at_once) -> Iterator[tuple[WorkUnit, list]]:
    """Computes up to ``units_at_once`` units at the same time in this process (threads:
    XLA runs programs outside the interpreter lock). Each unit's numbers are its own,
    whatever finishes first. If the consumer stops (Ctrl-C, or the generator is closed),
    units not started are dropped; those running finish unseen."""
    pool = concurrent.futures.ThreadPoolExecutor(units_at_once,
                                                 thread_name_prefix="neural-testbed-unit")
    try:
        futures = {pool.submit(compute_unit, unit, build): unit for unit in units}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _ray_task(payload: bytes, imports: Sequence[str]) -> list[base.ProblemResult]:
    """The unit travels pickled, so that a user config class unpickles only after
    the worker has imported the user's module."""
    global _RAY_WORKER_READY
    if not _RAY_WORKER_READY:
        _init_worker(imports)
        _RAY_WORKER_READY = True
    return compute_unit(pickle.loads(payload))


_RAY_WORKER_READY = False


# Ray gives every process of a node its node address and binds its servers
# (GCS, raylet, object manager, workers, agents) to loopback only when that
# address is loopback. ray.init replaces a loopback _node_ip_address by the
# machine's network address unless cluster mode is off, which this variable
# does (it is read when Ray is imported, and inherited by every Ray process).
_RAY_LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def _ray_loopback_only():
    """Starts Ray processes in single-machine mode: every listener on loopback."""
    previous = os.environ.get(_RAY_LOCAL_ONLY)
    os.environ[_RAY_LOCAL_ONLY] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    cluster = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if constants is not None:  # Ray was imported before the variable was set
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_RAY_LOCAL_ONLY, None)
        else:
            os.environ[_RAY_LOCAL_ONLY] = previous
        if constants is not None:
            constants.ENABLE_RAY_CLUSTER = cluster


_CONNECT_SECONDS = 5


def check_ray_address(address: str) -> None:
    """Raises a one-line error unless ``address`` is HOST:PORT and something there accepts
    a TCP connection within a few seconds. Ray itself retries an unreachable address
    for minutes; this plain connect touches that address only."""
    host, port = _host_and_port(address)
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_SECONDS):
            pass
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (
            error.strerror or type(error).__name__)
        raise ValueError(f"--address {address}: no Ray cluster reachable there ({reason} "
                         f"within {_CONNECT_SECONDS} s); give the HOST:PORT of a running "
                         "cluster's head, or leave --address out to start a local one") from None


def _host_and_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--address {address!r}: need HOST:PORT of a running Ray cluster's "
                         "head, e.g. 10.0.0.5:6379")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: Ray leaves it as it is
        return False


_RAY_WATCHDOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_watchdog.py")


def _start_ray_watchdog() -> subprocess.Popen | None:
    """On Linux, starts the process that ends the local Ray cluster about to be started
    once this process has ended, however it ends (see ``ray_watchdog.py``: Ray leaves the
    raylet's agents and workers alive for up to a minute after a SIGKILL of the driver).

    Its stdin is a pipe whose write end only this process holds (Python's pipes are
    close-on-exec, so Ray's processes do not inherit it): EOF there is this process's end.
    It runs in a session of its own, so a signal to this process group spares it. None
    elsewhere (it reads /proc).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return subprocess.Popen([sys.executable, "-I", _RAY_WATCHDOG, str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:  # no interpreter to start: Ray's own clean-up only
        log.warning("no watchdog for the local Ray cluster (%s): if this process is killed, "
                    "Ray's agents may outlive it for a minute", error)
        return None


def _tell_ray_watchdog(watchdog: subprocess.Popen | None, session_dir: str) -> None:
    if watchdog is not None:
        with contextlib.suppress(OSError):  # it died: the run goes on without it
            watchdog.stdin.write(session_dir.encode() + b"\n")
            watchdog.stdin.flush()


def _end_ray_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Closes the pipe, so the watchdog ends what Ray left of the cluster, and reaps it."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=10)


def _ray(units, workers, address, imports) -> Iterator[tuple[WorkUnit, list]]:
    """Runs units as Ray tasks; a task whose worker dies is retried by Ray."""
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray needs Ray: pip install 'neural-testbed[ray]'") from None
    started_here = not ray.is_initialized()
    watchdog = None  # the process that ends the local cluster if this one ends first
    if started_here:
        if address:
            check_ray_address(address)
            host = _host_and_port(address)[0]
            # Ray replaces a loopback host by this machine's network address unless in
            # single-machine mode: the address goes to Ray as the user wrote it.
            try:
                with _ray_loopback_only() if _is_loopback(host) else contextlib.nullcontext():
                    ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError) as error:  # something else listens there
                raise ValueError(f"--address {address}: no Ray cluster there would connect "
                                 f"({str(error).splitlines()[0]}); nothing was run") from None
        else:  # a local cluster for this run, reachable only from this machine
            watchdog = _start_ray_watchdog()  # before ray.init: it starts the processes
            try:
                with _ray_loopback_only():
                    context = ray.init(num_cpus=workers, include_dashboard=False,
                                       log_to_driver=False, _node_ip_address="127.0.0.1")
                _tell_ray_watchdog(watchdog, context.address_info["session_dir"])
            except BaseException:
                _end_ray_watchdog(watchdog)
                raise
            node_ip = ray.util.get_node_ip_address()
            if not ipaddress.ip_address(node_ip).is_loopback:
                ray.shutdown()
                _end_ray_watchdog(watchdog)
                raise ValueError(f"the local Ray cluster took the address {node_ip}, not a "
                                 "loopback one, so it would be reachable from other machines; "
                                 "nothing was run (this Ray version is not supported: pip "
                                 "install 'neural-testbed[ray]')")
    task = ray.remote(max_retries=3)(_ray_task)
    pending = {task.remote(pickle.dumps(unit), tuple(imports)): unit for unit in units}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            unit = pending.pop(done[0])
            try:
                rows = ray.get(done[0])
            except Exception as error:  # the task failed even after Ray's retries
                rows = failed_rows(unit, f"Ray task failed: {type(error).__name__}: {error}")
            yield unit, rows
    finally:
        if started_here:
            ray.shutdown()
            _end_ray_watchdog(watchdog)  # after Ray's own shutdown, for what it left


def execute(
    units: Sequence[WorkUnit],
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    imports: Sequence[str] = (),
    build: base.AgentBuilder | None = None,
    units_at_once: int = 1,
) -> Iterator[tuple[WorkUnit, list[base.ProblemResult]]]:
    """Yields ``(unit, rows)`` as units finish, in any order.

    Args:
      units: the work.
      backend: ``"local"`` (this process, or ``workers`` spawned processes) or
        ``"ray"`` (tasks on the cluster at ``address``, or on a local cluster
        with ``workers`` CPUs started for the run).
      workers: local worker processes (1 = this process).
      address: a Ray cluster address.
      imports: modules that register user agents, imported in every worker.
      build: ``shapes -> agent``, an agent to run instead of the registered one
        (this process only: backend "local" with one worker).
      units_at_once: units this process computes at the same time (backend
        "local" with one worker; see :func:`default_units_at_once`).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if build is not None and (backend != "local" or workers != 1):
        raise ValueError("an agent object runs in this process only (backend 'local', 1 "
                         "worker); register it to run it on workers or Ray")
    check_units_at_once(units_at_once, backend, workers)
    if backend == "ray":
        return _ray(units, workers, address, imports)
    if workers == 1 and units_at_once > 1:
        return _in_threads(units, build, units_at_once)
    if workers == 1:
        return ((unit, compute_unit(unit, build)) for unit in units)
    return _local_workers(units, workers, imports)


def check_units_at_once(units_at_once: int, backend: str, workers: int) -> None:
    """Raises a one-line error for a bad count, or one that has no process to apply to."""
    if not isinstance(units_at_once, int) or isinstance(units_at_once, bool) or (
            units_at_once < 1):
        raise ValueError("units at once (--units-at-once) must be an integer >= 1, got "
                         f"{units_at_once!r}")
    if units_at_once > 1 and (backend != "local" or workers != 1):
        raise ValueError("--units-at-once applies to a run in this process; with --workers "
                         "or --backend ray each worker computes one unit at a time")
