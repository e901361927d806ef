"""Recomputes, on whatever device JAX sees, the problems whose published rows failed.

Not a test. The published table keeps failed rows (a NaN prediction is recorded and
the sweep goes on); oracle_gp's and gp's `regression` rows computed on an H200 failed
at tau = 100 on 13 and 21 problems that the 2-core CPU computes without fault. This
script runs each such agent's default config on exactly those problems, through the
runner the command uses, and prints per problem and tau whether the row is now ok.
On an H200 on 2026-11-28 full-float32 matrix products (the runner's ``MATMUL_PRECISION``)
had not removed the failures (15 of oracle_gp's 26 rows ok, 27 of gp's 42): the GP
agents' sampler did (``benchmarks/gp_sampler_nans.py``); this shows it on a GPU.

Once those rows are recomputed on the CPU the table has no failed row left; ``--problems``
names the problems instead (``h200``: those that failed on the H200, ``H200_FAILURES``).

Usage:
  PYTHONPATH=. python benchmarks/published_failures.py                 # every agent with one
  PYTHONPATH=. python benchmarks/published_failures.py --agents oracle_gp
  PYTHONPATH=. python benchmarks/published_failures.py --agents oracle_gp gp --problems h200
"""

from __future__ import annotations

import argparse
import collections
import functools
import time

import jax

from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import baselines, problems

# The `regression` problems whose tau = 100 rows failed on an H200 (TensorFloat-32 then).
H200_FAILURES = {
    agent: tuple(f"regression/{i}" for i in ids) for agent, ids in (
        ("oracle_gp", (1, 3, 4, 8, 9, 11, 29, 31, 33, 39, 49, 50, 58)),
        ("gp", (2, 4, 6, 7, 8, 11, 13, 15, 17, 30, 31, 34, 36, 38, 40, 41, 44, 46, 47, 48, 49)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="*", help="default: every agent with a failed row")
    parser.add_argument("--problems", help="comma-separated problem ids for each of --agents, "
                        "or 'h200' (each agent's H200_FAILURES), instead of the failed ones")
    args = parser.parse_args()
    every = {pid: p for name in problems.SWEEPS for pid, p in problems.get_sweep(name).items()}
    failed = collections.defaultdict(set)
    if args.problems:
        if not args.agents:
            parser.error("--problems needs --agents")
        for name in args.agents:
            ids = (H200_FAILURES.get(name, ()) if args.problems == "h200"
                   else args.problems.split(","))
            unknown = sorted(set(ids) - set(every))
            if unknown:
                parser.error(f"unknown problem ids: {', '.join(unknown)}")
            failed[name] = set(ids)
    for row in () if args.problems else baselines.load().rows:
        if row.status != "ok" and (not args.agents or row.agent in args.agents):
            failed[row.agent].add(row.problem_id)
    print(f"device: {jax.devices()[0].device_kind}; JAX {jax.__version__}")
    if not failed:
        print("no published row of these agents failed")
    for name, ids in failed.items():  # --agents' order: the oracle first
        if not ids:
            continue
        spec = agents.get_agent(name)
        todo = [every[pid] for pid in sorted(ids, key=lambda pid: (len(pid), pid))]
        start = time.perf_counter()
        build = functools.partial(spec.make, spec.default)
        rows = leaderboard.run_agent(build, todo, name, config=spec.default,
                                     progress=False)
        bad = [r for r in rows if r.status != "ok"]
        print(f"{name}: {len(todo)} problems, recomputed in "
              f"{time.perf_counter() - start:.1f} s: {len(rows) - len(bad)} of {len(rows)} "
              "rows ok")
        for r in bad:
            print(f"  still failed: {r.problem_id} tau={r.tau}: {r.error}")


if __name__ == "__main__":
    main()
