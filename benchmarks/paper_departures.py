"""The size of three departures from the papers that docs/differences.md describes.

Not a test. Each part trains an agent's default config once per problem and evaluates
it with the same keys (test samples, belief samples, hyperplanes) as the run path, then
prints per-problem numbers and a mean paired difference with its standard error:

``placement``  Algorithm 4 under ``numerics="paper"``: d_KL^100 with the members placed
               in cells by the paper's unclipped probits against the probits clipped at
               +-5, as the reference clips them (and as ``numerics="paper"`` did before).
``bins``       Li & Zhu's reliability diagram (10 bins) against the 15-bin one it
               replaced: the calibration error each diagram shows,
               ``sum_b |correct_b - confidence_b| / n`` (the 15-bin one is the ECE), and
               the AUD (in vs out of distribution, right vs wrong) over 10 UPDS bins
               against the 15 the rows keep.
``grid``       ensemble's ``appendix-b`` configs of at most ``--max-members`` members (the
               paper's grid crosses every size with every decay; the reference's has the
               default decay alone below 30 members), into a results store (resumable),
               then per size the default decay against the best (the lowest mean
               d_KL^agg over the problems, chosen on them: optimistic).
``sgmcmc``     the prior variances of sgmcmc's two forms, lambda / (2 d temperature) (the
               reference's, ours) and lambda T / (d temperature) (appendix B.5 as
               printed), and the ``prior_variance`` that gives the printed one on a
               problem of T pairs: a direct computation.

Usage:
  PYTHONPATH=. python benchmarks/paper_departures.py placement [--agents ensemble ensemble+]
      [--problems classification_2d/20 ...] [--set KEY=VALUE ...]
  PYTHONPATH=. python benchmarks/paper_departures.py bins [--agents mlp ensemble]
  PYTHONPATH=. python benchmarks/paper_departures.py grid --db grid.db [--max-members 10]
  PYTHONPATH=. python benchmarks/paper_departures.py sgmcmc
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import agents, base, diagnostics, evaluation, leaderboard
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.likelihood import estimators

# Temperatures 0.01 and 0.1 at T = 10 and 100, seeds 0 and 1 (problems of `quick`).
_PLACEMENT_PROBLEMS = tuple(f"classification_2d/{i}" for i in (20, 21, 40, 41, 90, 91, 110, 111))


def _machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cpus, jax {jax.__version__} on "
            f"{jax.devices()[0].platform}")


def _trained(name: str, problem, overrides=()):
    """The default config of ``name`` (with ``--set`` overrides) trained on ``problem`` as
    the run path trains it, its environment and its keys."""
    spec = agents.get_agent(name)
    config = agents.parse_overrides(spec, overrides)
    agent = spec.make(config, base.Shapes(problem.input_dim, problem.num_classes))
    keys = base.problem_keys(problem.key_seed)
    data, prior, env = problem.instance()
    state = jax.jit(agent.train)(jax.random.fold_in(keys.agent, 0), data, prior)
    return agent, state, env, keys


def _test(problem, env, keys, tau: int):
    data_key, eval_key = jax.random.split(jax.random.fold_in(keys.test, tau))
    return problem.sample_test(data_key, env, tau), eval_key


@contextlib.contextmanager
def _clipped_placement(probit_clip: float):
    """Algorithm 4 with the probits clipped at ``probit_clip`` whatever the numerics: the
    evaluators traced inside place members as ``numerics="paper"`` did before it followed
    the paper."""
    original = estimators.partition_log_likelihood_and_cells
    estimators.partition_log_likelihood_and_cells = functools.partial(
        original, probit_clip=probit_clip)
    try:
        yield
    finally:
        estimators.partition_log_likelihood_and_cells = original


def _paired(label: str, pairs: list[tuple[float, float]], names: tuple[str, str]) -> None:
    diffs = [a - b for a, b in pairs]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    print(f"{label}: {names[0]} {statistics.mean(a for a, _ in pairs):.4f}, {names[1]} "
          f"{statistics.mean(b for _, b in pairs):.4f}, mean paired difference "
          f"{statistics.mean(diffs):+.4f} ± {se:.4f} over {len(pairs)} problems")


def placement(args) -> None:
    sweep = leaderboard.get_sweep("paper")
    for name in args.agents:
        pairs = []
        for problem_id in args.problems:
            problem = sweep[problem_id]
            agent, state, env, keys = _trained(name, problem, args.set)
            test, eval_key = _test(problem, env, keys, 100)
            make = functools.partial(evaluation.make_evaluator, agent.enn, 100,
                                     problem.num_classes, numerics="paper")
            unclipped = jax.jit(make())(eval_key, state, test)
            with _clipped_placement(5.0):
                clipped = jax.jit(make())(eval_key, state, test)
            pairs.append((float(unclipped.kl), float(clipped.kl)))
            print(f"{name:<10}{problem_id:<24}temp {problem.temperature:<5g}T "
                  f"{problem.num_train:<5}unclipped {pairs[-1][0]:9.4f}  clipped "
                  f"{pairs[-1][1]:9.4f}  cells {float(unclipped.diagnostics.occupied_cells):5.1f}"
                  f" / {float(clipped.diagnostics.occupied_cells):5.1f}", flush=True)
        _paired(f"{name} d_KL^100, numerics='paper'", pairs, ("unclipped", "clipped"))


def _calibration_error(bins) -> float:
    count, correct, confidence = np.asarray(bins, np.float64)
    return float(np.sum(np.abs(correct - confidence)) / np.sum(count))


def _aud(inputs: diagnostics.Inputs, num_bins: int) -> tuple[float, float]:
    """The total-uncertainty AUDs (in vs out, right vs wrong) over ``num_bins`` UPDS bins."""
    conf_in = diagnostics.rescaled_confidence(inputs.probs_in)
    conf_out = diagnostics.rescaled_confidence(inputs.probs_out)
    correct = jnp.argmax(inputs.probs_in, axis=-1) == inputs.labels
    total_in, total_out = inputs.split_in.total[:, None], inputs.split_out.total[:, None]
    every = jnp.ones_like(correct)
    sums = [diagnostics.binned_sums(c, t, m, num_bins) for c, t, m in (
        (conf_in, total_in, every), (conf_out, total_out, every),
        (conf_in, total_in, correct), (conf_in, total_in, ~correct))]
    ood = diagnostics.average_uncertainty_divergence(*sums[0], *sums[1])
    right_wrong = diagnostics.average_uncertainty_divergence(*sums[2], *sums[3])
    return float(ood[0]), float(right_wrong[0])


def bins(args) -> None:
    sweep = leaderboard.get_sweep(args.sweep)
    for name in args.agents:
        shown, aud_ood, aud_correct = [], [], []
        for problem in sweep.values():
            agent, state, env, keys = _trained(name, problem)
            test, eval_key = _test(problem, env, keys, 1)
            result = jax.jit(evaluation.make_evaluator(agent.enn, 1, problem.num_classes))(
                eval_key, state, test)
            ten = _calibration_error(result.diagnostics.reliability)
            shown.append((ten, float(result.ece)))
            aud_ood.append(tuple(_aud(result.diagnostics, b)[0] for b in (10, 15)))
            aud_correct.append(tuple(_aud(result.diagnostics, b)[1] for b in (10, 15)))
            print(f"{name:<10}{problem.problem_id:<24}diagram error 10 bins {ten:.4f}, "
                  f"15 bins (ECE) {float(result.ece):.4f}; AUD total in/out 10 bins "
                  f"{aud_ood[-1][0]:.4f}, 15 {aud_ood[-1][1]:.4f}; right/wrong 10 "
                  f"{aud_correct[-1][0]:.4f}, 15 {aud_correct[-1][1]:.4f}", flush=True)
        _paired(f"{name} calibration error the diagram shows, tau = 1", shown,
                ("10 bins", "15 bins"))
        _paired(f"{name} AUD total, in vs out", aud_ood, ("10 bins", "15 bins"))
        _paired(f"{name} AUD total, right vs wrong", aud_correct, ("10 bins", "15 bins"))


def grid(args) -> None:
    spec = agents.get_agent("ensemble")
    configs = [c for c in spec.configs("appendix-b") if c.num_ensemble <= args.max_members]
    problems = list(leaderboard.get_sweep(args.sweep).values())
    with leaderboard.ResultsStore(args.db) as store:
        leaderboard.run_sweep("ensemble", configs, problems, store, problems_per_batch=1)
        rows = store.rows(agent="ensemble", status="ok")
    by_config = {}
    for r in rows:
        by_config.setdefault(r.config_hash, {}).setdefault(r.problem_id, {})[r.tau] = r.kl
    hashes = {c: configs_lib.config_hash("ensemble", c) for c in configs}

    def agg(config) -> tuple[float, float, float]:
        per_problem = by_config[hashes[config]]
        kl1 = statistics.mean(v[1] for v in per_problem.values())
        kl100 = statistics.mean(v[100] for v in per_problem.values())
        return kl1, kl100, kl1 + kl100 / 100

    print(f"{'size':>5}{'decay':>10}{'lambda':>9}{'d_KL^1':>9}{'d_KL^100':>10}{'d_KL^agg':>10}")
    for size in sorted({c.num_ensemble for c in configs}):
        at_size = [c for c in configs if c.num_ensemble == size]
        default = next(c for c in at_size if c.l2_weight_decay == spec.default.l2_weight_decay
                       and c.adaptive_weight_scale == spec.default.adaptive_weight_scale)
        best = min(at_size, key=lambda c: agg(c)[2])
        for label, c in (("default", default), ("best", best)):
            _print_config(c, agg(c), label)
    reference = spec.configs()
    if set(reference) <= set(configs):  # both grids run: each tuned on these problems
        print("tuned over each grid (the lowest mean d_KL^agg, chosen on these problems):")
        for label, grid_configs in (("reference", reference), ("appendix-b", configs)):
            best = min(grid_configs, key=lambda c: agg(c)[2])
            _print_config(best, agg(best), f"best of {label} ({len(grid_configs)} configs)")


def _print_config(config, losses: tuple[float, float, float], label: str) -> None:
    decay = "adaptive" if config.adaptive_weight_scale else "1/(MT)"
    kl1, kl100, total = losses
    print(f"{config.num_ensemble:>5}{decay:>10}{config.l2_weight_decay:>9g}{kl1:>9.4f}"
          f"{kl100:>10.3f}{total:>10.4f}  {label}")


def sgmcmc(args) -> None:
    del args
    lam, d = agents.SGMCMCConfig().prior_variance, 2
    print(f"lambda = {lam} (the default), d = {d}")
    print(f"{'temperature':>12}{'T':>6}{'ours: lam/(2 d temp)':>22}{'B.5: lam T/(d temp)':>21}"
          f"{'ratio':>8}{'prior_variance for B.5':>24}")
    for temperature in (0.01, 0.1, 0.5):
        for num_train in (1, 10, 100, 1000):
            ours = lam / (2 * d * temperature)
            printed = lam * num_train / (d * temperature)
            print(f"{temperature:>12g}{num_train:>6}{ours:>22.4g}{printed:>21.4g}"
                  f"{printed / ours:>8.0f}{2 * num_train * lam:>24g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    p = parts.add_parser("placement")
    p.add_argument("--agents", nargs="+", default=["ensemble", "ensemble+"])
    p.add_argument("--problems", nargs="+", default=list(_PLACEMENT_PROBLEMS),
                   help="problem ids of the `paper` sweep")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="config fields changed from each agent's default")
    p.set_defaults(run=placement)
    p = parts.add_parser("bins")
    p.add_argument("--agents", nargs="+", default=["mlp", "ensemble"])
    p.add_argument("--sweep", default="smoke")
    p.set_defaults(run=bins)
    p = parts.add_parser("grid")
    p.add_argument("--db", default="paper_departures_grid.db", help="results store (resumed)")
    p.add_argument("--max-members", type=int, default=10)
    p.add_argument("--sweep", default="smoke")
    p.set_defaults(run=grid)
    parts.add_parser("sgmcmc").set_defaults(run=sgmcmc)
    args = parser.parse_args()
    print(f"machine: {_machine()}")
    args.run(args)


if __name__ == "__main__":
    main()
