"""`leaderboard`, `compare`, `plot` and `correlate`: the commands that score the
stored rows (and the published baseline results)."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from neural_testbed import base
from neural_testbed.agents import registry
from neural_testbed.cli import checks, figures, options, tables
from neural_testbed.diagnostics import report as diagnostics_report
from neural_testbed.leaderboard import configs, correlation, counted, panels, scoring, studies
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import store as store_lib

# --metrics names that stand for several columns (ece and accuracy are always shown).
_METRIC_SHORTHANDS = {"ece": (), "accuracy": (),
                      "aud": ("aud_ood_aleatoric", "aud_ood_epistemic", "aud_ood_total")}


def _board_columns(loss: str, taus: Sequence[int]) -> tuple[str, ...]:
    """The leaderboard table's columns: per tau of the sweep, the loss (kl or nll), its
    standard error, normalised and its standard error; then the aggregate and the rest."""
    per_tau = tuple(f"{loss}_{tau}{suffix}" for tau in taus
                    for suffix in ("", "_stderr", "_norm", "_norm_stderr"))
    return ("agent", "source", *per_tau, f"{loss}_agg", "accuracy", "ece",
            "seconds_per_problem", "problems", "of", "health", "clipped", "flag", "metric",
            "rules", "selection", "config_hash", "changes")


def _add_leaderboard(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "leaderboard", parents=[g.common, g.db, g.sweep, g.fmt],
        help="score the agents in the store",
        description="Per agent: d_KL^1 and d_KL^100 (mean over the sweep's problems, with "
                    "standard errors), normalised by the baseline's, d_KL^agg = d_KL^1 + "
                    "d_KL^100 / 100, accuracy, ECE, seconds per problem, the chosen config and "
                    "the problems covered.")
    parser.add_argument("--tuning", default="global", choices=list(scoring.TUNINGS),
                        help="global: one config per agent minimising d_KL^agg; per-setting: the "
                             "best config per (temperature, T), as the paper's Figure 2")
    parser.add_argument("--normalise-by", "--baseline", dest="normalise_by", default=None,
                        metavar="AGENT",
                        help="the agent every KL is divided by (--baseline is the older name): "
                             "default uniform on the sweeps of the reference's current protocol "
                             "(classification, classification-quick), as its leaderboard does, "
                             "and mlp on the 2021 paper's, as the paper does")
    parser.add_argument("--floor", metavar="AGENT",
                        help="also each agent's loss minus this agent's (its default config), "
                             "paired by problem, with its stratified standard error: with hmc, "
                             "the Bayes-optimal floor, what better inference could still gain")
    parser.add_argument("--rules", default="ours", choices=list(scoring.RULES),
                        help="; ".join(f"{k}: {v}" for k, v in scoring.RULES.items())
                        + " (default: ours)")
    parser.add_argument("--wide", action="store_true",
                        help="every column, each standard error in its own (by default the "
                             "terminal table shows what fits the terminal's width)")
    parser.add_argument("--metrics", default="", metavar="NAME,...",
                        help="add columns of diagnostics (means over the problems that have "
                             "them, from each problem's smallest tau, with stratified standard "
                             "errors): any of " + ", ".join(diagnostics_report.ROW_METRICS)
                             + "; aud for the three aud_ood_* (ece and accuracy are always "
                             "shown; see `diagnose`); and from the results `tal` and `probe` "
                             "stored for the chosen config: tal (Wang et al.'s TAL score: "
                             "BatchMIG's test log-likelihood after the first round minus "
                             "random's on the same problem; higher is better), self_certainty "
                             "(Grover et al.'s; lower is better)")
    parser.add_argument("--with-baselines", action="store_true",
                        help="also rank the published baseline results shipped with the "
                             "package (each agent's default config) of every agent your store "
                             "has no rows of on the sweep; works without a store")
    parser.add_argument("--selection", default="same", choices=list(scoring.SELECTIONS),
                        help="same: choose configs and report on every problem (default; "
                             "flatters agents with large sweeps); held-out: choose on the first "
                             "half of each setting's seeds, report on the other half")
    parser.set_defaults(handler=leaderboard)


def _add_compare(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "compare", parents=[g.common, g.db, g.sweep, g.fmt],
        help="paired comparison of an agent against baselines",
        description="First, per baseline and tau, the mean KL difference agent - baseline "
                    "over every problem of the sweep, paired by problem, with its standard "
                    "error (stratified by (temperature, T)) and a two-sided t-test p-value "
                    "(df = pairs - settings); then the same per (temperature, T) and tau, "
                    "with a paired t-test verdict at the 5% level. Each agent uses its "
                    "globally tuned config. With --metric, the same for another per-problem "
                    "value, over the problems where both agents have one. A baseline your "
                    "store has no rows of on the sweep is taken from the published baseline "
                    "results shipped with the package (its default config), and the output "
                    "says so.")
    parser.add_argument("--agent", required=True, help="the agent to compare")
    parser.add_argument("--baseline", action="append", default=None,
                        help="a baseline agent; repeatable (default: mlp)")
    parser.add_argument("--selection", default="same", choices=list(scoring.SELECTIONS),
                        help="same: choose configs and compare on every problem (default); "
                             "held-out: choose on the first half of each setting's seeds, "
                             "compare on the other half")
    parser.add_argument("--metric", default="loss", metavar="NAME",
                        help="what is compared: loss (default: d_KL on the testbed, the NLL "
                             "on real data; lower is better; kl or nll name it too), "
                             "metacorrelation, xll (regression rows; higher is better), tal "
                             "(stored by `tal`, see leaderboard --metrics; higher is better) "
                             "or self_certainty (stored by `probe`; lower is better)")
    parser.set_defaults(handler=compare)


def _add_plot(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "plot", parents=[g.common, g.db, g.sweep],
        help="save the paper's figures as PNG and PDF files",
        description="Save Figure 2 (normalised KL per agent), Figures 8/9 (KL against T, "
                    "tau = 1 and 100), Figure 10 (normalised KL against time) from the store, "
                    "and Figure 7 (ensemble+ prior functions against mlp) where the store "
                    "holds ensemble+ configs with two or more prior functions; "
                    "with --agent and --problem, also Figure 5 (the environment beside 4 "
                    "sampled members of the agent).")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for the figures (each a PNG and a PDF beside it)")
    parser.add_argument("--agent", help="agent for Figure 5 (trained with its default config)")
    parser.add_argument("--problem", default="classification_2d/97",
                        help="problem id for Figure 5 (default: classification_2d/97, "
                             "temperature 0.1, T = 10)")
    parser.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[],
                        metavar="KEY=VALUE", help="hyperparameters for the Figure 5 agent")
    parser.add_argument("--with-baselines", action="store_true",
                        help="also draw the published baseline results (see leaderboard "
                             "--with-baselines); works without a store")
    parser.add_argument("--real-sweep", choices=["real", "real-quick"],
                        help="also Figure 6b (figure6b.png): each config's score on this real-data "
                             "sweep against its score on --sweep, for every agent with rows on "
                             "both (see `correlate`)")
    parser.set_defaults(handler=plot)


def _add_correlate(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "correlate", parents=[g.common, g.db, g.fmt],
        help="correlate agents' testbed and real-data scores across configs (Figure 6)",
        description="Per agent and data regime (low: T in {1, 10}; high: the largest T), the "
                    "Pearson correlation across the agent's configs between its score on a "
                    "synthetic sweep and its score on a real-data sweep, with 5th and 95th "
                    "bootstrap percentiles (problems resampled within each stratum). A score "
                    "is the mean over taus and problems of the config's KL (NLL on real data) "
                    "divided by the baseline's default config's on the same problem and tau.")
    parser.add_argument("--agent", action="append", required=True,
                        help="an agent with results in the store; repeatable")
    parser.add_argument("--baseline", default="mlp",
                        help="registered agent whose default config normalises every value "
                             "(default: mlp)")
    parser.add_argument("--synthetic-sweep", default="quick", choices=list(problems_lib.SWEEPS),
                        help="the testbed sweep (default: quick)")
    parser.add_argument("--real-sweep", default="real-quick", choices=list(problems_lib.SWEEPS),
                        help="the real-data sweep (default: real-quick)")
    parser.add_argument("--num-bootstrap", type=int, default=1000, metavar="B",
                        help="bootstrap draws (default: 1000)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="also write Figure 6b (real against testbed scores in the high "
                             "data regime, one point per config) to this PNG file")
    parser.set_defaults(handler=correlate)


def _study_metrics(args, names: Sequence[str], problems: Mapping[str, Any]):
    """The per-problem values of the study metrics among ``names`` (see
    :func:`studies.per_problem_metrics`) and notes, or None and no notes where none is
    asked for."""
    if not set(names) & set(studies.METRICS):
        return None, []
    with store_lib.ResultsStore(args.db, create=False) as store:
        records = store.studies()
    return studies.per_problem_metrics(records, problems)


def _board_metrics(text: str) -> list[str]:
    """The columns ``--metrics`` asks for, shorthands expanded; unknown names refused."""
    asked = [m for m in text.split(",") if m]
    allowed = (*_METRIC_SHORTHANDS, *diagnostics_report.ROW_METRICS, *studies.METRICS)
    unknown = [m for m in asked if m not in allowed]
    if unknown:
        raise ValueError(f"unknown --metrics {', '.join(unknown)}; allowed: "
                         + ", ".join(allowed))
    return list(dict.fromkeys(name for m in asked for name in _METRIC_SHORTHANDS.get(m, (m,))))


def _config_changes(agent: str, config: str) -> str:
    """The fields of a stored config that differ from the agent's default here."""
    spec = registry.AGENTS.get(agent)
    return configs.config_changes(config, None if spec is None else spec.default)


