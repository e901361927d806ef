"""The paper's Figure 7 on iris and digits: ensemble+'s prior functions against mlp.

Not a test. Runs mlp's default config and ensemble+'s ``prior-functions`` configs
(none, and linear and VAE priors at each prior scale) on the chosen datasets of
the `real` sweep, every T, the first ``--seeds`` seeds, into a results store
(resumable: rerun the same command to continue), then writes figure7.png and
prints, per dataset and tau, each prior function at its best scale: the mean over
seeds of its NLL divided by mlp's on the same problem, per T, with the standard
error over seeds. The same as

  neural-testbed run --agent mlp --sweep real --db DB
  neural-testbed sweep --agent ensemble+ --configs prior-functions --sweep real --db DB
  neural-testbed plot --sweep real --db DB --out DIR

restricted to fewer datasets and seeds so that it fits a 2-core machine.

Usage:
  PYTHONPATH=. python benchmarks/figure7.py --db figure7.db --out figures
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import jax
import numpy as np

from neural_testbed import agents, leaderboard
from neural_testbed.figures import leaderboard as figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="figure7.db", help="results store (resumed)")
    parser.add_argument("--out", default=".", help="directory for figure7.png")
    parser.add_argument("--datasets", default="iris,digits",
                        help="comma-separated datasets of the `real` sweep")
    parser.add_argument("--seeds", type=int, default=3, help="the first K seeds of each T")
    args = parser.parse_args()

    datasets = args.datasets.split(",")
    real = leaderboard.get_sweep("real")
    unknown = sorted(set(datasets) - {p.dataset for p in real.values()})
    if unknown or not 1 <= args.seeds <= 10:
        parser.error(f"--datasets must name datasets of the real sweep, got {unknown}; "
                     f"--seeds must be 1 to 10, got {args.seeds}")
    problems = {pid: p for pid, p in real.items()
                if p.dataset in datasets and p.seed < args.seeds}
    configs = agents.get_agent("ensemble+").configs("prior-functions")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores; "
          f"{len(problems)} problems ({', '.join(datasets)}, seeds 0-{args.seeds - 1}); "
          f"mlp default + {len(configs)} ensemble+ configs")
    start = time.perf_counter()
    with leaderboard.ResultsStore(args.db) as store:
        for name, sweep in (("mlp", [agents.get_agent("mlp").default]), ("ensemble+", configs)):
            summary = leaderboard.run_sweep(name, sweep, list(problems.values()), store,
                                            problems_per_batch=1)
            print(f"{name}: {summary.computed} rows computed, {summary.reused} reused, "
                  f"{summary.failed} failed")
        rows = store.rows()
    print(f"{time.perf_counter() - start:.0f} s")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"wrote {figures.figure_prior_functions(rows, problems, out / 'figure7.png')}")

    ratios = figures.prior_function_ratios(rows, problems)
    best = figures.best_prior_scales(ratios)
    num_trains = sorted({t for by_t in ratios.values() for t in by_t})
    print("\nensemble+ NLL / mlp NLL, mean ± se over seeds, each prior at its best scale "
          "(chosen on these problems)\n")
    print("| dataset | tau | prior (scale) | " + " | ".join(f"T = {t}" for t in num_trains) + " |")
    print("|---|---|---|" + "---|" * len(num_trains))
    for (where, tau, label), scale in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0])):
        by_t = ratios[(where, tau, label, scale)]
        cells = []
        for t in num_trains:
            values = np.asarray(by_t.get(t, []))
            if not len(values):
                cells.append("")
                continue
            se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
            cells.append(f"{values.mean():.2f} ± {se:.2f}")
        name = label if label == "none" else f"{label} ({scale:g})"
        print(f"| {where} | {tau} | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
