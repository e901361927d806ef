"""Options and argument readers shared by several commands.

The option groups are parent parsers: a command names the groups it takes,
so an option reads the same in every command that has it.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from neural_testbed import generative
from neural_testbed.cli import tables
from neural_testbed.generative import datasets
from neural_testbed.leaderboard import notes as notes_lib
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.likelihood import kl
from neural_testbed.run import options as run_options

SPREADSHEET_NOTE = ("a text cell that a spreadsheet would run as a formula (one starting with "
                    "=, +, -, @, a tab or a carriage return, e.g. an agent's name) is written "
                    "with a leading single quote")


class _Given(argparse.Action):
    """Stores the value and notes that the option was given, so that a default is told
    apart from the same value asked for (``--sweep`` beside ``--dataset``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


@dataclasses.dataclass(frozen=True)
class Groups:
    """The option groups, as parent parsers: ``common`` (every command), ``db``,
    ``sweep`` (--sweep or --dataset), ``compute`` and ``scale`` (commands that compute
    rows), ``one_agent`` (--agent with --set), ``fmt`` (--format) and ``study``
    (`probe` and `tal`)."""

    common: argparse.ArgumentParser
    db: argparse.ArgumentParser
    sweep: argparse.ArgumentParser
    compute: argparse.ArgumentParser
    scale: argparse.ArgumentParser
    one_agent: argparse.ArgumentParser
    fmt: argparse.ArgumentParser
    study: argparse.ArgumentParser


def _group() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def _common() -> argparse.ArgumentParser:
    common = _group()
    common.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import a module (dotted name or .py file) that registers agents; "
                             "repeatable")
    common.add_argument("--verbose", action="store_true",
                        help="every note in full (by default their briefs share one line); "
                             "in `leaderboard`, also every column and each chosen config as "
                             "JSON")
    return common


def _db() -> argparse.ArgumentParser:
    db = _group()
    db.add_argument("--db", default=store_lib.DEFAULT_DB,
                    help=f"results store, an SQLite file (default: ./{store_lib.DEFAULT_DB})")
    return db


def _sweep() -> argparse.ArgumentParser:
    sweep_choice = _group()
    sweep_choice.add_argument(
        "--sweep", default="quick", choices=list(problems_lib.SWEEPS), action=_Given,
        help="problem sweep: " + "; ".join(
            f"'{name}' ({text})" for name, text in problems_lib.DESCRIPTIONS.items())
        + "; default: quick")
    sweep_choice.add_argument(
        "--dataset", metavar="FILE",
        help="your own data instead of --sweep: a .npz with arrays x_train, y_train, x_test, "
             "y_test, or a .csv with --label-column (split 80/20 with a fixed seed); problems "
             "FILE/i for T in {1, 10, 100, 1000, full} x 10 seeds, scored by NLL; with "
             "--target-column, regression data instead")
    sweep_choice.add_argument(
        "--label-column", metavar="NAME", help="the class-label column of a --dataset .csv")
    add_target_column(sweep_choice)
    return sweep_choice


def add_target_column(parser: argparse.ArgumentParser) -> None:
    """``--target-column NAME``: a --dataset file is regression data."""
    parser.add_argument(
        "--target-column", metavar="NAME",
        help="--dataset FILE is regression data: NAME is the target column of a .csv (every "
             "other column a numeric feature) or the target array of a .npz beside an array "
             "x; problems FILE/seed, 10 seeds each a 20/20/60 train/test/pool split (Wang et "
             "al.'s protocol), scored by NLL at tau in {1, 5}")


def add_regression_dataset(parser: argparse.ArgumentParser) -> None:
    """``--dataset FILE --target-column NAME``: a user's regression data (`xll`, `tal`)."""
    parser.add_argument("--dataset", metavar="FILE",
                        help="your own regression data instead of --sweep: a .csv or .npz "
                             "with --target-column")
    add_target_column(parser)


def regression_sweep(args, default: str) -> tuple[str, Mapping[str, Any]]:
    """(name, problems) of `xll` and `tal`: ``--dataset FILE --target-column NAME``'s
    regression problems, else ``--sweep``'s (``default`` when not given)."""
    if args.dataset:
        if args.sweep is not None:
            raise ValueError(f"--sweep {args.sweep} and --dataset {args.dataset} both name the "
                             "problems; give one of them")
        if not args.target_column:
            raise ValueError(f"--dataset {args.dataset} needs --target-column NAME (the "
                             "regression target)")
        return (pathlib.Path(args.dataset).name,
                generative.real_regression.file_problems(args.dataset, args.target_column))
    if args.target_column:
        raise ValueError("--target-column goes with --dataset FILE")
    name = args.sweep or default
    return name, problems_lib.get_sweep(name)