def leaderboard(args) -> int:
    """`leaderboard`: every agent's chosen config, scored on the sweep."""
    problems = options.sweep_problems(args)
    rows, notes = counted.counted_rows(store_lib.rows_to_score(args.db, args.with_baselines),
                                       problems, None if args.with_baselines else ())
    normaliser = args.normalise_by or scoring.default_normaliser(problems)
    if normaliser not in registry.AGENTS:  # a registered agent may simply have no rows
        checks.agent_in_store(normaliser, rows, args.db, "--normalise-by")
    metrics = _board_metrics(args.metrics)
    study_values, study_notes = _study_metrics(args, metrics, problems)
    if args.floor and args.floor not in registry.AGENTS:
        checks.agent_in_store(args.floor, rows, args.db, "--floor")
    records, warnings = scoring.score_agents(rows, problems, args.tuning, normaliser,
                                             args.selection, study_values, rules=args.rules,
                                             floor=args.floor)
    if not records:
        raise store_lib.StoreError(f"{args.db!r} has no successful results for the "
                                   f"{args.sweep!r} sweep")
    options.print_notes(args, [*notes, *study_notes, *warnings])
    # On stdout only for the terminal table: CSV and Markdown carry a selection column.
    print(tables.wrapped(f"tuning: {args.tuning}; selection: {args.selection}: "
                         f"{scoring.SELECTIONS[args.selection]}; rules: {args.rules}: "
                         f"{scoring.RULES[args.rules]}", "  "),
          file=options.notes_stream(args))
    for record in records:
        record["changes"] = _config_changes(record["agent"], record["config"])
        for name in metrics:  # a study metric with no record stored for any agent
            record.setdefault(name, float("nan"))
            record.setdefault(f"{name}_stderr", float("nan"))
    loss = records[0]["metric"]  # the columns say which: kl_1 or nll_1
    taus = sorted({t for p in problems.values() for t in p.taus})
    floor = [f"{loss}_{tau}_above_floor" for tau in taus] if args.floor else []
    if args.format == "table" and not (args.wide or args.verbose):
        _print_fitted_board(records, loss, taus, metrics, normaliser, floor, args.floor)
        return 0
    board = _board_columns(loss, taus)
    board = board[:2] + tuple(c for f in floor for c in (f, f"{f}_stderr")) + board[2:]
    columns = (board[:-1] + tuple(c for m in metrics for c in (m, f"{m}_stderr"))
               + board[-1:] + (("config",) if args.verbose else ()))
    print(scoring.format_records(records, args.format, columns))
    return 0


