"""Seconds per problem of each regression agent on the regression-quick sweep.

Runs every agent's default config (or ``--set``-free defaults) on the
``regression-quick`` sweep in this process and prints, per agent, training
and evaluation seconds per problem (medians over problems, compilation apart),
the compile seconds, and the stratified d_KL at each tau. ``--seeds K`` keeps the
first K seeds of each (d, noise variance, T) setting (timing every setting at a
fraction of the cost; the d_KL is then of those problems only), and the largest
per-problem training seconds shows what the biggest setting costs.

    PYTHONPATH=. python benchmarks/regression_quick.py --agent mlp --agent oracle_gp
    PYTHONPATH=. python benchmarks/regression_quick.py --seeds 1   # every agent, 4 problems
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import platform
import statistics
import time

import jax

from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import scoring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", default=None)
    parser.add_argument("--sweep", default="regression-quick")
    parser.add_argument("--seeds", type=int, default=None, metavar="K",
                        help="only the first K seeds of each setting (default: all)")
    args = parser.parse_args()
    names = args.agent or [n for n, s in agents.AGENTS.items() if "regression" in s.targets]
    problems = leaderboard.get_sweep(args.sweep)
    if args.seeds is not None:
        problems = {pid: p for pid, p in problems.items() if p.seed < args.seeds}
    print(f"{args.sweep}: {len(problems)} problems; {jax.devices()[0].device_kind}, "
          f"{platform.machine()}")
    print(f"{'agent':<12}{'train s':>9}{'max':>8}{'eval s':>9}{'compile s':>11}{'wall s':>9}  d_KL",
          flush=True)
    for name in names:
        spec = agents.get_agent(name)
        start = time.perf_counter()
        build = functools.partial(spec.make, spec.default)
        rows = leaderboard.run_agent(build, list(problems.values()), name,
                                     progress=False)
        wall = time.perf_counter() - start
        by_problem = {}
        for r in rows:
            by_problem.setdefault(r.problem_id, []).append(r)
        train = statistics.median(rs[0].train_seconds for rs in by_problem.values())
        largest = max(rs[0].train_seconds for rs in by_problem.values())
        evaluate = statistics.median(sum(r.eval_seconds for r in rs)
                                     for rs in by_problem.values())
        compile_seconds = sum(rs[0].compile_seconds for rs in by_problem.values())
        records, _ = scoring.score_agents([dataclasses.asdict(r) for r in rows], dict(problems),
                                          baseline="")
        taus = sorted({r.tau for r in rows})
        # One problem per setting (--seeds 1) has no within-setting spread: no ± then.
        kls = ", ".join(f"tau {t}: {records[0][f'kl_{t}']:.3f}" + (
            f" ± {records[0][f'kl_{t}_stderr']:.3f}"
            if math.isfinite(records[0][f"kl_{t}_stderr"]) else "") for t in taus)
        print(f"{name:<12}{train:>9.2f}{largest:>8.1f}{evaluate:>9.2f}{compile_seconds:>11.1f}"
              f"{wall:>9.1f}  {kls}", flush=True)


if __name__ == "__main__":
    main()
