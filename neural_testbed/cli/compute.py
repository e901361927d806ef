"""`run`, `sweep` and `diagnose`: the commands that compute rows into the store."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from neural_testbed import run as run_lib
from neural_testbed.agents import registry
from neural_testbed.cli import checks, figures, options
from neural_testbed.diagnostics import report as diagnostics_report
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import run_report, scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import checks as run_checks
from neural_testbed.run import options as run_options


def _add_run(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "run", parents=[g.common, g.db, g.sweep, g.compute, g.scale, g.one_agent],
        help="evaluate one agent config on a problem sweep",
        description="Train an agent once per problem of a sweep, evaluate d_KL at each of "
                    "its taus, store every row, and print a table and an aggregate line. "
                    "Results already in the store are reused.")
    options.add_problem_ids(parser)
    parser.add_argument("--output", metavar="CSV",
                        help=f"also write this run's rows to a CSV file "
                             f"({options.SPREADSHEET_NOTE})")
    parser.set_defaults(handler=run)


def _add_sweep(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "sweep", parents=[g.common, g.db, g.sweep, g.compute, g.scale],
        help="run every config of an agent's hyperparameter sweep",
        description="Run each config of the agent's hyperparameter sweep on each problem, "
                    "writing every result to the store as soon as it is computed. Rerun after "
                    "an interruption to continue where it stopped.")
    parser.add_argument("--agent", required=True, help="registered agent name")
    options.add_problem_ids(parser)
    parser.add_argument("--configs", default=registry.PAPER_SWEEP, metavar="NAME",
                        help="which of the agent's config sweeps: 'paper' (default, the "
                             "hyperparameter sweep behind the published numbers) or one the "
                             "agent names (`neural-testbed agents` lists them), e.g. "
                             "ensemble+'s 'prior-functions' for Figure 7, or 'appendix-b' "
                             "(ensemble, ensemble+, hypermodel, dropout, bbb, sgmcmc: the grid "
                             "the paper's appendix B prints)")
    parser.add_argument("--configs-per-batch", type=int, default=8, metavar="N",
                        help="configs that differ only in float fields (learning rate, decay, "
                             "prior scale, ...) are trained and evaluated together in one "
                             "program, up to N at a time: one compilation per group instead of "
                             "per config, and fewer, larger launches on a GPU; N times the "
                             "memory. 1 runs each config alone (default: 8)")
    parser.set_defaults(handler=sweep)


def _add_diagnose(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "diagnose", parents=[g.common, g.db, g.sweep, g.compute, g.one_agent],
        help="everything beside the KL for one agent on one problem, with figures",
        description="Train an agent on one problem (or reuse its stored rows), and print its "
                    "KL with the diagnostics computed from the same belief samples: "
                    "calibration, the aleatoric / epistemic split, rejection of "
                    "out-of-distribution inputs, UPDS / AUD, and the estimator's health. Writes "
                    "reliability.png, upds.png and rejection.png (from the smallest tau's row) "
                    "into --out. Rows are stored like run's.")
    parser.add_argument("--problem", required=True,
                        help="problem id, e.g. classification_2d/17 (looked up in --sweep, "
                             "then in the paper sweep)")
    parser.add_argument("--out", default="neural_testbed_diagnostics", metavar="DIR",
                        help="directory for the PNG files "
                             "(default: ./neural_testbed_diagnostics)")
    parser.set_defaults(workers=1, backend="local", address=None, shard=None,
                        units_at_once=1, handler=diagnose)  # one problem


def run_options_of(args) -> run_lib.RunOptions:
    """The command line's run settings, checked (one clear error, before any work); units
    at once not asked for: what pays on this machine (``default_units_at_once``)."""
    chosen = run_lib.RunOptions(
        agent_seed=args.seed, estimator=args.estimator,
        problems_per_batch=args.problems_per_batch,
        configs_per_batch=getattr(args, "configs_per_batch", 1),  # `run`: one config
        recompute=args.recompute, retry_failed=args.retry_failed,
        shard=run_options.parse_shard(args.shard) if args.shard else (1, 1),
        backend=args.backend, workers=args.workers, address=args.address,
        imports=tuple(args.imports),
        units_at_once=1 if args.units_at_once is None else args.units_at_once,
        progress=not args.quiet).check()
    if args.units_at_once is None:
        args.units_at_once = run_options.default_units_at_once(chosen)
    return dataclasses.replace(chosen, units_at_once=args.units_at_once)


def _compute(args, configs: Sequence[Any], announce: str,
             problems: Sequence[Any] | None = None) -> tuple[run_lib.SweepSummary, list]:
    """Checks every setting and opens the store (one clear error, before any work),
    prints ``announce`` on stderr, then runs the configs on ``problems`` (default: the
    command's sweep) into the store."""
    problems = list(options.sweep_problems(args).values()) if problems is None else list(problems)
    chosen = run_options_of(args)
    run_checks.check_agent_on_problems(args.agent, problems, args.estimator, configs)
    programs = run_lib.Programs()  # the check's traces are the run's
    run_checks.check_memory(_units_to_compute(args, configs, problems, chosen), programs,
                            progress=chosen.progress)
    with store_lib.ResultsStore(args.db) as store:
        # One write with its newline: Python runs a Ctrl-C's handler as soon as a write
        # returns, and print's separate newline would leave the line open for the next.
        sys.stderr.write(f"{announce}\n")
        summary = run_lib.run_sweep(args.agent, configs, problems, store, options=chosen,
                                    programs=programs)
    return summary, problems


def _units_to_compute(args, configs: Sequence[Any], problems: Sequence[Any],
                      chosen: run_options.RunOptions) -> list:
    """The work units the run will compute: all of them for a new store (none is made
    here), what a store already there lacks (opened as the run opens it, which writes
    nothing until rows come)."""
    if not os.path.exists(args.db) or os.path.getsize(args.db) == 0:
        units, _ = run_lib.plan_units(args.agent, configs, problems, None, chosen)
        return units
    with store_lib.ResultsStore(args.db) as store:
        units, _ = run_lib.plan_units(args.agent, configs, problems, store, chosen)
    return units


def _report_failures(rows, keep_going: bool) -> int:
    """Lists failed rows by agent and problem; the exit status of the command."""
    failed: dict[tuple[str, str], list] = {}
    for r in rows:
        if r.status != "ok":
            failed.setdefault((r.agent, r.problem_id), []).append(r)
    if failed:
        print(f"{len(failed)} failed (agent, problem) pairs; rerun with --retry-failed to "
              "recompute only them:", file=sys.stderr)
    for (agent, pid), group in sorted(failed.items()):
        taus = ", ".join(str(r.tau) for r in group)
        print(f"  FAILED {agent} {pid} (tau {taus}): {group[0].error}", file=sys.stderr)
    return 1 if failed and not keep_going else 0


def _compiling(args, summary: run_lib.SweepSummary, rows) -> str:
    """How much of the run's time went to compiling, where every row was computed by it."""
    if summary.reused:
        return ""
    per_problem = {r.problem_id: r.compile_seconds for r in rows if r.status == "ok"}
    total = sum(per_problem.values())
    alone = args.units_at_once == 1 and args.workers == 1 and args.backend == "local"
    return (f" ({total:.1f} s of it compiling)" if alone else
            f" ({total:.1f} s compiling, added up over the units run side by side)")


def run(args) -> int:
    """`run`: one agent config on a sweep; a line per problem and an aggregate line."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    if args.output:
        checks.output_file(args.output, "--output")
    start = time.perf_counter()
    summary, problems = _compute(args, [config], f"agent {args.agent}: {config}")
    seconds = time.perf_counter() - start
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = store.run_rows(args.agent, [config], problems, [args.estimator], args.seed)
        if args.output:
            store.to_csv(args.output, rows, spreadsheet_safe=True)
    taus = sorted({t for p in problems for t in p.taus})
    print(run_report.problem_table(rows, taus))
    print(run_report.aggregate_line(rows, problems))
    print(f"time: {seconds:.1f} s{_compiling(args, summary, rows)}; {summary.computed} rows "
          f"computed, {summary.reused} reused from {args.db}")
    if args.output:
        print(f"wrote {len(rows)} rows to {args.output}")
    return _report_failures(rows, args.keep_going)


def sweep(args) -> int:
    """`sweep`: every config of an agent's sweep into the store; the failed rows listed."""
    spec = registry.get_agent(args.agent)
    configs = list(spec.configs(args.configs))
    problems = options.sweep_problems(args)
    start = time.perf_counter()
    which = "" if args.configs == registry.PAPER_SWEEP else f" ({args.configs})"
    summary, _ = _compute(args, configs, f"sweep {args.agent}: {len(configs)} configs{which} x "
                                         f"{len(problems)} problems ({args.sweep}) into {args.db}")
    print(f"done in {time.perf_counter() - start:.1f} s: {summary.computed} rows computed, "
          f"{summary.reused} reused, {summary.failed} failed")
    with store_lib.ResultsStore(args.db, create=False) as store:
        failed = store.run_rows(args.agent, configs, list(problems.values()), [args.estimator],
                                args.seed, status="failed")
        rows = [r for r in store.rows() if r.agent == args.agent]
    _print_ranking(args, configs, rows, problems)
    return _report_failures(failed, args.keep_going)


def _print_ranking(args, configs: Sequence[Any], rows, problems) -> None:
    """The sweep's configs, best first: most problems covered, then the lowest aggregate
    loss (the order `leaderboard` tunes by), each with what it changes from the default."""
    hashes = {configs_lib.config_hash(args.agent, c) for c in configs}
    records = [r for r in scoring.score_candidates(rows, problems)
               if r["config_hash"] in hashes and r["agent_seed"] == args.seed
               and r["estimator"] == args.estimator]
    if not records:
        return
    loss = records[0]["metric"]
    records.sort(key=lambda r: (-r["problems"], r[f"{loss}_agg"]))
    taus = sorted({t for p in problems.values() for t in p.taus})
    for rank, r in enumerate(records, 1):
        r["rank"] = rank
        r["changes"] = configs_lib.config_changes(r["config"], registry.get_agent(
            args.agent).default)
    print(f"\n{args.agent}'s configs on {args.sweep}, best first (most problems, then the "
          f"lowest {loss}_agg):")
    print(scoring.format_records(records, "table", (
        "rank", *(f"{loss}_{t}" for t in taus), f"{loss}_agg", "problems",
        "seconds_per_problem", "config_hash", "changes")))


def _diagnose_problem(args):
    """The problem ``--problem`` names: in the command's sweep (or file), else in the paper
    sweep, whose ids every synthetic sweep shares."""
    problems = options.sweep_problems(args)
    if args.problem not in problems and not args.dataset:
        problems = {**problems_lib.get_sweep("paper"), **problems}
    if args.problem not in problems:
        raise ValueError(f"unknown problem {args.problem!r}; see `neural-testbed problems "
                         f"--sweep {args.sweep}`")
    if args.taus is not None:  # a paper problem too is diagnosed at the taus asked for
        return dataclasses.replace(problems[args.problem], taus=options.parse_taus(args.taus))
    return problems[args.problem]


def _print_diagnostics(args, problem, records) -> None:
    """The rows' KL, accuracy and ECE, then every diagnostic, a column per row."""
    metric = "d_KL" if problem.metric == "kl" else "NLL"
    print(f"{args.agent} on {args.problem} (T = {problem.num_train}, N = {problem.num_test}, "
          f"M = {problem.num_samples})")
    header = ["tau", "estimator", metric, "se", "accuracy", "ECE"]
    table = [[r.tau, r.estimator, *(f"{v:.4f}" for v in r.estimate(problem.metric)),
              f"{r.accuracy:.3f}", f"{r.ece:.3f}"] for r, _ in records]
    print(scoring.format_records([dict(zip(header, line)) for line in table], "table", header))
    print("\ndiagnostics (uncertainties are traces of K x K matrices, per input; AUD and "
          "rejection use the top-class confidence rescaled from [1/K, 1] to [0, 1]):")
    names = ["metric"] + [f"tau={r.tau}" + ("" if r.estimator == args.estimator
                                            else f" ({r.estimator})") for r, _ in records]
    lines = [dict(zip(names, [name] + ["n/a" if rec[name] is None else f"{rec[name]:.4g}"
                                       for _, rec in records]))
             for name in diagnostics_report.METRICS]
    print(scoring.format_records(lines, "table", names))


def diagnose(args) -> int:
    """`diagnose`: one agent config on one problem, its diagnostics and their figures."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    drawing = figures.load("diagnostics")
    checks.output_dir(args.out, "--out")
    problem = _diagnose_problem(args)
    if problem.target == "regression":
        raise ValueError(f"diagnose covers classification problems; {args.problem} is a "
                         "regression problem, whose rows carry the metacorrelation: "
                         "`neural-testbed leaderboard --metrics metacorrelation`")
    _compute(args, [config], f"agent {args.agent}: {config}; problem {args.problem}",
             problems=[problem])
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = store.run_rows(args.agent, [config], [problem],
                              [args.estimator, "monte_carlo"], args.seed)
    records = [(r, drawing.record_of(r)) for r in rows if r.status == "ok"]
    if not records or any(record is None for _, record in records):
        print(f"no diagnostics stored for {args.agent} on {args.problem} (rows written before "
              "they existed): rerun with --recompute", file=sys.stderr)
        return _report_failures(rows, args.keep_going) or 1
    _print_diagnostics(args, problem, records)
    row, record = records[0]
    title = f"{args.agent} on {args.problem}, tau = {row.tau}"
    for path in drawing.save_diagnostic_figures(record, args.out, title=title):
        print(f"wrote {path}")
    return _report_failures(rows, args.keep_going)


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"run": _add_run, "sweep": _add_sweep, "diagnose": _add_diagnose}
