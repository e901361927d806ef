"""Work units as tasks of Ray actors, on a cluster or on a local one started for the run.

Each actor is a worker process with its own :class:`programs.Programs`, so the units
of one config and shape compile once per actor; Ray restarts an actor that dies and
retries its unit. Which cluster, and its safety, is :mod:`ray_cluster`'s.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

from neural_testbed.run import programs as programs_lib
from neural_testbed.run import ray_cluster
from neural_testbed.run import rows as rows_lib
from neural_testbed.run.options import RunOptions
from neural_testbed.run.plan import WorkUnit

__all__ = ["execute"]


class _Worker:
    """A Ray actor: starts as a local worker process does, then computes units."""

    def __init__(self, imports: Sequence[str]):
        from neural_testbed import compilation_cache
        from neural_testbed.agents import plugins

        compilation_cache.enable()
        programs_lib.use_full_float32_products()
        plugins.load_entry_points()
        for module in imports:
            plugins.import_agent_module(module)
        self._programs = programs_lib.Programs()

    def compute(self, payload: bytes) -> list:
        """The unit travels pickled, so that a user config class unpickles only after
        the actor has imported the user's module."""
        return programs_lib.compute_unit(pickle.loads(payload), self._programs)


def execute(units: Sequence[WorkUnit], options: RunOptions) -> Iterator[tuple[WorkUnit, list]]:
    """Units on ``options.workers`` actors of one CPU each, one unit per actor at a time."""
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray needs Ray: pip install 'neural-testbed[ray]'") from None
    started_here = not ray.is_initialized()
    watchdog = ray_cluster.connect(ray, options.address, options.workers) if started_here else None
    try:
        actor = ray.remote(num_cpus=1, max_restarts=3, max_task_retries=3)(_Worker)
        todo, pending = list(reversed(units)), {}

        def give(worker):  # one unit per actor at a time: a slow unit holds no queue
            if todo:
                unit = todo.pop()
                pending[worker.compute.remote(pickle.dumps(unit))] = worker, unit

        for _ in range(min(options.workers, len(units))):
            give(actor.remote(tuple(options.imports)))
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            worker, unit = pending.pop(done[0])
            try:
                rows = ray.get(done[0])
            except Exception as error:  # the task failed even after Ray's retries
                rows = rows_lib.failed_rows_of(
                    unit, f"Ray task failed: {type(error).__name__}: {error}")
            give(worker)
            yield unit, rows
    finally:
        if started_here:
            ray_cluster.disconnect(ray, watchdog)
