"""How a run is carried out: one frozen, checked object instead of a dozen parameters.

Nothing here changes a row's numbers except ``agent_seed`` and ``estimator`` (key
columns of every row): batch sizes, shards and backends only decide where and in
which programs the same rows are computed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os

from neural_testbed.likelihood import kl

__all__ = ["BACKENDS", "MAX_AGENT_SEED", "MAX_WORKERS_PER_CORE", "RunOptions",
           "default_units_at_once", "parse_shard", "usable_cores"]

BACKENDS = ("local", "ray")
MAX_AGENT_SEED = 2**32 - 1  # the seed is folded into keys as a uint32
# Local worker processes per usable core: a worker also waits (compiling, in Python), so
# two per core can still help; beyond that each adds a JAX runtime's memory and no speed.
MAX_WORKERS_PER_CORE = 2


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Settings of one run; :meth:`check` names a bad one (and its flag) before any work.

    Attributes:
      agent_seed: folded into every problem's agent key (``--seed``).
      estimator: the likelihood estimator setting: ``"auto"``, ``"monte_carlo"`` or
        ``"partition"``.
      problems_per_batch: problems trained together in one unit; None = all those of
        one shape. More than one T's problems train several T in one program where the
        agent accepts padded training sets.
      configs_per_batch: configs of one batchable group trained and evaluated in one
        vmapped program (one compilation per group, more memory).
      recompute: recompute rows the store holds already, replacing them.
      retry_failed: recompute the rows stored as failed (and the missing ones).
      shard: ``(i, n)``: only the i-th of n deterministic shares of the units.
      backend: ``"local"`` (this process or worker processes) or ``"ray"``.
      workers: local worker processes (1 = this process), or a local Ray cluster's CPUs.
      address: an existing Ray cluster's HOST:PORT.
      imports: modules that register user agents, imported by every worker.
      units_at_once: units this process computes at once, in threads (one process,
        backend "local"): XLA runs a unit's small programs on about one core.
      progress: a progress bar with an ETA on stderr.
    """

    agent_seed: int = 0
    estimator: str = "auto"
    problems_per_batch: int | None = None
    configs_per_batch: int = 8
    recompute: bool = False
    retry_failed: bool = False
    shard: tuple[int, int] = (1, 1)
    backend: str = "local"
    workers: int = 1
    address: str | None = None
    imports: tuple[str, ...] = ()
    units_at_once: int = 1
    progress: bool = True

    def check(self, reach_address: bool = True) -> RunOptions:
        """Raises a one-line ``ValueError`` naming a bad setting and what is allowed (with
        ``reach_address``, an ``address`` must also accept a connection); returns self."""
        if not _is_int(self.agent_seed) or not 0 <= self.agent_seed <= MAX_AGENT_SEED:
            raise ValueError(f"agent seed (--seed) must be an integer from 0 to "
                             f"{MAX_AGENT_SEED}, got {self.agent_seed!r}")
        for name, flag, value in (("problems per batch", "--problems-per-batch",
                                   1 if self.problems_per_batch is None
                                   else self.problems_per_batch),
                                  ("configs per batch", "--configs-per-batch",
                                   self.configs_per_batch),
                                  ("workers", "--workers", self.workers),
                                  ("units at once", "--units-at-once", self.units_at_once)):
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} ({flag}) must be an integer >= 1, got {value!r}")
        i, n = self.shard
        if not (_is_int(i) and _is_int(n) and 1 <= i <= n):
            raise ValueError(f"shard (--shard) must be i/n with 1 <= i <= n, got {i}/{n}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; allowed: {', '.join(BACKENDS)}")
        cores = usable_cores()
        if self.backend == "local" and self.workers > MAX_WORKERS_PER_CORE * cores:
            raise ValueError(f"workers (--workers) must be at most "
                             f"{MAX_WORKERS_PER_CORE * cores} ({MAX_WORKERS_PER_CORE} per core; "
                             f"this process may use {cores}): each worker runs its own JAX "
                             "runtime and compiles its own programs, so more only add memory "
                             f"and switching; got {self.workers}")
        if self.units_at_once > 1 and (self.backend != "local" or self.workers != 1):
            raise ValueError("--units-at-once applies to a run in this process; with --workers "
                             "or --backend ray each worker computes one unit at a time")
        if self.backend == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError("--backend ray needs Ray: pip install 'neural-testbed[ray]'")
        if self.address is not None:
            if self.backend != "ray":
                raise ValueError(f"--address {self.address} names a Ray cluster: it needs "
                                 f"--backend ray (the backend is {self.backend})")
            if reach_address:
                from neural_testbed.run import ray_cluster

                ray_cluster.check_address(self.address)
        kl.choose_estimator(1, self.estimator)
        return self


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``1 <= i <= n``, or a clear error."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: need 1 <= i <= n")
    return i, n


def usable_cores() -> int:
    """The cores this process may use: those it is pinned to, and no more than a cgroup v2
    CPU quota allows (a container limited to 2 CPUs still sees every core of its host)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else max(1, min(cores, -(-int(quota) // int(period))))


def default_units_at_once(options: RunOptions) -> int:
    """Units at once the command uses unless told: 2 on a CPU of 2 or more cores in one
    process (what pays most on the 2-core CPU: ``benchmarks/mechanisms.py`` against one
    unit and against two worker processes), else 1; a GPU already runs one unit's
    programs in parallel."""
    import jax

    alone = options.backend == "local" and options.workers == 1
    return min(2, usable_cores()) if alone and jax.default_backend() == "cpu" else 1