def _print_fitted_board(records: Sequence[dict[str, Any]], loss: str, taus: Sequence[int],
                        metrics: Sequence[str], normaliser: str, floor: Sequence[str] = (),
                        floor_agent: str | None = None) -> None:
    """The leaderboard as a terminal shows it by default: each value with its standard
    error in one cell, the columns that fit the terminal's width (by priority: scores,
    then coverage and health, then the rest), and the names of those left out."""
    def with_errors(name):
        return [scoring.plus_minus(r.get(name), r.get(f"{name}_stderr")) for r in records]

    columns = [("agent", tables.cells(records, "agent"), 0)]
    columns += [(f"{loss}_{tau}", with_errors(f"{loss}_{tau}"), 1) for tau in taus]
    columns += [(name, with_errors(name), 1) for name in floor]
    columns += [(f"{loss}_{tau}_norm", with_errors(f"{loss}_{tau}_norm"), 4) for tau in taus]
    columns += [(m, with_errors(m), 4) for m in metrics]
    columns += [("source", tables.cells(records, "source"), 5),
                ("problems", [f"{r['problems']}/{r['of']}" for r in records], 3),
                ("health", tables.cells(records, "health"), 6),
                ("flag", tables.cells(records, "flag"), 2),
                ("changes", [tables.truncated(c, 30) for c in tables.cells(records, "changes")],
                 7)]
    columns += [(c, tables.cells(records, c), 8) for c in
                (f"{loss}_agg", "accuracy", "ece", "seconds_per_problem", "config_hash")]
    table, left_out = tables.fitted(columns, tables.width())
    print(table)
    legend = (f"cells: mean±standard error; {loss}_<tau>_norm: divided by {normaliser}'s "
              "default config" + (f"; {loss}_<tau>_above_floor: minus {floor_agent}'s, paired "
                                  "by problem" if floor_agent else "") + (f"; not shown at this width: {', '.join(left_out)} (--wide "
                                  "shows every column)" if left_out else ""))
    print(tables.wrapped(legend))


