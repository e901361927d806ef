"""Seconds per problem of the third part of the zoo: knn, random_forest, epinet, deep_kernel, laplace.

Not a test. Each agent's default config runs through ``leaderboard.run_agent``
(the runner the CLI uses, one problem at a time) on a few ``paper`` problems
per number of training points T, and the script prints, per agent and T, the
median over those problems of the seconds to train and to evaluate at tau = 1
and at tau = 100 (compilation excluded; it is printed apart, summed over the
problems, since only the first problem of a shape compiles). mlp runs too, as
the yardstick the README's table already has.

The tau = 100 evaluation is a fixed amount of work per problem: M = 1000
belief samples x N = 1000 test samples x 100 inputs. random_forest is a host
agent (scikit-learn, the ``forest`` extra): its training is ordinary Python and
its evaluation calls the forest's ``predict_proba`` on chunks of networks.

Timings on a shared machine are noisy: the load average is printed.

Usage:
  PYTHONPATH=. python benchmarks/agents_zoo3.py                       # 2 problems per T, T in {10, 1000}
  PYTHONPATH=. python benchmarks/agents_zoo3.py --agents laplace --num-train 1 10 100 1000
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import jax

from neural_testbed import agents, leaderboard

DEFAULT_AGENTS = ["mlp", "knn", "random_forest", "epinet", "deep_kernel", "laplace"]


def paper_problems(num_train: int, count: int) -> list[leaderboard.Problem]:
    """The first ``count`` paper problems with ``num_train`` training points, one per temperature
    first (so two problems are two different temperatures)."""
    group = [p for p in leaderboard.get_sweep("paper").values() if p.num_train == num_train]
    group.sort(key=lambda p: (p.seed, p.temperature))
    return group[:count]


def time_agent(name: str, num_train: int, count: int) -> dict[str, float]:
    spec = agents.get_agent(name)
    problems = paper_problems(num_train, count)
    start = time.perf_counter()
    build = functools.partial(spec.make, spec.default)
    rows = leaderboard.run_agent(build, problems, name, config=spec.default,
                                 problems_per_batch=1, progress=False)
    wall = time.perf_counter() - start
    failed = [r for r in rows if r.status != "ok"]
    if failed:
        raise SystemExit(f"{name} failed on {failed[0].problem_id}: {failed[0].error}")
    by_tau = {tau: [r for r in rows if r.tau == tau] for tau in (1, 100)}
    first = by_tau[1]  # one row per problem carries the training time
    return {
        "train": statistics.median(r.train_seconds for r in first),
        "eval1": statistics.median(r.eval_seconds for r in by_tau[1]),
        "eval100": statistics.median(r.eval_seconds for r in by_tau[100]),
        "compile": sum(r.compile_seconds for r in first),  # each tau's row repeats it
        "kl1": statistics.fmean(r.kl for r in by_tau[1]),
        "kl100": statistics.fmean(r.kl for r in by_tau[100]),
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=DEFAULT_AGENTS,
                        choices=sorted(agents.AGENTS))
    parser.add_argument("--num-train", nargs="+", type=int, default=[10, 1000],
                        choices=[1, 3, 10, 30, 100, 300, 1000])
    parser.add_argument("--problems", type=int, default=2, help="paper problems per T")
    args = parser.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.1f}; {args.problems} paper problems per T, "
          "medians per problem")
    print(f"{'agent':<14}{'T':>6}{'train s':>9}{'eval1 s':>9}{'eval100 s':>10}{'total s':>9}"
          f"{'compile s':>10}{'wall s':>8}{'kl1':>8}{'kl100':>8}")
    for name in args.agents:
        for num_train in args.num_train:
            r = time_agent(name, num_train, args.problems)
            total = r["train"] + r["eval1"] + r["eval100"]
            print(f"{name:<14}{num_train:>6}{r['train']:>9.2f}{r['eval1']:>9.2f}"
                  f"{r['eval100']:>10.2f}{total:>9.2f}{r['compile']:>10.1f}{r['wall']:>8.1f}"
                  f"{r['kl1']:>8.3f}{r['kl100']:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
