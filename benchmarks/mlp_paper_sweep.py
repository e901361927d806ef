"""Wall time and peak memory of the mlp agent on a problem sweep.

Usage: python benchmarks/mlp_paper_sweep.py [--sweep paper] [--repeats 3]

Each repeat is a cold run as a user sees it (compilation included): the
runner builds fresh compiled programs on every call. Prints the median total,
the median per-problem train and eval seconds (compilation excluded), the
compilation seconds, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import resource
import statistics
import time

import jax

from neural_testbed import agents, leaderboard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="paper")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agent", default="mlp")
    args = parser.parse_args()
    spec = agents.get_agent(args.agent)
    problems = list(leaderboard.get_sweep(args.sweep).values())
    totals, train, evals, compiling = [], [], {}, []
    for _ in range(args.repeats):
        start = time.perf_counter()
        build = functools.partial(spec.make, spec.default)
        rows = leaderboard.run_agent(build, problems, args.agent, progress=False)
        totals.append(time.perf_counter() - start)
        assert all(r.status == "ok" for r in rows)
        train.append(statistics.median(r.train_seconds for r in rows if r.tau == 1))
        compiling.append(sum(r.compile_seconds for r in rows if r.tau == 1))
        for tau in sorted({r.tau for r in rows}):
            evals.setdefault(tau, []).append(
                statistics.median(r.eval_seconds for r in rows if r.tau == tau))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, jax {jax.__version__} "
          f"on {jax.devices()[0].platform}")
    print(f"{args.agent} on {args.sweep} ({len(problems)} problems), {args.repeats} cold runs")
    print(f"total wall time: median {statistics.median(totals):.1f} s "
          f"(runs: {', '.join(f'{t:.1f}' for t in totals)})")
    print(f"per problem: train {statistics.median(train):.3f} s", end="")
    for tau, values in evals.items():
        print(f", eval tau={tau} {statistics.median(values):.3f} s", end="")
    print(f"\ncompilation: median {statistics.median(compiling):.1f} s of the total")
    print(f"peak RSS: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
