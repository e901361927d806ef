"""What each run-path mechanism buys on this machine: the command with and without it.

Not a test. Issue 45 asks every mechanism of the run path to earn its keep in a
benchmark: this runs `neural-testbed run --agent A --sweep S` (via cold_and_warm.py's
runner: a subprocess, a new store each time, one cold run into an empty compilation
cache and then warm runs with the cache it filled) for each variant:

- ``default``: the command as users run it;
- ``one-unit``: ``--units-at-once 1`` (no second unit computed beside the first in
  threads of the process);
- ``two-workers``: ``--units-at-once 1 --workers 2`` (two local worker processes
  instead of two units in threads of one process);
- ``no-cache``: ``NEURAL_TESTBED_CACHE_DIR=off`` (no persistent compilation cache: every
  run is cold);
- ``llvm-o1``: ``XLA_FLAGS=--xla_backend_optimization_level=1`` (a candidate, not
  adopted: LLVM's cheaper optimisation level compiles faster but the programs it makes run
  slower, and long sweeps spend their time running; level 0 also changes the numbers).

Mechanisms measured here and removed since, their records kept in the results file:
``system-malloc`` (``NEURAL_TESTBED_SYSTEM_MALLOC=1``, glibc's own mmap and trim
thresholds instead of the command's raised ones: no measurable difference for dropout
or bbb on ``smoke``, 2026-12-02, so the tuning went) and ``compile-serial`` (the
compile-ahead thread pool).

Each variant's cold and median warm wall seconds (interpreter start included) and the
command's own compiling figure are appended, with the machine, date, versions and
command, to ``benchmarks/results/mechanisms.jsonl``, and printed.

Usage:
  PYTHONPATH=. python benchmarks/mechanisms.py                        # mlp on smoke and paper
  PYTHONPATH=. python benchmarks/mechanisms.py --sweeps quick --variants default one-unit
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import cold_and_warm  # noqa: E402  (the runner of a timed command)

RESULTS = pathlib.Path(__file__).parent / "results" / "mechanisms.jsonl"
VARIANTS = ("default", "one-unit", "two-workers", "no-cache", "llvm-o1")
_XLA_FLAGS = {"llvm-o1": "--xla_backend_optimization_level=1"}


def _versions() -> dict[str, str]:
    import jax
    import jaxlib

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=pathlib.Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "commit": commit,
            "python": platform.python_version(), "numpy": metadata.version("numpy"),
            # JAX's extra dtypes: 0.7.0 takes about half a second to import (startup.py)
            "ml_dtypes": metadata.version("ml_dtypes")}


def _machine() -> dict[str, object]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"platform": platform.platform(), "processor": platform.machine(),
            "usable_cores": cores}


def measure(agent: str, sweep: str, variant: str, repeats: int) -> dict[str, object]:
    """Cold and warm runs of one variant; its record."""
    more = {"one-unit": ["--units-at-once", "1"],
            "two-workers": ["--units-at-once", "1", "--workers", "2"]}.get(variant, [])
    load = os.getloadavg()[0]
    if variant in _XLA_FLAGS:  # this script's own environment, inherited by the command
        os.environ["XLA_FLAGS"] = _XLA_FLAGS[variant]
    else:
        os.environ.pop("XLA_FLAGS", None)
    with tempfile.TemporaryDirectory() as scratch:
        cache = "off" if variant == "no-cache" else os.path.join(scratch, "cache")
        runs = []
        for i in range(1 + repeats):
            wall, compiling, aggregate = cold_and_warm._run(
                agent, sweep, cache, os.path.join(scratch, f"r{i}.db"), more, None)
            runs.append({"wall_s": round(wall, 2), "compiling_s": round(compiling, 2)})
    warm = [r["wall_s"] for r in runs[1:]]
    return {
        "benchmark": "mechanisms", "variant": variant, "agent": agent, "sweep": sweep,
        "cold_wall_s": runs[0]["wall_s"], "cold_compiling_s": runs[0]["compiling_s"],
        "warm_median_wall_s": statistics.median(warm) if warm else None, "runs": runs,
        "aggregate": aggregate, "load_average_before": round(load, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "command": (f"XLA_FLAGS={_XLA_FLAGS[variant]} " if variant in _XLA_FLAGS else "")
        + f"neural-testbed run --agent {agent} --sweep {sweep} {' '.join(more)}".strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(), "versions": _versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--sweeps", nargs="+", default=["smoke", "paper"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=2, help="warm runs after the cold one")
    args = parser.parse_args()
    RESULTS.parent.mkdir(exist_ok=True)
    for sweep in args.sweeps:
        for variant in args.variants:
            record = measure(args.agent, sweep, variant, args.repeats)
            with open(RESULTS, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
            warm = record["warm_median_wall_s"]
            print(f"{sweep:>6} {variant:>15}: cold {record['cold_wall_s']:.1f} s "
                  f"({record['cold_compiling_s']:.1f} s compiling), warm median "
                  f"{'n/a' if warm is None else f'{warm:.1f} s'}; load "
                  f"{record['load_average_before']} -> {record['load_average_after']}",
                  flush=True)


if __name__ == "__main__":
    main()