def _print_pooled(args, pooled: list[dict[str, Any]], what: str, diff: str,
                  taus: tuple[str, ...], where: str) -> None:
    """The pooled comparisons, with a note where a difference is within its error."""
    print(tables.wrapped(f"{args.agent} - baseline{what}, pooled over the {args.sweep} sweep "
                         "(stratified by (temperature, T); two-sided t-test, df = pairs - "
                         "settings):"))
    print(tables.fitted_records(pooled, ("baseline", "source", *taus, diff, "stderr",
                                         "p_value", "pairs", "df", "verdict", "flag")))
    for r in pooled:
        if abs(r[diff]) < r["stderr"]:
            print(tables.wrapped(f"note: {where.format(tau=r.get('tau'))}{args.agent} and "
                                 f"{r['baseline']} differ by less than one standard error "
                                 f"({r[diff]:.4g} vs {r['stderr']:.4g}): more problems or "
                                 "seeds are needed to order them", "  "))


def _print_cells(args, cells: list[dict[str, Any]], baseline_names: Sequence[str], diff: str,
                 taus: tuple[str, ...], cell: str) -> None:
    """The comparisons per setting, and per baseline the count of significant ones."""
    where = [c for c in (*panels.COLUMNS, "num_train") if any(c in r for r in cells)]
    print("\n" + tables.wrapped(f"{args.agent} - baseline per ({', '.join(where)}) (paired "
                                "t-test, df = pairs - 1):"))
    print(tables.fitted_records(cells, ("baseline", "source", *where, *taus, diff, "stderr",
                                        "p_value", "pairs", "verdict", "flag")))
    for name in baseline_names:
        mine = [r for r in cells if r["baseline"] == name]
        better = sum(r["verdict"] == "better" for r in mine)
        worse = sum(r["verdict"] == "worse" for r in mine)
        print(tables.wrapped(f"{args.agent} vs {name}: significantly better in {better}, "
                             f"worse in {worse} of {len(mine)} {cell} cells (paired t-test, 5%)"))


def _print_comparison(args, records: list[dict[str, Any]],
                      baseline_names: Sequence[str]) -> None:
    """The terminal tables of `compare`: pooled, then per setting."""
    if args.metric in scoring.LOSSES:  # the rows' loss: d_KL, or the NLL on real data
        loss = records[0]["metric"] if records else "kl"
        what = "" if loss == "kl" else " in the NLL (real data)"
        diff, taus = f"{loss}_diff", ("tau",)
        where, cell = "at tau = {tau}, ", "(setting, tau)"
    else:
        higher = scoring.COMPARE_METRICS[args.metric]
        what = (f" in {args.metric} ({'higher' if higher else 'lower'} is better; pairs: "
                "the problems where both have a value)")
        diff, taus, where, cell = f"{args.metric}_diff", (), "", "setting"
    _print_pooled(args, [r for r in records if r["scope"] == "pooled"], what, diff, taus, where)
    _print_cells(args, [r for r in records if r["scope"] == "setting"], baseline_names, diff,
                 taus, cell)


def compare(args) -> int:
    """`compare`: an agent against baselines, paired by problem."""
    if args.metric not in scoring.COMPARE_METRICS:
        raise ValueError(f"unknown --metric {args.metric!r}; allowed: "
                         + ", ".join(scoring.COMPARE_METRICS))
    problems = options.sweep_problems(args)
    baseline_names = args.baseline or ["mlp"]
    rows = store_lib.rows_to_score(args.db)  # the store alone: no agent need be registered
    checks.agent_in_store(args.agent, rows, args.db, "--agent")
    rows, notes = counted.counted_rows(rows, problems, baseline_names)
    have = {r.agent for r in rows}
    for name in baseline_names:
        if name not in have:
            raise ValueError(f"--baseline {name!r}: neither {args.db!r} nor the published "
                             f"baseline results have rows of it on the {args.sweep} sweep "
                             f"(run `neural-testbed run --agent {name} --sweep {args.sweep}`)")
    study_values, study_notes = _study_metrics(args, [args.metric], problems)
    options.print_notes(args, [*notes, *study_notes])
    records = scoring.compare_agents(rows, problems, args.agent, baseline_names, args.selection,
                                     args.metric, study_values)
    print(tables.wrapped(f"selection: {args.selection}: {scoring.SELECTIONS[args.selection]}"),
          file=options.notes_stream(args))
    if args.format != "table":
        print(scoring.format_records(records, args.format))
    else:
        _print_comparison(args, records, baseline_names)
    return 0


