"""Recomputes, on whatever device JAX sees, the problems whose published rows failed.

Not a test. The published table keeps failed rows (a NaN prediction is recorded and
the sweep goes on); oracle_gp's and gp's `regression` rows computed on an H200 failed
at tau = 100 on 13 and 21 problems that the 2-core CPU computes without fault. This
script runs each such agent's default config on exactly those problems, through the
runner the command uses, and prints per problem and tau whether the row is now ok:
on a GPU it shows whether full-float32 matrix products (the runner's
``MATMUL_PRECISION``) removed the failures.

Usage:
  PYTHONPATH=. python benchmarks/published_failures.py                 # every agent with one
  PYTHONPATH=. python benchmarks/published_failures.py --agents oracle_gp
"""

from __future__ import annotations

import argparse
import collections
import time

import jax

from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import baselines, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="*", help="default: every agent with a failed row")
    args = parser.parse_args()
    every = {pid: p for name in problems.SWEEPS for pid, p in problems.get_sweep(name).items()}
    failed = collections.defaultdict(set)
    for row in baselines.load().rows:
        if row["status"] != "ok" and (not args.agents or row["agent"] in args.agents):
            failed[row["agent"]].add(row["problem_id"])
    print(f"device: {jax.devices()[0].device_kind}; JAX {jax.__version__}")
    if not failed:
        print("no published row of these agents failed")
    for name, ids in sorted(failed.items()):
        spec = agents.get_agent(name)
        todo = [every[pid] for pid in sorted(ids, key=lambda pid: int(pid.split("/")[-1]))]
        start = time.perf_counter()
        rows = leaderboard.run_agent(spec.make(spec.default), todo, name, config=spec.default,
                                     progress=False)
        bad = [r for r in rows if r.status != "ok"]
        print(f"{name}: {len(todo)} problems whose published rows failed, recomputed in "
              f"{time.perf_counter() - start:.1f} s: {len(rows) - len(bad)} of {len(rows)} "
              "rows ok")
        for r in bad:
            print(f"  still failed: {r.problem_id} tau={r.tau}: {r.error}")


if __name__ == "__main__":
    main()