def _compute() -> argparse.ArgumentParser:
    compute = _group()
    compute.add_argument("--seed", type=int, default=0,
                         help="agent seed, folded into each problem's key: an integer from 0 to "
                              f"{run_options.MAX_AGENT_SEED} (default: 0)")
    compute.add_argument("--estimator", default="auto", choices=list(kl.ESTIMATORS),
                         help="joint log-likelihood estimator: monte_carlo (Algorithm 3), "
                              "partition (Algorithm 4), or auto = monte_carlo up to the "
                              "problem's max_monte_carlo_tau (9 on the 2021 sweeps, 10 on "
                              "the reference's current ones), partition above (default)")
    compute.add_argument("--taus", default=None, metavar="T1,T2,...",
                         help="evaluate each trained agent at these taus instead of its "
                              "problems' own (1 and 100 on the paper's sweeps, 1 and 10 on the "
                              "current ones), "
                              "e.g. 1,2,5,10,20,50,100 for `plot`'s d_KL^tau / tau curve (with "
                              "--estimator auto, the first tau >= 10 is also evaluated with "
                              "monte_carlo, stored as such)")
    compute.add_argument("--problems-per-batch", type=int, default=None,
                         metavar="N", dest="problems_per_batch",
                         help="problems trained together, a work unit (default: all those of "
                              "one shape, i.e. one T; smaller saves memory and saves results more "
                              "often; larger trains several T together where the agent pads: "
                              "fewer, larger programs, for a GPU with memory to spare). Not an "
                              "agent's minibatch size: set that with --set batch_size=B")
    compute.add_argument("--recompute", action="store_true",
                         help="recompute results already in the store, replacing them")
    compute.add_argument("--retry-failed", action="store_true",
                         help="recompute only the results stored as failed (and missing ones)")
    compute.add_argument("--keep-going", action="store_true",
                         help="exit with status 0 even if some problems failed")
    compute.add_argument("--quiet", action="store_true", help="no progress bar")
    return compute


def add_problem_ids(parser: argparse.ArgumentParser) -> None:
    """``--problems ID [ID ...]``: a handful of problems instead of a whole sweep."""
    parser.add_argument("--problems", nargs="+", default=None, metavar="ID", dest="problem_ids",
                        help="only these problems, e.g. classification_2d/17 classification/65: "
                             "ids of --sweep when it is given, else of any built-in sweep "
                             "(`neural-testbed problems --sweep S` lists them)")


def _scale() -> argparse.ArgumentParser:
    scale = _group()
    scale.add_argument("--workers", type=int, default=1, metavar="N",
                       help="local worker processes (default: 1, this process); with "
                            "--backend ray, the CPUs of the local Ray cluster")
    scale.add_argument("--units-at-once", type=int, default=None, metavar="N",
                       help="work units computed at the same time in this process (default: "
                            "2 on a CPU of 2 or more cores, where one unit keeps about one "
                            "core busy; 1 on a GPU). Each needs its own memory: 1 saves it")
    scale.add_argument("--backend", default="local", choices=["local", "ray"],
                       help="local (default), or ray: run work units as Ray tasks "
                            "(pip install 'neural-testbed[ray]')")
    scale.add_argument("--address", default=None,
                       help="address of an existing Ray cluster (default: start a local one "
                            "on this machine, loopback only, no dashboard)")
    scale.add_argument("--shard", default=None, metavar="I/N",
                       help="run only the I-th of N deterministic shares of the work, e.g. for "
                            "a batch-queue array job; combine the stores with `merge`")
    return scale


def _one_agent() -> argparse.ArgumentParser:
    one_agent = _group()  # run and diagnose: one agent config
    one_agent.add_argument("--agent", required=True,
                           help="registered agent name (see `neural-testbed agents`)")
    one_agent.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[],
                           metavar="KEY=VALUE",
                           help="change a hyperparameter of the agent's default config, "
                                "e.g. --set l2_weight_decay=0.1 adaptive_weight_scale=false")
    return one_agent


def _fmt() -> argparse.ArgumentParser:
    fmt = _group()
    fmt.add_argument("--format", default="table", choices=["table", "csv", "markdown"],
                     help="output format (default: table)")
    return fmt


def _study() -> argparse.ArgumentParser:
    study = _group()  # probe and tal: stored per problem
    study.add_argument("--recompute", action="store_true",
                       help="recompute problems already in the store, replacing them")
    study.add_argument("--quiet", action="store_true", help="no progress bar")
    return study


