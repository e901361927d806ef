"""Time and peak memory of an agent on the real-data sweep (paper section 5).

Not a test. Runs one agent's default config over every problem of a real-data
sweep through ``leaderboard.run_agent`` (what ``neural-testbed run`` does, in
this process) and prints the wall time, how much of it was compilation (one
set of programs per (dataset, T) shape), the seconds per problem, the process's
peak resident memory, and the NLL aggregates per dataset as a sanity check.

Usage:
  PYTHONPATH=. python benchmarks/real_sweep.py                      # mlp on `real` (170 problems)
  PYTHONPATH=. python benchmarks/real_sweep.py --sweep real-quick --agent ensemble
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import resource
import statistics
import time

import jax

from neural_testbed import agents, leaderboard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mlp", choices=sorted(agents.AGENTS))
    parser.add_argument("--sweep", default="real", choices=["real", "real-quick"])
    args = parser.parse_args()

    problems = list(leaderboard.get_sweep(args.sweep).values())
    spec = agents.get_agent(args.agent)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.1f}; {args.agent} on {args.sweep} "
          f"({len(problems)} problems, {len({p.shape for p in problems})} shapes)")
    start = time.perf_counter()
    rows = leaderboard.run_agent(functools.partial(spec.make, spec.default), problems, args.agent,
                                 config=spec.default, progress=False)
    wall = time.perf_counter() - start
    first = [r for r in rows if r.tau == problems[0].taus[0]]  # a problem's times, once
    compile_s = sum(r.compile_seconds for r in first)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    failed = [r for r in rows if r.status != "ok"]
    print(f"wall {wall:.1f} s, of it compiling {compile_s:.1f} s; per problem (median, "
          f"compilation excluded): train {statistics.median(r.train_seconds for r in first):.2f}"
          f" s, eval " + ", ".join(
              f"tau={tau} {statistics.median(r.eval_seconds for r in rows if r.tau == tau):.2f} s"
              for tau in problems[0].taus)
          + f"; peak RSS {peak_mb:.0f} MB; {len(failed)} failed rows")
    by_dataset = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        if r.status == "ok":
            by_dataset[r.problem_id.split("/")[0]][r.tau].append(r.nll)
    for name, by_tau in by_dataset.items():
        print(f"  {name:<14}" + "  ".join(
            f"NLL^{tau} {statistics.fmean(v):8.3f}" for tau, v in sorted(by_tau.items())))


if __name__ == "__main__":
    main()
