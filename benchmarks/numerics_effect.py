"""How much Algorithm 4's numerics change d_KL^100: the reference's against the paper's.

Not a test. For each agent config and each problem, trains the agent once and
evaluates it at tau = 100 with the same keys (same test samples, belief samples
and hyperplanes) under ``numerics="reference"`` (the probability floor
Phi(-5) and the reference's cell smoothing, the default) and
``numerics="paper"`` (Algorithm 4 as printed), and prints the mean paired
difference reference - paper with its standard error over the problems.

Usage:
  PYTHONPATH=. python benchmarks/numerics_effect.py [--seeds 3] [--num-train 1 10 100]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import jax

from neural_testbed import agents, base, evaluation, leaderboard

_CONFIGS = {
    "mlp": ("mlp", agents.MLPConfig()),
    "ensemble+ (default)": ("ensemble+", agents.EnsemblePlusConfig()),
    "ensemble+ (linear prior scaling)": (
        "ensemble+", agents.EnsemblePlusConfig(prior_scale=1.0, temperature_scaling="linear")),
}


def _kl100_both(problem, agent, train, evaluators):
    """d_KL^100 of one problem under each numerics, from one trained state and the same keys."""
    keys = base.problem_keys(problem.key_seed)
    data, prior, env = problem.instance()
    state = train(jax.random.fold_in(keys.agent, 0), data, prior)
    data_key, eval_key = jax.random.split(jax.random.fold_in(keys.test, 100))
    test = problem.sample_test(data_key, env, 100)
    return [float(evaluate(eval_key, state, test).kl) for evaluate in evaluators]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="problems per (temperature, T)")
    parser.add_argument("--num-train", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.01, 0.1])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, jax {jax.__version__} "
          f"on {jax.devices()[0].platform}")
    paper = leaderboard.get_sweep("paper").values()
    print(f"{'agent':<34}{'temp':>6}{'T':>6}{'reference':>11}{'paper':>11}"
          f"{'diff':>9}{'± se':>8}")
    for label, (name, config) in _CONFIGS.items():
        agent = agents.get_agent(name).make(config, base.Shapes(2, 2))  # the paper's problems
        train = jax.jit(agent.train)
        evaluators = [jax.jit(evaluation.make_evaluator(agent.enn, 100, 2, numerics=numerics))
                      for numerics in ("reference", "paper")]
        for temperature in args.temperatures:
            for num_train in args.num_train:
                problems = [p for p in paper if (p.temperature, p.num_train) ==
                            (temperature, num_train) and p.seed < args.seeds]
                pairs = [_kl100_both(p, agent, train, evaluators) for p in problems]
                diffs = [r - q for r, q in pairs]
                se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
                print(f"{label:<34}{temperature:>6g}{num_train:>6}"
                      f"{statistics.mean(r for r, _ in pairs):>11.3f}"
                      f"{statistics.mean(q for _, q in pairs):>11.3f}"
                      f"{statistics.mean(diffs):>9.3f}{se:>8.3f}")


if __name__ == "__main__":
    main()