def _figure5(args, rows):
    """The Figure 5 agent and problem, checked before any figure is drawn; None without
    --agent."""
    if not args.agent:
        return None
    spec = checks.registered_agent(args.agent, rows)
    config = registry.parse_overrides(spec, args.overrides)
    paper = problems_lib.get_sweep("paper")
    if args.problem not in paper:
        raise ValueError(f"unknown problem {args.problem!r}; see `neural-testbed problems "
                         "--sweep paper`")
    problem = paper[args.problem]
    return spec.make(config, base.Shapes.of(problem)), problem


def _testbed_vs_real(args, rows, problems, real):
    """Figure 6b's records, computed before any figure is drawn (a bad pairing is one
    line); None without --real-sweep."""
    if not args.real_sweep:
        return None
    options.remember_datasets(args, real)
    on_both = ({r.agent for r in rows if r.problem_id in problems}
               & {r.agent for r in rows if r.problem_id in real})
    if not on_both:
        raise ValueError(f"no agent has rows on both {args.sweep} and {args.real_sweep} "
                         f"in {args.db}")
    return correlation.correlate(rows, problems, real, sorted(on_both))


def plot(args) -> int:
    """`plot`: the paper's figures from the store, as PNG and PDF files in --out."""
    plots = figures.load("leaderboard")
    checks.output_dir(args.out, "--out")
    problems = options.sweep_problems(args)
    real = problems_lib.get_sweep(args.real_sweep) if args.real_sweep else {}
    rows, notes = counted.counted_rows(store_lib.rows_to_score(args.db, args.with_baselines),
                                       {**problems, **real},
                                       None if args.with_baselines else ())
    options.print_notes(args, notes)
    figure5 = _figure5(args, rows)
    records = _testbed_vs_real(args, rows, problems, real)
    out = pathlib.Path(args.out)
    paths = plots.save_figures(rows, problems, args.out)
    diagnostics = figures.load("diagnostics")
    if diagnostics.tau_curves(rows, problems):
        paths.append(diagnostics.figure_kl_per_tau(rows, problems, out / "tau_curve.png"))
    if records is not None:
        paths.append(plots.figure_testbed_vs_real(records, out / "figure6b.png"))
    if figure5 is not None:
        agent, problem = figure5
        paths.append(plots.figure_agent_samples(jax.random.key(0), agent, problem,
                                                out / "figure5.png"))
    for path in paths:
        print(f"wrote {path} (and {path.with_suffix('.pdf').name})")
    return 0


def correlate(args) -> int:
    """`correlate`: per agent, testbed against real-data scores across its configs."""
    if args.plot:  # checked before any work
        plots = figures.load("leaderboard")
        checks.output_file(args.plot, "--plot")
    agents = list(dict.fromkeys(args.agent))
    synthetic = problems_lib.get_sweep(args.synthetic_sweep)
    real = problems_lib.get_sweep(args.real_sweep)
    options.remember_datasets(args, real)
    rows = store_lib.rows_to_score(args.db)
    for name in agents:
        checks.agent_in_store(name, rows, args.db, "--agent")
    rows, row_notes = counted.counted_rows(rows, {**synthetic, **real})
    options.print_notes(args, row_notes)
    records = correlation.correlate(rows, synthetic, real, agents, args.baseline,
                                    num_bootstrap=args.num_bootstrap, seed=0)
    notes = options.notes_stream(args)
    print(f"synthetic: {args.synthetic_sweep}; real: {args.real_sweep}; "
          + correlation.describe(args.baseline, args.num_bootstrap, seed=0), file=notes)
    print(scoring.format_records(records, args.format, correlation.COLUMNS))
    if args.plot:
        print(f"wrote {plots.figure_testbed_vs_real(records, args.plot, baseline=args.baseline)}",
              file=notes)
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"leaderboard": _add_leaderboard, "compare": _add_compare, "plot": _add_plot,
           "correlate": _add_correlate}
