"""`probe`, `tal` and `xll`: the regression studies (Grover et al.'s probes, Wang et
al.'s transductive active learning and cross-normalized log-likelihood)."""

from __future__ import annotations

import functools
import sys

from neural_testbed import active, base
from neural_testbed.agents import registry
from neural_testbed.cli import checks, figures, options
from neural_testbed.leaderboard import probing, run_report, scoring, study_runs, xll_scores
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import checks as run_checks
from neural_testbed.run import options as run_options


def _add_probe(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "probe", parents=[g.common, g.db, g.one_agent, g.study],
        help="Grover et al.'s probes of an agent's predictive uncertainty (regression)",
        description="Train an agent on each regression problem of a sweep (as `run` does) "
                    "and compute, from its belief samples plus the known noise (s = the "
                    "predictive standard deviation of a target): self-certainty (mean over "
                    "the training inputs of (s - sigma)^2), the MSE of the mean (mean over "
                    "pool inputs of (f - mean)^2), inclusion@k (fraction of pool "
                    "inputs with |f - mean| < k s, beside what the agent's belief expects), "
                    "uncertainty-increase@delta (pool inputs in equal-count bins of the "
                    "distance to the nearest training input: the fraction whose s exceeds s "
                    "there) and uncertainty-reduction@k (mean |s| change after training again "
                    "with k more pool pairs). Prints means ± standard errors per stratum "
                    "(d, noise variance, T). Each problem's probes are stored in --db as soon "
                    "as they are computed; a rerun with the same settings reuses them (Ctrl-C "
                    "and rerun to resume).")
    parser.add_argument("--sweep", default="regression-quick", choices=list(problems_lib.SWEEPS),
                        help="a regression sweep: regression-quick (8 problems, default), "
                             "regression (180) or regression-wang (30)")
    parser.add_argument("--problems", nargs="+", metavar="ID",
                        help="only these problem ids of the sweep (default: all of them)")
    parser.add_argument("--inclusion-k", default="1,2,3", metavar="K1,K2,...",
                        help="k of inclusion@k, numbers > 0 (default: 1,2,3)")
    parser.add_argument("--reduction-k", default="1,2,5,10", metavar="K1,K2,...",
                        help="pairs added for uncertainty-reduction@k, integers >= 1 up to the "
                             "pool size; the agent trains once more per k (default: 1,2,5,10)")
    parser.add_argument("--bins", type=int, default=5, metavar="B",
                        help="equal-count distance bins of uncertainty-increase; delta is a "
                             "bin's mean distance (default: 5)")
    parser.add_argument("--num-samples", type=int, default=1000, metavar="M",
                        help="belief samples per input (default: 1000)")
    parser.add_argument("--seed", type=int, default=0,
                        help="agent seed, folded into each problem's key as in `run` (default: 0)")
    parser.add_argument("--per-problem", action="store_true",
                        help="one block (or record) per problem instead of per stratum")
    parser.add_argument("--format", default="text", choices=["text", "markdown", "csv"],
                        help="text (default): a block per stratum; markdown, csv: one record "
                             "per (stratum, probe, parameter)")
    parser.add_argument("--out", metavar="DIR",
                        help="also write variance_by_distance.png, self_certainty.png, "
                             "mse.png, inclusion.png and uncertainty_reduction.png here")
    parser.set_defaults(handler=probe)


