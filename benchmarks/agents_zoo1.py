"""Speed of the ensemble, ensemble+ and hypermodel agents on the paper's problems.

Not a test. For each default agent and each T of the ``paper`` sweep, it runs
``leaderboard.run_agent`` with ``problems_per_batch=1`` on a few problems of that T
(temperature 0.1, seeds 0, 1, ...) and reports seconds per problem: train,
evaluate at tau = 1, evaluate at tau = 100. The first problem of each T pays
for compilation and is reported apart ("cold"); the medians are over the
others ("warm"). From these it estimates the whole ``paper`` sweep (30
problems per T, one compilation per T, batch size 1), and it times the
``quick`` sweep end to end as a user runs it (all problems of a shape batched,
compilation included).

Timings on a shared 2-core machine are noisy: other jobs slow them down.

Usage:
  PYTHONPATH=. python benchmarks/agents_zoo1.py                        # all three agents
  PYTHONPATH=. python benchmarks/agents_zoo1.py --agents ensemble+ --per-t 3
  PYTHONPATH=. python benchmarks/agents_zoo1.py --agents hypermodel --num-train 10 1000 --no-quick
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time

import jax

from neural_testbed import agents, leaderboard

_PAPER_NUM_TRAIN = (1, 3, 10, 30, 100, 300, 1000)
_PROBLEMS_PER_T_IN_PAPER = 30  # 3 temperatures x 10 seeds


def _problems(num_train: int, count: int) -> list[leaderboard.Problem]:
    group = [p for p in leaderboard.get_sweep("paper").values()
             if p.num_train == num_train and p.temperature == 0.1]
    return sorted(group, key=lambda p: p.seed)[:count]


def _seconds(rows):
    """Per-problem (train, eval tau=1, eval tau=100) of one problem's rows."""
    by_tau = {r.tau: r for r in rows}
    return by_tau[1].train_seconds, by_tau[1].eval_seconds, by_tau[100].eval_seconds


def time_per_problem(name: str, num_train: int, count: int):
    """(cold, warm medians) of (train, eval tau=1, eval tau=100) seconds for one T."""
    spec = agents.get_agent(name)
    build = functools.partial(spec.make, spec.default)
    rows = leaderboard.run_agent(build, _problems(num_train, count), name,
                                 problems_per_batch=1, progress=False)
    failed = [r for r in rows if r.status != "ok"]
    if failed:
        raise RuntimeError(f"{name} failed: {failed[0].error}")
    per_problem = [_seconds([r for r in rows if r.problem_id == pid])
                   for pid in dict.fromkeys(r.problem_id for r in rows)]
    warm = per_problem[1:] or per_problem
    return per_problem[0], tuple(statistics.median(column) for column in zip(*warm))


def time_quick_sweep(name: str) -> float:
    spec = agents.get_agent(name)
    problems = list(leaderboard.get_sweep("quick").values())
    start = time.perf_counter()
    build = functools.partial(spec.make, spec.default)
    rows = leaderboard.run_agent(build, problems, name, progress=False)
    elapsed = time.perf_counter() - start
    if any(r.status != "ok" for r in rows):
        raise RuntimeError(f"{name} failed on the quick sweep")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["ensemble", "ensemble+", "hypermodel"])
    parser.add_argument("--num-train", type=int, nargs="+", default=list(_PAPER_NUM_TRAIN),
                        help="the T values to time (default: all seven of the paper)")
    parser.add_argument("--per-t", type=int, default=3,
                        help="problems per T; the first is the cold one (default: 3)")
    parser.add_argument("--no-quick", action="store_true", help="skip the quick sweep")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, load average "
          f"{os.getloadavg()[0]:.1f}, jax {jax.__version__} on {jax.devices()[0].platform}")
    for name in args.agents:
        print(f"\n{name} (default config), seconds per problem; warm = median over "
              f"{max(args.per_t - 1, 1)} problem(s), cold = first problem (compilation included)")
        print(f"{'T':>6}{'train':>9}{'eval1':>9}{'eval100':>9}{'total':>9}{'cold total':>12}")
        paper_estimate = 0.0
        for num_train in args.num_train:
            cold, warm = time_per_problem(name, num_train, args.per_t)
            print(f"{num_train:>6}" + "".join(f"{s:>9.2f}" for s in warm)
                  + f"{sum(warm):>9.2f}{sum(cold):>12.2f}")
            paper_estimate += sum(cold) + (_PROBLEMS_PER_T_IN_PAPER - 1) * sum(warm)
        if sorted(args.num_train) == list(_PAPER_NUM_TRAIN):
            print(f"paper sweep estimate (210 problems, batch size 1): "
                  f"{paper_estimate / 60:.1f} min")
        if not args.no_quick:
            print(f"quick sweep (18 problems, batched, compilation included): "
                  f"{time_quick_sweep(name):.1f} s")


if __name__ == "__main__":
    main()