def groups() -> Groups:
    """A fresh set of the option groups, for one top-level parser."""
    return Groups(_common(), _db(), _sweep(), _compute(), _scale(), _one_agent(), _fmt(),
                  _study())


def print_notes(args, notes: Sequence[str], stream: IO[str] | None = None) -> None:
    """A command's notes (on stderr unless ``stream``): in full with --verbose or where
    there is one that fits the terminal's width, else their briefs on one line
    (:func:`notes.one_line`)."""
    stream = stream or sys.stderr
    whole = getattr(args, "verbose", False) or (
        len(notes) == 1 and len(f"note: {notes[0]}") <= tables.width())
    if notes and not whole:
        print(notes_lib.one_line(notes), file=stream)
        return
    for note in notes:
        print(f"note: {note}", file=stream)


def notes_stream(args, text_format: str = "table") -> IO[str]:
    """Where a command's notes go: stdout beside a terminal table, else stderr, so that
    CSV and Markdown output stays clean."""
    return sys.stdout if args.format == text_format else sys.stderr


def parse_taus(text: str) -> tuple[int, ...]:
    """``"1,2,5"`` -> ``(1, 2, 5)``: distinct integers >= 1, in increasing order."""
    try:
        taus = sorted({int(t) for t in text.split(",")})
    except ValueError:
        taus = []
    if not taus or taus[0] < 1:
        raise ValueError(f"--taus {text!r}: expected integers >= 1 separated by commas, "
                         "e.g. 1,2,5,10,20,50,100")
    return tuple(taus)


def parse_list(text: str, kind: type, flag: str) -> tuple:
    """``"1,2,5"`` -> ``(1, 2, 5)`` of ``kind``; the values' rules are the settings'."""
    try:
        return tuple(kind(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected {kind.__name__} values separated by "
                         "commas, e.g. 1,2,5") from None


def sweep_problems(args) -> Mapping[str, Any]:
    """The problems the command works on: ``--dataset FILE``'s, else ``--sweep``'s."""
    taus = parse_taus(args.taus) if getattr(args, "taus", None) is not None else None
    if args.dataset:
        if getattr(args, "sweep_given", False):  # one of the two would be ignored
            raise ValueError(f"--sweep {args.sweep} and --dataset {args.dataset} both name the "
                             "problems; give one of them")
        args.sweep = pathlib.Path(args.dataset).name  # for messages
        if getattr(args, "target_column", None):
            if args.label_column:
                raise ValueError("--label-column (class labels) and --target-column (a "
                                 "regression target) both name the target; give one of them")
            problems = generative.real_regression.file_problems(args.dataset,
                                                                args.target_column)
        else:
            problems = generative.file_problems(args.dataset, args.label_column)
    elif args.label_column:
        raise ValueError("--label-column goes with --dataset FILE.csv")
    elif getattr(args, "target_column", None):
        raise ValueError("--target-column goes with --dataset FILE")
    elif getattr(args, "problem_ids", None) and not getattr(args, "sweep_given", False):
        problems = problems_lib.find_problems(args.problem_ids)
        args.sweep = "chosen"  # for messages: the problems are named, not a sweep
    else:
        problems = problems_lib.get_sweep(args.sweep)
    if getattr(args, "problem_ids", None):
        unknown = [pid for pid in args.problem_ids if pid not in problems]
        if unknown:
            raise ValueError(f"--problems: {unknown[0]!r} is not a problem of the {args.sweep} "
                             f"sweep; see `neural-testbed problems --sweep {args.sweep}`")
        problems = {pid: problems[pid] for pid in dict.fromkeys(args.problem_ids)}
        by_taus = {p.taus: pid for pid, p in problems.items()}
        if len(by_taus) > 1 and not taus:
            (a, first), (b, second) = list(by_taus.items())[:2]
            raise ValueError(f"--problems: {first} (tau {', '.join(map(str, a))}) and {second} "
                             f"(tau {', '.join(map(str, b))}) are scored at different taus, so "
                             "one table cannot hold both; run them apart or give --taus")
    if taus:
        problems = {pid: dataclasses.replace(p, taus=taus) for pid, p in problems.items()}
    remember_datasets(args, problems)
    return problems


def remember_datasets(args, problems: Mapping[str, Any]) -> None:
    """Keeps the built-in datasets among ``problems`` on ``args``: a command that succeeds
    ends by saying which of them stand in for the paper's (see :func:`cli.main`)."""
    names = {getattr(p, "dataset", None) for p in problems.values()} & set(datasets.BUILT_IN)
    args.built_in_datasets = getattr(args, "built_in_datasets", set()) | names