def _add_tal(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "tal", parents=[g.common, g.db, g.one_agent, g.fmt, g.study],
        help="transductive active learning with the agent choosing the queries (Wang et al.)",
        description="Per problem and selection method, rounds of queries: each round the agent "
                    "is trained on the current training set, its predictive covariance over the "
                    "pool and the test inputs picks --batch pool inputs (BatchMIG: greedy batch "
                    "mutual information with the test inputs; MIG: the top single-point "
                    "information; TIG: the top predictive variances; random), and their noisy "
                    "labels join the training set. Prints per round and method the exact "
                    "posterior's mean test log-likelihood (the prediction model, the same for "
                    "every agent), mean and standard error over the problems, each method's "
                    "paired difference from random after the last round and the agent's "
                    "metacorrelation at the test inputs before any query. Each problem's "
                    "results are stored in --db as soon as they are computed; a rerun with "
                    "the same settings reuses them (Ctrl-C and rerun to resume).")
    parser.add_argument("--sweep", default=None, choices=list(problems_lib.SWEEPS),
                        help="a regression sweep; its problems' test inputs are the first "
                             "num_probes pool inputs, the pool the rest (default: regression-wang, "
                             "500 test and 200 pool inputs); on real-regression the test rows "
                             "and pool rows of each split, the prediction model a GP fitted to "
                             "its training and pool rows")
    options.add_regression_dataset(parser)
    parser.add_argument("--problems", default=None, metavar="N|ID,...",
                        help="N problems in seed order (seed 0 of every setting first), or "
                             "comma-separated problem ids (default: the whole sweep)")
    parser.add_argument("--method", default=",".join(active.METHODS), metavar="M,...",
                        help="selection methods, comma-separated, of " + ", ".join(active.METHODS)
                             + " (default: all)")
    parser.add_argument("--rounds", type=int, default=active.TALSettings.num_rounds, metavar="R",
                        help="rounds of queries (default: 10)")
    parser.add_argument("--batch", type=int, default=None, metavar="B",
                        help="pool inputs queried per round (default: 7, 1%% of the 5d + 700 "
                             "points of regression-wang, as Wang et al.'s code; on real data 1%% "
                             "of the dataset's rows, as the paper)")
    parser.add_argument("--samples", type=int, default=active.TALSettings.num_samples,
                        metavar="M", help="belief samples for the selection covariance of an agent "
                                          "with more than M members or random indices "
                                          "(default: 1000)")
    parser.add_argument("--seed", type=int, default=0,
                        help="agent seed, folded into each problem's agent key as in `run` "
                             "(default: 0)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="also draw test log-likelihood against labels queried, one line per "
                             "method, to this PNG file")
    parser.set_defaults(handler=tal)


def _add_xll(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "xll", parents=[g.common, g.db, g.fmt],
        help="XLL and XLLR across agents on a regression sweep (Wang et al.)",
        description="Wang et al.'s cross-normalized log-likelihood (Algorithm 2) from the "
                    "predictive means and covariances at the probes that each regression row "
                    "stores (no retraining): on every problem all named agents have them for, "
                    "each agent serves once as the reference, whose means and variances "
                    "replace every agent's own and whose most correlated probes form the "
                    "batches; per agent, the mean XLL and XLLR (its rank, 0 = best) over the "
                    "references and problems, with stratified standard errors. Each agent "
                    "uses its globally tuned config, as the leaderboard.")
    parser.add_argument("--agent", action="append", required=True,
                        help="an agent with regression rows in the store; repeat for each (2 or "
                             "more)")
    parser.add_argument("--sweep", default=None, choices=list(problems_lib.SWEEPS),
                        help="a regression sweep (default: regression-quick), e.g. "
                             "real-regression")
    options.add_regression_dataset(parser)
    parser.add_argument("--batch-size", type=int, default=5, metavar="B",
                        help="test points per batch: an anchor and its B - 1 most correlated "
                             "probes under the reference (default: 5, the paper's)")
    parser.set_defaults(handler=xll)


def _stored_note(reused: int, db: str) -> str:
    return f", {reused} of them stored in {db} (reused)" if reused else ""


def _computed_line(run: study_runs.StudyRun, db: str) -> str:
    """The last lines of `tal` and `probe`: time, then what was computed and reused."""
    per_problem = (f" ({run.seconds / run.computed:.1f} s per problem computed, compilation "
                   "included)" if run.computed else "")
    return (f"time: {run.seconds:.1f} s{per_problem}\n"
            f"{run.computed} problems computed, {run.reused} reused from {db}")


def _plus_minus(mean: float, stderr: float, spec: str) -> str:
    """``mean ± stderr``; the error is n/a for a single problem."""
    return f"{mean:{spec}} ± {run_report.number(stderr, '.4f')}"


