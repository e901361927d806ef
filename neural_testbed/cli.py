"""The ``neural-testbed`` command."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import math
import sys
from collections.abc import Sequence

from neural_testbed import base
from neural_testbed.agents import registry
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import runner
from neural_testbed.likelihood import kl

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neural-testbed",
        description="Evaluate the joint predictions of learning agents on the Neural Testbed.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="train and evaluate one agent config on a problem sweep",
        description="Train an agent once per problem of a sweep, evaluate d_KL at each tau "
                    "(tau = 1 and 100 by default), and print a table and an aggregate line.")
    run.add_argument("--agent", required=True,
                     help="registered agent name (see `neural-testbed agents`)")
    run.add_argument("--sweep", default="quick", choices=list(problems_lib.SWEEPS),
                     help="problem sweep: 'quick' (18 problems, about a minute) or "
                          "'paper' (the paper's 210 problems); default: quick")
    run.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[],
                     metavar="KEY=VALUE",
                     help="change a hyperparameter of the agent's default config, "
                          "e.g. --set l2_weight_decay=0.1 adaptive_weight_scale=false")
    run.add_argument("--output", metavar="CSV", help="also write every row to this CSV file")
    run.add_argument("--seed", type=int, default=0,
                     help="agent seed, folded into each problem's key (default: 0)")
    run.add_argument("--estimator", default="auto", choices=list(kl.ESTIMATORS),
                     help="joint log-likelihood estimator: monte_carlo (Algorithm 3), "
                          "partition (Algorithm 4), or auto = monte_carlo for tau < 10, "
                          "partition otherwise (default)")
    run.add_argument("--batch-size", type=int, default=None, metavar="N",
                     help="problems of one shape trained together (default: all of them)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    commands.add_parser("agents", help="list the registered agents and their defaults")

    problems = commands.add_parser("problems", help="list the problems of a sweep")
    problems.add_argument("--sweep", default="quick", choices=list(problems_lib.SWEEPS),
                          help="problem sweep to list (default: quick)")
    return parser


def _cmd_agents() -> int:
    for name, spec in sorted(registry.AGENTS.items()):
        print(f"{name}: {spec.description}")
        print(f"  sweep: {len(spec.sweep())} configs")
        for field in dataclasses.fields(spec.default):
            print(f"  {field.name} = {getattr(spec.default, field.name)!r}")
    return 0


def _cmd_problems(sweep: str) -> int:
    print(f"{'problem_id':<24}{'temperature':>12}{'T':>6}{'seed':>6}  taus      N     M")
    for p in problems_lib.get_sweep(sweep).values():
        taus = ",".join(map(str, p.taus))
        print(f"{p.problem_id:<24}{p.temperature:>12g}{p.num_train:>6}{p.seed:>6}  "
              f"{taus:<8}{p.num_test:>5}{p.num_samples:>6}")
    return 0


def _mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def _print_table(rows: Sequence[base.ProblemResult], taus: Sequence[int]) -> None:
    by_problem: dict[str, dict[int, base.ProblemResult]] = {}
    for row in rows:
        by_problem.setdefault(row.problem_id, {})[row.tau] = row
    header = f"{'problem_id':<24}{'temp':>6}{'T':>6}{'seed':>5}"
    for tau in taus:
        header += f"{f'kl(tau={tau}) ± se':>24}"
    header += f"{'acc':>7}{'ece':>7}{'secs':>7}"
    print(header)
    for pid, by_tau in by_problem.items():
        first = next(iter(by_tau.values()))
        line = f"{pid:<24}{first.temperature:>6g}{first.num_train:>6}{first.seed:>5}"
        for tau in taus:
            r = by_tau.get(tau)
            cell = "failed" if r is None or r.status != "ok" else f"{r.kl:.4f} ± {r.kl_stderr:.4f}"
            line += f"{cell:>24}"
        marginal = by_tau.get(taus[0])
        secs = sum(r.eval_seconds for r in by_tau.values()) + first.train_seconds
        line += f"{marginal.accuracy:>7.3f}{marginal.ece:>7.3f}{secs:>7.2f}"
        print(line)


def _aggregate_line(rows: Sequence[base.ProblemResult], taus: Sequence[int]) -> str:
    ok = [r for r in rows if r.status == "ok"]
    parts = []
    means = {}
    for tau in taus:
        mean, se = _mean_and_stderr([r.kl for r in ok if r.tau == tau])
        means[tau] = mean
        parts.append(f"d_KL^{tau} = {mean:.4f} ± {se:.4f}")
    if 1 in means and 100 in means:
        parts.append(f"d_KL^agg = {means[1] + means[100] / 100:.4f}")
    marginal = [r for r in ok if r.tau == taus[0]]
    parts.append(f"accuracy = {_mean_and_stderr([r.accuracy for r in marginal])[0]:.3f}")
    parts.append(f"ECE = {_mean_and_stderr([r.ece for r in marginal])[0]:.3f}")
    num_problems = len({r.problem_id for r in rows})
    num_failed = len({r.problem_id for r in rows if r.status != "ok"})
    parts.append(f"{num_problems} problems" + (f", {num_failed} FAILED" if num_failed else ""))
    return "aggregate: " + ", ".join(parts)


def _write_csv(path: str, rows: Sequence[base.ProblemResult]) -> None:
    fields = [f.name for f in dataclasses.fields(base.ProblemResult)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())


def _cmd_run(args: argparse.Namespace) -> int:
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    agent = spec.make(config)
    problems = list(problems_lib.get_sweep(args.sweep).values())
    print(f"agent {args.agent}: {config}", file=sys.stderr)
    rows = runner.run_agent(
        agent, problems, args.agent, agent_seed=args.seed, batch_size=args.batch_size,
        estimator=args.estimator, progress=not args.quiet,
    )
    taus = sorted({t for p in problems for t in p.taus})
    _print_table(rows, taus)
    print(_aggregate_line(rows, taus))
    total = sum(r.eval_seconds for r in rows if r.status == "ok") + sum(
        r.train_seconds for r in rows if r.status == "ok" and r.tau == taus[0])
    print(f"time: {total:.1f} s of training and evaluation")
    if args.output:
        _write_csv(args.output, rows)
        print(f"wrote {len(rows)} rows to {args.output}")
    failed = [r for r in rows if r.status != "ok"]
    for r in failed:
        print(f"FAILED {r.problem_id} tau={r.tau}: {r.error}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neural-testbed`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        if args.command == "agents":
            return _cmd_agents()
        if args.command == "problems":
            return _cmd_problems(args.sweep)
        return _cmd_run(args)
    except (ValueError, TypeError) as error:
        print(f"neural-testbed: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("neural-testbed: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
