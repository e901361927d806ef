"""Overhead of the results store and sweep machinery per problem.

Usage: python benchmarks/store_overhead.py [--sweep quick] [--repeats 5]

Times (a) the runner alone and (b) the same work through ``run_sweep`` into a
fresh store, for the default mlp on a problem sweep, and (c) the store's own
work (the resume query plus writing every row, one transaction per batch)
in isolation. Prints medians over repeats.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time

from neural_testbed import agents, leaderboard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="quick")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    problems = leaderboard.get_sweep(args.sweep)
    config = agents.MLPConfig()
    runner_s, sweep_s, store_s = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        build = functools.partial(agents.make_mlp_agent, config)
        rows = leaderboard.run_agent(build, problems.values(), "mlp", config=config,
                                     progress=False)
        runner_s.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as tmp:
            with leaderboard.ResultsStore(os.path.join(tmp, "a.db")) as store:
                start = time.perf_counter()
                leaderboard.run_sweep("mlp", [config], list(problems.values()), store,
                                      progress=False)
                sweep_s.append(time.perf_counter() - start)
            with leaderboard.ResultsStore(os.path.join(tmp, "b.db")) as store:
                start = time.perf_counter()
                store.done("mlp", config, "auto", 0)
                batch = len(rows) // 7 or 1  # about one transaction per shape group
                for i in range(0, len(rows), batch):
                    store.write(rows[i:i + batch])
                store_s.append(time.perf_counter() - start)
    n = len(problems)
    med = statistics.median
    print(f"mlp default on {args.sweep} ({n} problems), medians of {args.repeats}, "
          f"{os.cpu_count()} cpus")
    print(f"runner alone:       {med(runner_s):.2f} s ({med(runner_s) / n * 1000:.1f} ms/problem)")
    print(f"through run_sweep:  {med(sweep_s):.2f} s ({med(sweep_s) / n * 1000:.1f} ms/problem)")
    print(f"store work alone:   {med(store_s) * 1000:.1f} ms ({med(store_s) / n * 1000:.2f} "
          f"ms/problem = {100 * med(store_s) / med(runner_s):.2f}% of the runner's time)")


if __name__ == "__main__":
    main()
