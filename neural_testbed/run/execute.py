"""Where work units run: in this process (one, or several at once in threads), in local
worker processes, or on Ray (:mod:`ray_backend`).

Every backend computes a unit with :func:`programs.compute_unit` and a
:class:`programs.Programs` of its own process, so a unit gives the same numbers
wherever it runs; the driver gets ``(unit, rows)`` as units finish and writes them
at once, so killing it loses at most the units in flight.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import selectors
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from neural_testbed import base
from neural_testbed.run import programs as programs_lib
from neural_testbed.run import rows as rows_lib
from neural_testbed.run.options import RunOptions
from neural_testbed.run.plan import WorkUnit

__all__ = ["MAX_WORKER_DEATHS", "execute", "read_message", "write_message"]

MAX_WORKER_DEATHS = 3  # a unit whose worker dies this often gets failed rows


def execute(units: Sequence[WorkUnit], options: RunOptions,
            build: base.AgentBuilder | None = None,
            programs: programs_lib.Programs | None = None) -> Iterator[tuple[WorkUnit, list]]:
    """Yields ``(unit, rows)`` as units finish, in any order; closing the generator (or a
    Ctrl-C in the consumer) stops the work still running.

    ``build``: ``shapes -> agent`` of an agent to run instead of the registered one (this
    process only). ``programs``: the run's programs, some traced already (the memory
    check's), used where units run in this process; new ones by default.
    """
    if build is not None and (options.backend != "local" or options.workers != 1):
        raise ValueError("an agent object runs in this process only (backend 'local', 1 "
                         "worker); register it to run it on workers or Ray")
    if options.backend == "ray":
        from neural_testbed.run import ray_backend

        return ray_backend.execute(units, options)
    if options.workers > 1:
        return _in_workers(units, options)
    programs = programs_lib.Programs() if programs is None else programs
    if options.units_at_once > 1:
        return _in_threads(units, programs, build, options.units_at_once)
    return ((unit, programs_lib.compute_unit(unit, programs, build)) for unit in units)


def _in_threads(units, programs, build, units_at_once) -> Iterator[tuple[WorkUnit, list]]:
    """Up to ``units_at_once`` units at the same time (XLA runs programs outside the
    interpreter lock); units not started when the consumer stops are dropped."""
    pool = concurrent.futures.ThreadPoolExecutor(units_at_once,
                                                 thread_name_prefix="neural-testbed-unit")
    try:
        futures = {pool.submit(programs_lib.compute_unit, unit, programs, build): unit
                   for unit in units}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def write_message(stream: BinaryIO, value: Any) -> None:
    """One pickled value, length first, on a pipe between the driver and a worker."""
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_message(stream: BinaryIO) -> Any:
    """The value :func:`write_message` wrote; raises ``EOFError`` at the pipe's end."""
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _start_worker(options: RunOptions) -> subprocess.Popen:
    """A worker process (``python -m neural_testbed.run.worker``) in a process group of its
    own: a Ctrl-C at the terminal reaches the driver alone, which stops the workers."""
    return subprocess.Popen(
        [sys.executable, "-m", "neural_testbed.run.worker", str(os.getpid()),
         *options.imports], stdin=subprocess.PIPE, stdout=subprocess.PIPE, process_group=0)


def _stop(worker: subprocess.Popen) -> None:
    worker.kill()
    worker.wait()
    for pipe in (worker.stdin, worker.stdout):
        pipe.close()


def _in_workers(units, options: RunOptions) -> Iterator[tuple[WorkUnit, list]]:
    """Units on ``options.workers`` local processes, one unit each at a time. A worker
    that dies (killed, out of memory) is replaced and its unit tried again; a unit whose
    worker dies :data:`MAX_WORKER_DEATHS` times gets failed rows."""
    todo, deaths = list(reversed(units)), [0] * len(units)
    index = {id(unit): i for i, unit in enumerate(units)}
    busy: dict[subprocess.Popen, WorkUnit | None] = {}
    selector = selectors.DefaultSelector()

    def start():
        worker = _start_worker(options)
        busy[worker] = None
        selector.register(worker.stdout, selectors.EVENT_READ, worker)

    def give(worker):
        busy[worker] = todo.pop() if todo else None
        if busy[worker] is not None:
            write_message(worker.stdin, busy[worker])

    try:
        for _ in range(min(options.workers, len(units))):
            start()
        for worker in list(busy):
            give(worker)
        while any(unit is not None for unit in busy.values()):
            for key, _ in selector.select():
                worker, unit = key.data, busy[key.data]
                try:
                    rows = read_message(worker.stdout)
                except (EOFError, pickle.UnpicklingError):  # the worker died
                    selector.unregister(worker.stdout)
                    del busy[worker]
                    _stop(worker)
                    if unit is None:  # idle: nothing to try again
                        continue
                    deaths[index[id(unit)]] += 1
                    if deaths[index[id(unit)]] >= MAX_WORKER_DEATHS:
                        yield unit, rows_lib.failed_rows_of(
                            unit, f"the worker process died {MAX_WORKER_DEATHS} times "
                                  "running this unit (out of memory?)")
                    else:
                        todo.append(unit)
                    if todo:
                        start()
                        give(next(reversed(busy)))
                    continue
                give(worker)
                yield unit, rows
    finally:  # done, a Ctrl-C, or the consumer stopped: no worker outlives the run
        selector.close()
        for worker in busy:
            _stop(worker)