def _probe_problems(args) -> list[base.Problem]:
    """The sweep's problems, or those ``--problems`` names (in the sweep's order)."""
    problems = problems_lib.get_sweep(args.sweep)
    if any(p.target == "regression" and p.metric != "kl" for p in problems.values()):
        raise ValueError(f"the probes compare an agent with the known function of a GP "
                         f"regression problem; {args.sweep} is real data (use --sweep "
                         "regression-quick, regression or regression-wang)")
    if not args.problems:
        return list(problems.values())
    unknown = [pid for pid in args.problems if pid not in problems]
    if unknown:
        raise ValueError(f"--problems: {', '.join(unknown)} not in the {args.sweep} sweep; see "
                         f"`neural-testbed problems --sweep {args.sweep}`")
    return [p for pid, p in problems.items() if pid in set(args.problems)]


def probe(args) -> int:
    """`probe`: the probes of one agent config on a regression sweep, per stratum."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    settings = probing.ProbeSettings(
        inclusion_ks=options.parse_list(args.inclusion_k, float, "--inclusion-k"),
        reduction_ks=options.parse_list(args.reduction_k, int, "--reduction-k"),
        num_bins=args.bins, num_samples=args.num_samples, agent_seed=args.seed)
    problems = _probe_problems(args)
    probing.check_problems(args.agent, problems, settings)
    if args.out:  # checked before any work
        drawing = figures.load("probes")
        checks.output_dir(args.out, "--out")
    notes = options.notes_stream(args, "text")
    run = study_runs.run_probes(
        args.db, args.agent, functools.partial(spec.make, config), config, problems, settings,
        recompute=args.recompute, progress=not args.quiet,
        announce=lambda reused: print(f"probe {args.agent}: {config}; {len(problems)} problems "
                                      f"({args.sweep})" + _stored_note(reused, args.db),
                                      file=sys.stderr))
    records = probing.summarise(run.results, settings, per_problem=args.per_problem)
    print(probing.describe(settings), file=notes)
    if args.format == "text":
        print(probing.format_text(records))
    else:
        columns = probing.PROBLEM_COLUMNS if args.per_problem else probing.COLUMNS
        print(scoring.format_records(records, args.format, columns))
    if args.out:
        summary = records if not args.per_problem else probing.summarise(run.results, settings)
        for path in drawing.save_probe_figures(run.results, summary, args.out, agent=args.agent):
            print(f"wrote {path}", file=notes)
    print(_computed_line(run, args.db), file=notes)
    return 0


def _tal_settings(args, spec: registry.AgentSpec, sweep) -> active.TALSettings:
    """The TAL settings of the command line, for a regression agent; ``--batch`` defaults
    to 1% of a real dataset's rows (Wang et al.), else to TALSettings' 7."""
    if "regression" not in spec.targets:
        raise ValueError(f"agent {args.agent!r} is not built for regression problems (it "
                         f"predicts {', '.join(spec.targets)}); tal needs a regression agent")
    methods = tuple(m.strip() for m in args.method.split(",") if m.strip())
    run_options.RunOptions(agent_seed=args.seed).check()
    batch = args.batch
    if batch is None:
        batch = min((getattr(p, "tal_batch_size", active.TALSettings.batch_size)
                     for p in sweep.values()), default=active.TALSettings.batch_size)
    return active.TALSettings(num_rounds=args.rounds, batch_size=batch,
                              num_samples=args.samples, methods=methods, agent_seed=args.seed)


def _tal_problems(args, name: str, sweep, settings: active.TALSettings) -> list[base.Problem]:
    """The problems of the sweep ``name`` (a regression sweep) that ``--problems`` picks."""
    if any(p.target != "regression" for p in sweep.values()):
        raise ValueError(f"tal needs a regression sweep; {name} holds classification "
                         "problems (try --sweep regression-wang)")
    try:
        problems = active.tal.pick_problems(sweep, args.problems)
    except ValueError as error:
        raise ValueError(f"--problems {error}") from None
    run_checks.check_exact_environment(args.agent, problems)
    active.tal.check_problems(problems, settings)
    return problems


def _print_tal_differences(args, results, settings: active.TALSettings, notes) -> None:
    """Each method's paired difference from random, after the first and the last round
    (the paper's TAL score is after one), then the agent's metacorrelation."""
    rounds = sorted({1, settings.num_rounds})
    methods = settings.methods
    for method in (m for m in methods if m != "random" and "random" in methods):
        differences = []
        for r in rounds:
            mean, stderr = active.tal.paired_difference(results, method, round_index=r)
            differences.append(f"{_plus_minus(mean, stderr, '+.4f')} after "
                               f"{r * settings.batch_size}")
        print(f"{method} - random: {', '.join(differences)} queries (paired over "
              f"{len(results)} problems)", file=notes)
    mean, stderr, count = active.tal.mean_metacorrelation(results)
    print(f"metacorrelation of {args.agent} at the test inputs before any query: "
          + (f"{_plus_minus(mean, stderr, '.4f')} over {count} problems" if count
             else "n/a (its belief samples do not vary, no method used it, or the data are "
                  "real: no exact posterior to compare with)"), file=notes)


def tal(args) -> int:
    """`tal`: rounds of queries chosen by one agent config, per method and round."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    name, sweep = options.regression_sweep(args, "regression-wang")
    settings = _tal_settings(args, spec, sweep)
    if args.out:  # checked before any work
        drawing = figures.load("tal")
        checks.output_file(args.out, "--out")
    problems = _tal_problems(args, name, sweep, settings)
    build = functools.partial(spec.make, config)
    if problems and not isinstance(build(base.Shapes.of(problems[0])), base.Agent):
        raise ValueError(f"agent {args.agent!r} trains outside JAX (a host agent); tal "
                         "retrains its selection model each round and needs a JAX agent")
    run = study_runs.run_tal(
        args.db, args.agent, build, config, problems, settings, recompute=args.recompute,
        progress=not args.quiet,
        announce=lambda reused: print(
            f"tal: agent {args.agent}: {config}; {len(problems)} problems of {name}; "
            f"{settings.num_rounds} rounds x {settings.batch_size} queries"
            + _stored_note(reused, args.db), file=sys.stderr))
    records = active.summarise(run.results)
    notes = options.notes_stream(args)
    model = ("the exact posterior" if all(p.metric == "kl" for p in problems) else
             "the GP fitted to each split's training and pool rows (the prediction model)")
    print(f"test log-likelihood of {model} after each round (mean and standard "
          f"error over {len(run.results)} problems), queries chosen by {args.agent}:", file=notes)
    columns = ["round", "queried"] + [c for m in settings.methods for c in (m, f"{m}_se")]
    print(scoring.format_records(records, args.format, columns))
    _print_tal_differences(args, run.results, settings, notes)
    if args.out:
        title = f"{args.agent} selecting on {name} ({len(run.results)} problems)"
        print(f"wrote {drawing.figure_tal(records, args.out, title)}", file=notes)
    print(_computed_line(run, args.db), file=notes)
    return 0


def xll(args) -> int:
    """`xll`: XLL and XLLR of several agents from their stored predictives."""
    agents = list(args.agent)
    name, problems = options.regression_sweep(args, "regression-quick")
    xll_scores.check_options(problems, agents, args.batch_size)
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = store.rows()
        if not rows:
            raise store_lib.StoreError(f"{args.db!r} holds no results yet")
        for agent in agents:
            checks.agent_in_store(agent, rows, args.db, "--agent")
        records, notes = xll_scores.xll_scores(store, problems, agents, args.batch_size,
                                               progress=True)
    out = options.notes_stream(args)
    print(f"sweep: {name}; " + xll_scores.describe(len(agents), args.batch_size),
          file=out)
    options.print_notes(args, notes, out)
    print(scoring.format_records(records, args.format, xll_scores.COLUMNS))
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"probe": _add_probe, "tal": _add_tal, "xll": _add_xll}
