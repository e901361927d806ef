"""Across agent configs: TAL score against metacorrelation (Wang et al.'s Figure 4, right).

Runs transductive active learning with each config as the selection model on
the same problems (by default the 10 d = 5 problems of ``regression-wang``,
Wang et al.'s code's dimension) and prints, per config, its metacorrelation at
the test inputs before any query, the exact posterior's test log-likelihood
after the BatchMIG rounds (one round by default, the paper's TAL score), its
paired difference from random selection, and seconds; then the Pearson
correlation across configs between the two (configs whose metacorrelation is
not applicable, a single model's, are left out).

    PYTHONPATH=. python benchmarks/tal_metacorrelation.py \\
        --config oracle_gp --config ensemble:num_ensemble=3 --config ensemble:num_ensemble=30
"""

from __future__ import annotations

import argparse
import functools
import math
import platform
import time

import jax
import numpy as np
import scipy.stats

from neural_testbed import active, agents, leaderboard

_DEFAULT_CONFIGS = ("oracle_gp", "ensemble:num_ensemble=3", "ensemble:num_ensemble=10",
                    "ensemble:num_ensemble=30", "ensemble:num_ensemble=100")


def _make(text: str):
    """``agent[:key=value,...]`` -> (label, shapes -> agent)."""
    name, _, overrides = text.partition(":")
    spec = agents.get_agent(name)
    config = agents.registry.parse_overrides(spec, [o for o in overrides.split(",") if o])
    return text, functools.partial(spec.make, config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=None,
                        help="agent[:key=value,...]; repeatable (default: oracle_gp and "
                             "ensembles of 3, 10, 30, 100 members)")
    parser.add_argument("--problems", default=",".join(f"regression_wang/{i}"
                                                       for i in range(10, 20)))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=7)
    args = parser.parse_args()
    problems = active.tal.pick_problems(leaderboard.get_sweep("regression-wang"), args.problems)
    settings = active.TALSettings(num_rounds=args.rounds, batch_size=args.batch,
                                  methods=("batchmig", "random"))
    print(f"{len(problems)} problems, {args.rounds} round(s) x {args.batch} queries; "
          f"{jax.devices()[0].device_kind}, {platform.machine()}")
    configs = args.config or _DEFAULT_CONFIGS
    width = max(len(c) for c in configs) + 2
    print(f"{'config':<{width}}{'metacorr':>17}{'TAL (batchmig)':>19}{'- random':>19}{'s':>7}")
    points = []
    for text in configs:
        label, agent = _make(text)
        start = time.perf_counter()
        results = active.run_tal(agent, problems, settings)
        seconds = time.perf_counter() - start
        meta, meta_se, _ = active.tal.mean_metacorrelation(results)
        score = np.array([r.log_likelihood["batchmig"][-1] for r in results])
        diff, diff_se = active.tal.paired_difference(results, "batchmig")
        print(f"{label:<{width}}{meta:>9.4f} ± {meta_se:<6.4f}"
              f"{score.mean():>11.4f} ± {score.std(ddof=1) / np.sqrt(len(score)):<6.4f}"
              f"{diff:>+11.4f} ± {diff_se:<6.4f}{seconds:>7.0f}")
        if not math.isnan(meta):
            points.append((meta, score.mean()))
    if len(points) >= 3:
        r, p = scipy.stats.pearsonr(*zip(*points))
        print(f"Pearson correlation across {len(points)} configs of metacorrelation and TAL "
              f"score: {r:.3f} (p = {p:.3f})")


if __name__ == "__main__":
    main()
