"""The ``neural-testbed`` command."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from neural_testbed import active, base, compilation_cache, generative, memory, outputs
from neural_testbed.agents import plugins, registry
from neural_testbed.diagnostics import report as diagnostics_report
from neural_testbed.generative import datasets
from neural_testbed.leaderboard import baselines, correlation, counted, executors, probing
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import runner
from neural_testbed.leaderboard import scoring, studies
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.leaderboard import sweep as sweep_lib
from neural_testbed.leaderboard import xll_scores
from neural_testbed.likelihood import kl

__all__ = ["main"]


class _Given(argparse.Action):
    """Stores the value and notes that the option was given, so that a default is told
    apart from the same value asked for (``--sweep`` beside ``--dataset``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neural-testbed",
        description="Evaluate the joint predictions of learning agents on the Neural Testbed.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import a module (dotted name or .py file) that registers agents; "
                             "repeatable")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", default=store_lib.DEFAULT_DB,
                    help=f"results store, an SQLite file (default: ./{store_lib.DEFAULT_DB})")
    sweep_choice = argparse.ArgumentParser(add_help=False)
    sweep_choice.add_argument(
        "--sweep", default="quick", choices=list(problems_lib.SWEEPS), action=_Given,
        help="problem sweep: 'quick' (18 problems, about a minute for mlp), 'paper' (the "
             "paper's 210 problems), 'smoke' (4 problems, for checks), 'real' (170 problems "
             "on scikit-learn's iris, wine, breast cancer and 8x8 digits; needs the 'real' "
             "extra), 'real-quick' (16 of them), 'regression' (180 Gaussian-process "
             "regression problems, d in {1, 10, 100}), 'regression-quick' (8 of them) or "
             "'regression-wang' (Wang et al.'s synthetic setting, 30 problems); default: quick")
    sweep_choice.add_argument(
        "--dataset", metavar="FILE",
        help="your own data instead of --sweep: a .npz with arrays x_train, y_train, x_test, "
             "y_test, or a .csv with --label-column (split 80/20 with a fixed seed); problems "
             "FILE/i for T in {1, 10, 100, 1000, full} x 10 seeds, scored by NLL")
    sweep_choice.add_argument(
        "--label-column", metavar="NAME", help="the class-label column of a --dataset .csv")
    compute = argparse.ArgumentParser(add_help=False)
    compute.add_argument("--seed", type=int, default=0,
                         help="agent seed, folded into each problem's key: an integer from 0 to "
                              f"{sweep_lib.MAX_AGENT_SEED} (default: 0)")
    compute.add_argument("--estimator", default="auto", choices=list(kl.ESTIMATORS),
                         help="joint log-likelihood estimator: monte_carlo (Algorithm 3), "
                              "partition (Algorithm 4), or auto = monte_carlo for tau < 10, "
                              "partition otherwise (default)")
    compute.add_argument("--taus", default=None, metavar="T1,T2,...",
                         help="evaluate each trained agent at these taus instead of 1 and 100, "
                              "e.g. 1,2,5,10,20,50,100 for `plot`'s d_KL^tau / tau curve (with "
                              "--estimator auto, the first tau >= 10 is also evaluated with "
                              "monte_carlo, stored as such)")
    compute.add_argument("--problems-per-batch", "--batch-size", type=int, default=None,
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
    scale = argparse.ArgumentParser(add_help=False)
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
    one_agent = argparse.ArgumentParser(add_help=False)  # run and diagnose: one agent config
    one_agent.add_argument("--agent", required=True,
                           help="registered agent name (see `neural-testbed agents`)")
    one_agent.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[],
                           metavar="KEY=VALUE",
                           help="change a hyperparameter of the agent's default config, "
                                "e.g. --set l2_weight_decay=0.1 adaptive_weight_scale=false")
    fmt = argparse.ArgumentParser(add_help=False)
    fmt.add_argument("--format", default="table", choices=["table", "csv", "markdown"],
                     help="output format (default: table)")

    study = argparse.ArgumentParser(add_help=False)  # probe and tal: stored per problem
    study.add_argument("--recompute", action="store_true",
                       help="recompute problems already in the store, replacing them")
    study.add_argument("--quiet", action="store_true", help="no progress bar")

    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run", parents=[common, db, sweep_choice, compute, scale, one_agent],
        help="evaluate one agent config on a problem sweep",
        description="Train an agent once per problem of a sweep, evaluate d_KL at each tau "
                    "(1 and 100), store every row, and print a table and an aggregate line. "
                    "Results already in the store are reused.")
    run.add_argument("--output", metavar="CSV",
                     help=f"also write this run's rows to a CSV file ({_SPREADSHEET_NOTE})")

    sweep = commands.add_parser(
        "sweep", parents=[common, db, sweep_choice, compute, scale],
        help="run every config of an agent's hyperparameter sweep",
        description="Run each config of the agent's hyperparameter sweep on each problem, "
                    "writing every result to the store as soon as it is computed. Rerun after "
                    "an interruption to continue where it stopped.")
    sweep.add_argument("--agent", required=True, help="registered agent name")
    sweep.add_argument("--configs", default=registry.PAPER_SWEEP, metavar="NAME",
                       help="which of the agent's config sweeps: 'paper' (default, the paper's "
                            "hyperparameter sweep) or one the agent names (`neural-testbed "
                            "agents` lists them), e.g. ensemble+'s 'prior-functions' for "
                            "Figure 7")
    sweep.add_argument("--configs-per-batch", type=int, default=8, metavar="N",
                       help="configs that differ only in float fields (learning rate, decay, "
                            "prior scale, ...) are trained and evaluated together in one "
                            "program, up to N at a time: one compilation per group instead of "
                            "per config, and fewer, larger launches on a GPU; N times the "
                            "memory. 1 runs each config alone (default: 8)")

    board = commands.add_parser(
        "leaderboard", parents=[common, db, sweep_choice, fmt],
        help="score the agents in the store",
        description="Per agent: d_KL^1 and d_KL^100 (mean over the sweep's problems, with "
                    "standard errors), normalised by the baseline's, d_KL^agg = d_KL^1 + "
                    "d_KL^100 / 100, accuracy, ECE, seconds per problem, the chosen config and "
                    "the problems covered.")
    board.add_argument("--tuning", default="global", choices=list(scoring.TUNINGS),
                       help="global: one config per agent minimising d_KL^agg; per-setting: the "
                            "best config per (temperature, T), as the paper's Figure 2")
    board.add_argument("--baseline", default="mlp", help="agent to normalise by (default: mlp)")
    board.add_argument("--verbose", action="store_true",
                       help="also show each chosen config as JSON (by default a row shows the "
                            "config's hash and the fields that differ from the agent's default)")
    board.add_argument("--metrics", default="", metavar="NAME,...",
                       help="add columns of diagnostics (means over the problems that have "
                            "them, from each problem's smallest tau, with stratified standard "
                            "errors): any of " + ", ".join(diagnostics_report.ROW_METRICS)
                            + "; aud for the three aud_ood_* (ece and accuracy are always "
                            "shown; see `diagnose`); and from the results `tal` and `probe` "
                            "stored for the chosen config: tal (Wang et al.'s TAL score: "
                            "BatchMIG's test log-likelihood after the first round minus "
                            "random's on the same problem; higher is better), self_certainty "
                            "(Grover et al.'s; lower is better)")
    board.add_argument("--with-baselines", action="store_true",
                       help="also rank the published baseline results shipped with the "
                            "package (each agent's default config) of every agent your store "
                            "has no rows of on the sweep; works without a store")
    board.add_argument("--selection", default="same", choices=list(scoring.SELECTIONS),
                       help="same: choose configs and report on every problem (default; "
                            "flatters agents with large sweeps); held-out: choose on the first "
                            "half of each setting's seeds, report on the other half")

    compare = commands.add_parser(
        "compare", parents=[common, db, sweep_choice, fmt],
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
    compare.add_argument("--agent", required=True, help="the agent to compare")
    compare.add_argument("--baseline", action="append", default=None,
                         help="a baseline agent; repeatable (default: mlp)")
    compare.add_argument("--selection", default="same", choices=list(scoring.SELECTIONS),
                         help="same: choose configs and compare on every problem (default); "
                              "held-out: choose on the first half of each setting's seeds, "
                              "compare on the other half")
    compare.add_argument("--metric", default="kl", metavar="NAME",
                         help="what is compared: kl (default; lower is better), "
                              "metacorrelation, xll (regression rows; higher is better), tal "
                              "(stored by `tal`, see leaderboard --metrics; higher is better) "
                              "or self_certainty (stored by `probe`; lower is better)")

    plot = commands.add_parser(
        "plot", parents=[common, db, sweep_choice],
        help="save the paper's figures as PNG files",
        description="Save Figure 2 (normalised KL per agent), Figures 8/9 (KL against T, "
                    "tau = 1 and 100), Figure 10 (normalised KL against time) from the store, "
                    "and Figure 7 (ensemble+ prior functions against mlp) where the store "
                    "holds ensemble+ configs with two or more prior functions; "
                    "with --agent and --problem, also Figure 5 (the environment beside 4 "
                    "sampled members of the agent).")
    plot.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    plot.add_argument("--agent", help="agent for Figure 5 (trained with its default config)")
    plot.add_argument("--problem", default="classification_2d/97",
                      help="problem id for Figure 5 (default: classification_2d/97, "
                           "temperature 0.1, T = 10)")
    plot.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[],
                      metavar="KEY=VALUE", help="hyperparameters for the Figure 5 agent")
    plot.add_argument("--with-baselines", action="store_true",
                      help="also draw the published baseline results (see leaderboard "
                           "--with-baselines); works without a store")
    plot.add_argument("--real-sweep", choices=["real", "real-quick"],
                      help="also Figure 6b (figure6b.png): each config's score on this real-data "
                           "sweep against its score on --sweep, for every agent with rows on "
                           "both (see `correlate`)")

    reproduce = commands.add_parser(
        "reproduce", parents=[common, sweep_choice, fmt],
        help="recompute a sample of the published baseline results and check them",
        description="Recompute an agent's default config on a few problems of the sweep "
                    "that the published baseline results cover (one per (temperature, T) "
                    "setting in turn), in this process and without a store, and compare each "
                    "d_KL with the published one: they agree when they differ by at most "
                    f"{baselines.AGREEMENT_SIGMAS:g} standard errors of the difference (of "
                    "its test samples). Exit status 1 if any disagrees, unless at every tau "
                    "the differences average to zero within as many standard errors over "
                    f"at least {baselines.PAIRED_MIN_PROBLEMS} problems: a long training that "
                    "float rounding sends elsewhere moves a row by more than its test "
                    "samples' error, and such rows still agree in distribution.")
    reproduce.add_argument("--agent", required=True, help="an agent of the published results")
    reproduce.add_argument("--problems", type=int, default=6, metavar="N",
                           help="how many problems to recompute (default: 6)")

    diagnose = commands.add_parser(
        "diagnose", parents=[common, db, sweep_choice, compute, one_agent],
        help="everything beside the KL for one agent on one problem, with figures",
        description="Train an agent on one problem (or reuse its stored rows), and print its "
                    "KL with the diagnostics computed from the same belief samples: "
                    "calibration, the aleatoric / epistemic split, rejection of "
                    "out-of-distribution inputs, UPDS / AUD, and the estimator's health. Writes "
                    "reliability.png, upds.png and rejection.png (from the smallest tau's row) "
                    "into --out. Rows are stored like run's.")
    diagnose.add_argument("--problem", required=True,
                          help="problem id, e.g. classification_2d/17 (looked up in --sweep, "
                               "then in the paper sweep)")
    diagnose.add_argument("--out", default="neural_testbed_diagnostics", metavar="DIR",
                          help="directory for the PNG files "
                               "(default: ./neural_testbed_diagnostics)")
    diagnose.set_defaults(workers=1, backend="local", address=None, shard=None,
                          units_at_once=1)  # one problem

    correlate = commands.add_parser(
        "correlate", parents=[common, db, fmt],
        help="correlate agents' testbed and real-data scores across configs (Figure 6)",
        description="Per agent and data regime (low: T in {1, 10}; high: the largest T), the "
                    "Pearson correlation across the agent's configs between its score on a "
                    "synthetic sweep and its score on a real-data sweep, with 5th and 95th "
                    "bootstrap percentiles (problems resampled within each stratum). A score "
                    "is the mean over taus and problems of the config's KL (NLL on real data) "
                    "divided by the baseline's default config's on the same problem and tau.")
    correlate.add_argument("--agent", action="append", required=True,
                           help="an agent with results in the store; repeatable")
    correlate.add_argument("--baseline", default="mlp",
                           help="registered agent whose default config normalises every value "
                                "(default: mlp)")
    correlate.add_argument("--synthetic-sweep", default="quick", choices=list(problems_lib.SWEEPS),
                           help="the testbed sweep (default: quick)")
    correlate.add_argument("--real-sweep", default="real-quick", choices=list(problems_lib.SWEEPS),
                           help="the real-data sweep (default: real-quick)")
    correlate.add_argument("--num-bootstrap", type=int, default=1000, metavar="B",
                           help="bootstrap draws (default: 1000)")
    correlate.add_argument("--plot", metavar="FILE.png",
                           help="also write Figure 6b (real against testbed scores in the high "
                                "data regime, one point per config) to this PNG file")

    probe = commands.add_parser(
        "probe", parents=[common, db, one_agent, study],
        help="Grover et al.'s probes of an agent's predictive uncertainty (regression)",
        description="Train an agent on each regression problem of a sweep (as `run` does) "
                    "and compute, from its belief samples plus the known noise (s = the "
                    "predictive standard deviation of a target): self-certainty (mean over "
                    "the training inputs of (s - sigma)^2), inclusion@k (fraction of pool "
                    "inputs with |f - mean| < k s, beside what the agent's belief expects), "
                    "uncertainty-increase@delta (pool inputs in equal-count bins of the "
                    "distance to the nearest training input: the fraction whose s exceeds s "
                    "there) and uncertainty-reduction@k (mean |s| change after training again "
                    "with k more pool pairs). Prints means ± standard errors per stratum "
                    "(d, noise variance, T). Each problem's probes are stored in --db as soon "
                    "as they are computed; a rerun with the same settings reuses them (Ctrl-C "
                    "and rerun to resume).")
    probe.add_argument("--sweep", default="regression-quick", choices=list(problems_lib.SWEEPS),
                       help="a regression sweep: regression-quick (8 problems, default), "
                            "regression (180) or regression-wang (30)")
    probe.add_argument("--problems", nargs="+", metavar="ID",
                       help="only these problem ids of the sweep (default: all of them)")
    probe.add_argument("--inclusion-k", default="1,2,3", metavar="K1,K2,...",
                       help="k of inclusion@k, numbers > 0 (default: 1,2,3)")
    probe.add_argument("--reduction-k", default="1,2,5,10", metavar="K1,K2,...",
                       help="pairs added for uncertainty-reduction@k, integers >= 1 up to the "
                            "pool size; the agent trains once more per k (default: 1,2,5,10)")
    probe.add_argument("--bins", type=int, default=5, metavar="B",
                       help="equal-count distance bins of uncertainty-increase; delta is a "
                            "bin's mean distance (default: 5)")
    probe.add_argument("--num-samples", type=int, default=1000, metavar="M",
                       help="belief samples per input (default: 1000)")
    probe.add_argument("--seed", type=int, default=0,
                       help="agent seed, folded into each problem's key as in `run` (default: 0)")
    probe.add_argument("--per-problem", action="store_true",
                       help="one block (or record) per problem instead of per stratum")
    probe.add_argument("--format", default="text", choices=["text", "markdown", "csv"],
                       help="text (default): a block per stratum; markdown, csv: one record "
                            "per (stratum, probe, parameter)")
    probe.add_argument("--out", metavar="DIR",
                       help="also write variance_by_distance.png, self_certainty.png, "
                            "inclusion.png and uncertainty_reduction.png here")
    tal = commands.add_parser(
        "tal", parents=[common, db, one_agent, fmt, study],
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
    tal.add_argument("--sweep", default="regression-wang", choices=list(problems_lib.SWEEPS),
                     help="a regression sweep; its problems' test inputs are the first "
                          "num_probes pool inputs, the pool the rest (default: regression-wang, "
                          "500 test and 200 pool inputs)")
    tal.add_argument("--problems", default=None, metavar="N|ID,...",
                     help="N problems in seed order (seed 0 of every setting first), or "
                          "comma-separated problem ids (default: the whole sweep)")
    tal.add_argument("--method", default=",".join(active.METHODS), metavar="M,...",
                     help="selection methods, comma-separated, of " + ", ".join(active.METHODS)
                          + " (default: all)")
    tal.add_argument("--rounds", type=int, default=active.TALSettings.num_rounds, metavar="R",
                     help="rounds of queries (default: 10)")
    tal.add_argument("--batch", type=int, default=active.TALSettings.batch_size, metavar="B",
                     help="pool inputs queried per round (default: 7, 1%% of the 5d + 700 "
                          "points of regression-wang, as Wang et al.'s code)")
    tal.add_argument("--samples", type=int, default=active.TALSettings.num_samples,
                     metavar="M", help="belief samples for the selection covariance of an agent "
                                       "with more than M members or random indices "
                                       "(default: 1000)")
    tal.add_argument("--seed", type=int, default=0,
                     help="agent seed, folded into each problem's agent key as in `run` "
                          "(default: 0)")
    tal.add_argument("--out", metavar="FILE.png",
                     help="also draw test log-likelihood against labels queried, one line per "
                          "method, to this PNG file")
    xll = commands.add_parser(
        "xll", parents=[common, db, fmt],
        help="XLL and XLLR across agents on a regression sweep (Wang et al.)",
        description="Wang et al.'s cross-normalized log-likelihood (Algorithm 2) from the "
                    "predictive means and covariances at the probes that each regression row "
                    "stores (no retraining): on every problem all named agents have them for, "
                    "each agent serves once as the reference, whose means and variances "
                    "replace every agent's own and whose most correlated probes form the "
                    "batches; per agent, the mean XLL and XLLR (its rank, 0 = best) over the "
                    "references and problems, with stratified standard errors. Each agent "
                    "uses its globally tuned config, as the leaderboard.")
    xll.add_argument("--agent", action="append", required=True,
                     help="an agent with regression rows in the store; repeat for each (2 or "
                          "more)")
    xll.add_argument("--sweep", default="regression-quick", choices=list(problems_lib.SWEEPS),
                     help="a regression sweep (default: regression-quick)")
    xll.add_argument("--batch-size", type=int, default=5, metavar="B",
                     help="test points per batch: an anchor and its B - 1 most correlated "
                          "probes under the reference (default: 5, the paper's)")

    merge = commands.add_parser(
        "merge", parents=[common], help="combine results stores into one",
        description="Copy the rows and the stored `tal` and `probe` results of several "
                    "stores (e.g. the shards of a sweep) into one. Exact duplicates are "
                    "skipped; rows or results with the same key but different values are "
                    "refused, and nothing is written.")
    merge.add_argument("inputs", nargs="+", metavar="DB", help="stores to read")
    merge.add_argument("-o", "--output", required=True, metavar="DB",
                       help="store to write (created if missing; may already hold rows)")

    export = commands.add_parser("export", parents=[common, db],
                                 help="write every stored row (or study result) to a CSV file",
                                 description="Write every stored row to a CSV file (the "
                                             "predictives kept for `xll` are binary and are "
                                             "not exported; `merge` carries them), or with "
                                             "--table studies the results of `tal` and "
                                             "`probe`, one value per line. For spreadsheets, "
                                             f"{_SPREADSHEET_NOTE}.")
    export.add_argument("-o", "--output", required=True, metavar="CSV", help="the CSV file")
    export.add_argument("--table", default="rows", choices=["rows", "studies"],
                        help="rows (default): one line per stored row; studies: one line per "
                             "value of the stored tal and probe results, columns "
                             + ", ".join(studies.LONG_COLUMNS) + " (TAL: name a method, at "
                             "round=R, then its metacorrelation; probes: name a probe, at its "
                             "parameter)")

    commands.add_parser("agents", parents=[common],
                        help="list the registered agents and their defaults")
    problems = commands.add_parser("problems", parents=[common, sweep_choice],
                                   help="list the problems of a sweep")
    del problems
    return parser


def _check_output_file(path: str, flag: str) -> None:
    """Refuses, before any work, a file that could not be written."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a directory; give a file name, e.g. "
                         f"{os.path.join(path, 'results.csv')!r}")
    if not os.path.isdir(directory):
        raise ValueError(f"{flag} {path!r}: there is no directory {directory!r}")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path!r} is not writable")
    elif not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: the directory {directory!r} is not writable")


def _check_output_dir(path: str, flag: str) -> None:
    """Refuses, before any work, a directory that could not be made or written."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = ("is a file" if existing == os.path.abspath(path)
                else f"is under the file {existing!r}")
        raise ValueError(f"{flag} {path!r} {what}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: the directory {existing!r} is not writable")


def _cmd_agents() -> int:
    for name, spec in sorted(registry.AGENTS.items()):
        print(f"{name}: {spec.description}")
        print(f"  sweep: {len(spec.sweep())} configs")
        for sweep_name, make in sorted(spec.other_sweeps.items()):
            print(f"  sweep --configs {sweep_name}: {len(make())} configs")
        for field, value in vars(spec.default).items():
            print(f"  {field} = {value!r}")
    return 0


def _sweep_problems(args) -> Mapping[str, Any]:
    """The problems the command works on: ``--dataset FILE``'s, else ``--sweep``'s."""
    taus = _parse_taus(args.taus) if getattr(args, "taus", None) is not None else None
    if args.dataset:
        if getattr(args, "sweep_given", False):  # one of the two would be ignored
            raise ValueError(f"--sweep {args.sweep} and --dataset {args.dataset} both name the "
                             "problems; give one of them")
        args.sweep = pathlib.Path(args.dataset).name  # for messages
        problems = generative.file_problems(args.dataset, args.label_column)
    elif args.label_column:
        raise ValueError("--label-column goes with --dataset FILE.csv")
    else:
        problems = problems_lib.get_sweep(args.sweep)
    if taus:
        problems = {pid: dataclasses.replace(p, taus=taus) for pid, p in problems.items()}
    _remember_datasets(args, problems)
    return problems


def _remember_datasets(args, problems: Mapping[str, Any]) -> None:
    """Keeps the built-in datasets among ``problems`` on ``args``: a command that succeeds
    ends by saying which of them stand in for the paper's (:func:`main`)."""
    names = {getattr(p, "dataset", None) for p in problems.values()} & set(datasets.BUILT_IN)
    args.built_in_datasets = getattr(args, "built_in_datasets", set()) | names


def _parse_taus(text: str) -> tuple[int, ...]:
    """``"1,2,5"`` -> ``(1, 2, 5)``: distinct integers >= 1, in increasing order."""
    try:
        taus = sorted({int(t) for t in text.split(",")})
    except ValueError:
        taus = []
    if not taus or taus[0] < 1:
        raise ValueError(f"--taus {text!r}: expected integers >= 1 separated by commas, "
                         "e.g. 1,2,5,10,20,50,100")
    return tuple(taus)


def _cmd_problems(args) -> int:
    problems = _sweep_problems(args)
    real = any(p.metric == "nll" for p in problems.values())
    regression = any(p.target == "regression" for p in problems.values())
    first = "dataset" if real else "d, noise" if regression else "temperature"
    print(f"{'problem_id':<24}{first:>14}{'T':>6}{'seed':>6}  taus      N     M  metric")
    for p in problems.values():
        taus = ",".join(map(str, p.taus))
        where = (p.stratum[0] if real else f"{p.input_dim}, {p.noise_variance:g}" if regression
                 else f"{p.temperature:g}")
        print(f"{p.problem_id:<24}{where:>14}{p.num_train:>6}{p.seed:>6}  "
              f"{taus:<8}{p.num_test:>5}{p.num_samples:>6}  {p.metric}")
    return 0


def _compute(args, configs: Sequence[Any], announce: str,
             problems: Sequence[Any] | None = None) -> tuple[sweep_lib.SweepSummary, list]:
    """Checks every setting and opens the store (one clear error, before any work),
    prints ``announce`` on stderr, then runs the configs on ``problems`` (default: the
    command's sweep) into the store."""
    problems = list(_sweep_problems(args).values()) if problems is None else list(problems)
    configs_per_batch = getattr(args, "configs_per_batch", 1)  # `run`: one config, no option
    units_at_once = args.units_at_once
    sweep_lib.check_options(agent_seed=args.seed, problems_per_batch=args.problems_per_batch,
                            workers=args.workers, backend=args.backend, estimator=args.estimator,
                            configs_per_batch=configs_per_batch,
                            units_at_once=1 if units_at_once is None else units_at_once,
                            address=args.address)
    sweep_lib.check_agent_on_problems(args.agent, problems, args.estimator, configs)
    sweep_lib.check_memory(args.agent, configs, problems, args.estimator, args.seed)
    if units_at_once is None:  # not asked: both cores of a CPU, one unit in worker processes
        units_at_once = args.units_at_once = (
            executors.default_units_at_once()
            if args.backend == "local" and args.workers == 1 else 1)
    shard = sweep_lib.parse_shard(args.shard) if args.shard else (1, 1)
    with store_lib.ResultsStore(args.db) as store:
        print(announce, file=sys.stderr)
        summary = sweep_lib.run_sweep(
            args.agent, configs, problems, store, agent_seed=args.seed, estimator=args.estimator,
            problems_per_batch=args.problems_per_batch, configs_per_batch=configs_per_batch,
            recompute=args.recompute,
            retry_failed=args.retry_failed,
            shard=shard, backend=args.backend, workers=args.workers, address=args.address,
            imports=args.imports, progress=not args.quiet, units_at_once=units_at_once)
    return summary, problems


def _rows_of_run(store: store_lib.ResultsStore, agent: str, configs: Sequence[Any],
                 problems: Sequence[Any], estimator: str, agent_seed: int,
                 status: str | None = None) -> list[dict[str, Any]]:
    """The stored rows a run of ``configs`` on ``problems`` computes or reuses, exactly:
    each problem's id and definition, its taus, N and M (rows of other ``--taus`` or
    settings stored under the same ids are not this run's), in the problems' order."""
    hashes = {store_lib.config_hash(agent, c) for c in configs}
    keys = {(p.problem_id, base.definition_hash(p), tau, p.num_test, p.num_samples): i
            for i, p in enumerate(problems) for tau in p.taus}
    rows = [r for r in store.rows(agent=agent, status=status)
            if r["config_hash"] in hashes and r["estimator"] == estimator
            and r["agent_seed"] == agent_seed
            and (r["problem_id"], r["problem_hash"], r["tau"], r["num_test"],
                 r["num_samples"]) in keys]
    return sorted(rows, key=lambda r: (keys[r["problem_id"], r["problem_hash"], r["tau"],
                                            r["num_test"], r["num_samples"]], r["tau"]))


def _number(value, spec: str) -> str:
    """``value`` formatted with ``spec``, or n/a where it is undefined (None or NaN),
    as accuracy and ECE are on regression problems."""
    return "n/a" if value is None or value != value else format(value, spec)


def _problem_table(rows: Sequence[Mapping[str, Any]], taus: Sequence[int]) -> str:
    """One line per problem; each column as wide as its widest value (T = 10^6 is 7
    digits) plus a space, and at least as wide as it is for the paper's problems."""
    by_problem: dict[str, dict[int, Mapping[str, Any]]] = {}
    for row in rows:
        by_problem.setdefault(row["problem_id"], {})[row["tau"]] = row
    metric = rows[0]["metric"] if rows else "kl"
    regression = bool(rows) and rows[0]["num_classes"] == 1
    table = [["problem_id", "noise" if regression else "temp", "T", "seed",
              *(f"{metric}(tau={tau}) ± se" for tau in taus), "acc", "ece", "secs"]]
    for pid, by_tau in by_problem.items():
        first = next(iter(by_tau.values()))
        line = [pid, f"{first['temperature']:g}", str(first["num_train"]), str(first["seed"])]
        for tau in taus:
            r = by_tau.get(tau)
            ok = r is not None and r["status"] == "ok"
            cell = "{:.4f} ± {:.4f}".format(r["kl"], r["kl_stderr"]) if ok else "failed"
            if ok and r["num_clipped"]:
                cell += f" !{r['num_clipped']}"  # infinite terms clipped
            line.append(cell)
        marginal = by_tau.get(taus[0])
        if marginal is not None and all(r["status"] == "ok" for r in by_tau.values()):
            secs = marginal["train_seconds"] + sum(r["eval_seconds"] for r in by_tau.values())
            line += [_number(marginal["accuracy"], ".3f"), _number(marginal["ece"], ".3f"),
                     f"{secs:.2f}"]
        table.append(line)
    least = [24, 6, 6, 5, *([24] * len(taus)), 7, 7, 7]
    widths = [max(least[i], 1 + max(len(line[i]) for line in table if i < len(line)))
              for i in range(len(least))]
    return "\n".join(
        "".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(line)).rstrip()
        for line in table)


def _aggregate_line(rows: Sequence[Mapping[str, Any]], problems) -> str:
    records, _ = scoring.score_agents(rows, {p.problem_id: p for p in problems}, baseline="")
    if not records:
        return "aggregate: no successful problems"
    r = records[0]
    taus = sorted({t for p in problems for t in p.taus})
    name = "d_KL" if r["metric"] == "kl" else "NLL"
    parts = [f"{name}^{tau} = {r[f'kl_{tau}']:.4f} ± {r[f'kl_{tau}_stderr']:.4f}" for tau in taus]
    parts.append(f"{name}^agg = {r['kl_agg']:.4f}")
    parts.append(f"accuracy = {_number(r['accuracy'], '.3f')}, "
                 f"ECE = {_number(r['ece'], '.3f')}")
    # A problem of the sweep with no rows at all was left to another shard.
    num_failed = len({row["problem_id"] for row in rows if row["status"] != "ok"})
    num_missing = len(problems) - r["problems"] - num_failed
    counts = (f"{r['problems']} of {len(problems)} problems" if num_missing
              else f"{len(problems)} problems")
    if num_failed:
        counts += f", {num_failed} FAILED"
    if num_missing:
        counts += f", {num_missing} not computed here (other shards)"
    parts.append(counts)
    line = "aggregate (stratified ± se): " + ", ".join(parts)
    clipped = [row for row in rows if row["status"] == "ok" and row["num_clipped"]]
    if clipped:
        line += (f"\nCLIPPED: {len(clipped)} rows (marked !k) had k test samples whose labels "
                 "the agent gave probability 0; those infinite terms were clipped to the largest "
                 "finite one, as the reference does, which flatters an overconfident agent")
    return line


def _cmd_run(args) -> int:
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    if args.output:
        _check_output_file(args.output, "--output")
    start = time.perf_counter()
    summary, problems = _compute(args, [config], f"agent {args.agent}: {config}")
    seconds = time.perf_counter() - start
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = _rows_of_run(store, args.agent, [config], problems, args.estimator, args.seed)
        if args.output:
            store.to_csv(args.output, [_spreadsheet_safe(r) for r in rows])
    taus = sorted({t for p in problems for t in p.taus})
    print(_problem_table(rows, taus))
    print(_aggregate_line(rows, problems))
    compiling = ""
    if not summary.reused:  # every row was computed by this run
        per_problem = {r["problem_id"]: r["compile_seconds"] for r in rows if r["status"] == "ok"}
        total = sum(per_problem.values())
        alone = args.units_at_once == 1 and args.workers == 1 and args.backend == "local"
        compiling = (f" ({total:.1f} s of it compiling)" if alone else
                     f" ({total:.1f} s compiling, added up over the units run side by side)")
    print(f"time: {seconds:.1f} s{compiling}; {summary.computed} rows computed, "
          f"{summary.reused} reused from {args.db}")
    if args.output:
        print(f"wrote {len(rows)} rows to {args.output}")
    return _report_failures(rows, args.keep_going)


def _diagnose_problem(args):
    """The problem ``--problem`` names: in the command's sweep (or file), else in the paper
    sweep, whose ids every synthetic sweep shares."""
    problems = _sweep_problems(args)
    if args.problem not in problems and not args.dataset:
        problems = {**problems_lib.get_sweep("paper"), **problems}
    if args.problem not in problems:
        raise ValueError(f"unknown problem {args.problem!r}; see `neural-testbed problems "
                         f"--sweep {args.sweep}`")
    return problems[args.problem]


def _cmd_diagnose(args) -> int:
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    figures = _figures_module("neural_testbed.figures.diagnostics")
    _check_output_dir(args.out, "--out")
    problem = _diagnose_problem(args)
    if problem.target == "regression":
        raise ValueError(f"diagnose covers classification problems; {args.problem} is a "
                         "regression problem, whose rows carry the metacorrelation: "
                         "`neural-testbed leaderboard --metrics metacorrelation`")
    _compute(args, [config], f"agent {args.agent}: {config}; problem {args.problem}",
             problems=[problem])
    with store_lib.ResultsStore(args.db, create=False) as store:
        want = store_lib.config_hash(args.agent, config)
        rows = sorted((r for r in store.rows(agent=args.agent)
                       if r["config_hash"] == want and r["problem_id"] == args.problem
                       and r["problem_hash"] == base.definition_hash(problem)
                       and r["tau"] in problem.taus and r["agent_seed"] == args.seed
                       and r["num_test"] == problem.num_test
                       and r["num_samples"] == problem.num_samples
                       and r["estimator"] in (args.estimator, "monte_carlo")),
                      key=lambda r: (r["tau"], r["estimator"] != args.estimator))
    records = [(r, figures.record_of(r)) for r in rows if r["status"] == "ok"]
    if not records or any(record is None for _, record in records):
        print(f"no diagnostics stored for {args.agent} on {args.problem} (rows written before "
              "they existed): rerun with --recompute", file=sys.stderr)
        return _report_failures(rows, args.keep_going) or 1
    metric = "d_KL" if problem.metric == "kl" else "NLL"
    print(f"{args.agent} on {args.problem} (T = {problem.num_train}, N = {problem.num_test}, "
          f"M = {problem.num_samples})")
    header = ["tau", "estimator", metric, "se", "accuracy", "ECE"]
    table = [[r["tau"], r["estimator"], f"{r['kl']:.4f}", f"{r['kl_stderr']:.4f}",
              f"{r['accuracy']:.3f}", f"{r['ece']:.3f}"] for r, _ in records]
    print(scoring.format_records([dict(zip(header, line)) for line in table], "table", header))
    print("\ndiagnostics (uncertainties are traces of K x K matrices, per input; AUD and "
          "rejection use the top-class confidence rescaled from [1/K, 1] to [0, 1]):")
    names = ["metric"] + [f"tau={r['tau']}" + ("" if r["estimator"] == args.estimator
                                                else f" ({r['estimator']})") for r, _ in records]
    lines = [dict(zip(names, [name] + ["n/a" if rec[name] is None else f"{rec[name]:.4g}"
                                       for _, rec in records]))
             for name in diagnostics_report.METRICS]
    print(scoring.format_records(lines, "table", names))
    row, record = records[0]
    title = f"{args.agent} on {args.problem}, tau = {row['tau']}"
    for path in figures.save_diagnostic_figures(record, args.out, title=title):
        print(f"wrote {path}")
    return _report_failures(rows, args.keep_going)


def _report_failures(rows, keep_going: bool) -> int:
    """Lists failed rows by agent and problem; the exit status of the command."""
    failed: dict[tuple[str, str], list] = {}
    for r in rows:
        if r["status"] != "ok":
            failed.setdefault((r["agent"], r["problem_id"]), []).append(r)
    if failed:
        print(f"{len(failed)} failed (agent, problem) pairs; rerun with --retry-failed to "
              "recompute only them:", file=sys.stderr)
    for (agent, pid), group in sorted(failed.items()):
        taus = ", ".join(str(r["tau"]) for r in group)
        print(f"  FAILED {agent} {pid} (tau {taus}): {group[0]['error']}", file=sys.stderr)
    return 1 if failed and not keep_going else 0


def _cmd_sweep(args) -> int:
    spec = registry.get_agent(args.agent)
    configs = list(spec.configs(args.configs))
    problems = _sweep_problems(args)
    start = time.perf_counter()
    which = "" if args.configs == registry.PAPER_SWEEP else f" ({args.configs})"
    summary, _ = _compute(args, configs, f"sweep {args.agent}: {len(configs)} configs{which} x "
                                         f"{len(problems)} problems ({args.sweep}) into {args.db}")
    print(f"done in {time.perf_counter() - start:.1f} s: {summary.computed} rows computed, "
          f"{summary.reused} reused, {summary.failed} failed")
    with store_lib.ResultsStore(args.db, create=False) as store:
        failed = _rows_of_run(store, args.agent, configs, list(problems.values()),
                              args.estimator, args.seed, status="failed")
    return _report_failures(failed, args.keep_going)


def _stored_rows(args) -> list[dict[str, Any]]:
    if getattr(args, "with_baselines", False) and not os.path.exists(args.db):
        return []  # the published rows alone
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = store.rows()
        studies = not rows and bool(store.studies())
    if studies:  # tal/probe records are shown beside an agent's `run` rows, not alone
        raise store_lib.StoreError(f"{args.db!r} holds tal/probe records but no `run` rows "
                                   f"yet: run the agent on the sweep, or export them with "
                                   f"`export --table studies`")
    if not rows and not getattr(args, "with_baselines", False):
        raise store_lib.StoreError(f"{args.db!r} holds no results yet")
    return rows


def _counted(rows: list[dict[str, Any]], problems: Mapping[str, Any],
             published_agents: Sequence[str] | None = ()) -> list[dict[str, Any]]:
    """The rows that count on ``problems`` (:func:`counted.counted_rows`: the store's,
    and the published rows of ``published_agents`` where the store lacks them); its
    notes go to stderr."""
    rows, notes = counted.counted_rows(rows, problems, published_agents)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return rows


def _study_metrics(args, names: Sequence[str], problems: Mapping[str, Any]):
    """The per-problem values of the study metrics among ``names`` (see
    :func:`studies.per_problem_metrics`), or None where none is asked for."""
    if not set(names) & set(studies.METRICS):
        return None
    with store_lib.ResultsStore(args.db, create=False) as store:
        records = store.studies()
    values, notes = studies.per_problem_metrics(records, problems)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return values


# --metrics names that stand for several columns (ece and accuracy are always shown).
_METRIC_SHORTHANDS = {"ece": (), "accuracy": (),
                      "aud": ("aud_ood_aleatoric", "aud_ood_epistemic", "aud_ood_total")}
_BOARD_COLUMNS = ("agent", "source", "kl_1", "kl_1_stderr", "kl_1_norm", "kl_1_norm_stderr",
                  "kl_100", "kl_100_stderr", "kl_100_norm", "kl_100_norm_stderr", "kl_agg",
                  "accuracy", "ece", "seconds_per_problem", "problems", "of", "clipped", "flag",
                  "metric", "selection", "config_hash", "changes")


def _set_syntax(value: Any) -> str:
    """A config value as ``--set`` reads it (``50,50``, ``false``, ``0.1``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_set_syntax(v) for v in value)
    return str(value)


def _config_changes(agent: str, config: str) -> str:
    """The fields of a stored config (JSON) that differ from the agent's default."""
    try:
        fields = json.loads(config)
    except (TypeError, ValueError):  # e.g. "per setting: 3 configs"
        return str(config)
    if not isinstance(fields, dict):
        return ""
    spec = registry.AGENTS.get(agent)
    if spec is None:
        return "(unregistered: see --verbose)"
    default = json.loads(store_lib.config_json(spec.default))
    changed = [f"{k}={_set_syntax(v)}" for k, v in sorted(fields.items()) if default.get(k) != v]
    return " ".join(changed) or "default"


def _check_agent_in_store(name: str, rows: Sequence[Mapping[str, Any]], db: str,
                          flag: str) -> None:
    """One clear error for an agent name the store has no results for."""
    stored = sorted({r["agent"] for r in rows})
    if name in stored:
        return
    if name in registry.AGENTS:
        raise ValueError(f"{flag} {name!r}: {db!r} has no results for it yet (run `neural-testbed "
                         f"sweep --agent {name}`); it has results for {', '.join(stored)}")
    raise ValueError(f"{flag} {name!r}: no such agent in {db!r}, which has results for "
                     f"{', '.join(stored)}")


def _cmd_leaderboard(args) -> int:
    problems = _sweep_problems(args)
    rows = _counted(_stored_rows(args), problems, None if args.with_baselines else ())
    if args.baseline not in registry.AGENTS:  # a registered baseline may simply have no rows
        _check_agent_in_store(args.baseline, rows, args.db, "--baseline")
    asked = [m for m in args.metrics.split(",") if m]
    allowed = (*_METRIC_SHORTHANDS, *diagnostics_report.ROW_METRICS, *studies.METRICS)
    unknown = [m for m in asked if m not in allowed]
    if unknown:
        raise ValueError(f"unknown --metrics {', '.join(unknown)}; allowed: "
                         + ", ".join(allowed))
    metrics = list(dict.fromkeys(name for m in asked
                                 for name in _METRIC_SHORTHANDS.get(m, (m,))))
    records, warnings = scoring.score_agents(rows, problems, args.tuning, args.baseline,
                                             args.selection,
                                             _study_metrics(args, metrics, problems))
    if not records:
        raise store_lib.StoreError(f"{args.db!r} has no successful results for the "
                                   f"{args.sweep!r} sweep")
    for warning in warnings:
        print(f"note: {warning}", file=sys.stderr)
    # On stdout only for the terminal table: CSV and Markdown carry a selection column.
    print(f"tuning: {args.tuning}; selection: {args.selection}: "
          f"{scoring.SELECTIONS[args.selection]}",
          file=sys.stdout if args.format == "table" else sys.stderr)
    for record in records:
        record["changes"] = _config_changes(record["agent"], record["config"])
        for name in metrics:  # a study metric with no record stored for any agent
            record.setdefault(name, float("nan"))
            record.setdefault(f"{name}_stderr", float("nan"))
    columns = (_BOARD_COLUMNS[:-1] + tuple(c for m in metrics for c in (m, f"{m}_stderr"))
               + _BOARD_COLUMNS[-1:] + (("config",) if args.verbose else ()))
    print(scoring.format_records(records, args.format, columns))
    return 0


def _cmd_compare(args) -> int:
    if args.metric not in scoring.COMPARE_METRICS:
        raise ValueError(f"unknown --metric {args.metric!r}; allowed: "
                         + ", ".join(scoring.COMPARE_METRICS))
    problems = _sweep_problems(args)
    baseline_names = args.baseline or ["mlp"]
    rows = _stored_rows(args)  # the store alone is compared: no agent need be registered
    _check_agent_in_store(args.agent, rows, args.db, "--agent")
    rows = _counted(rows, problems, baseline_names)
    have = {r["agent"] for r in rows}
    for name in baseline_names:
        if name not in have:
            raise ValueError(f"--baseline {name!r}: neither {args.db!r} nor the published "
                             f"baseline results have rows of it on the {args.sweep} sweep "
                             f"(run `neural-testbed run --agent {name} --sweep {args.sweep}`)")
    records = scoring.compare_agents(rows, problems, args.agent, baseline_names, args.selection,
                                     args.metric, _study_metrics(args, [args.metric], problems))
    print(f"selection: {args.selection}: {scoring.SELECTIONS[args.selection]}",
          file=sys.stdout if args.format == "table" else sys.stderr)
    if args.format != "table":
        print(scoring.format_records(records, args.format))
        return 0
    pooled = [r for r in records if r["scope"] == "pooled"]
    cells = [r for r in records if r["scope"] == "setting"]
    if args.metric == "kl":
        what, diff, taus = "", "kl_diff", ("tau",)
        where, cell = "at tau = {tau}, ", "(setting, tau)"
    else:
        higher = scoring.COMPARE_METRICS[args.metric]
        what = (f" in {args.metric} ({'higher' if higher else 'lower'} is better; pairs: "
                "the problems where both have a value)")
        diff, taus, where, cell = f"{args.metric}_diff", (), "", "setting"
    print(f"{args.agent} - baseline{what}, pooled over the {args.sweep} sweep (stratified by "
          "(temperature, T); two-sided t-test, df = pairs - settings):")
    print(scoring.format_records(pooled, "table", ("baseline", "source", *taus, diff, "stderr",
                                                   "p_value", "pairs", "df", "verdict", "flag")))
    for r in pooled:
        if abs(r[diff]) < r["stderr"]:
            print(f"note: {where.format(tau=r.get('tau'))}{args.agent} and {r['baseline']} "
                  f"differ by less than one standard error ({r[diff]:.4g} vs "
                  f"{r['stderr']:.4g}): more problems or seeds are needed to order them")
    print(f"\n{args.agent} - baseline per (temperature, T) (paired t-test, df = pairs - 1):")
    print(scoring.format_records(cells, "table", ("baseline", "source", "temperature",
                                                  "num_train", *taus,
                                                  diff, "stderr", "p_value", "pairs",
                                                  "verdict", "flag")))
    for name in baseline_names:
        mine = [r for r in cells if r["baseline"] == name]
        better = sum(r["verdict"] == "better" for r in mine)
        worse = sum(r["verdict"] == "worse" for r in mine)
        print(f"{args.agent} vs {name}: significantly better in {better}, worse in {worse} "
              f"of {len(mine)} {cell} cells (paired t-test, 5%)")
    return 0


def _cmd_reproduce(args) -> int:
    if args.problems < 1:
        raise ValueError(f"--problems must be an integer >= 1, got {args.problems}")
    spec = registry.get_agent(args.agent)
    problems = _sweep_problems(args)
    published = baselines.load()
    sample = baselines.reproduce_sample(published, args.agent, problems, args.problems)
    if not sample:
        covered = sorted({r["agent"] for r in published.rows if r["problem_id"] in problems})
        raise ValueError(f"the published baseline results ({published.version}) have no rows "
                         f"of {args.agent!r} on the {args.sweep} sweep; on it they have "
                         f"{', '.join(covered) or 'no agent yet'}")
    rows, _ = baselines.rows_for(published, [args.agent], {p.problem_id: p for p in sample})
    default_hash = store_lib.config_hash(args.agent, spec.default)
    if {r["config_hash"] for r in rows} != {default_hash}:
        raise ValueError(f"the published rows of {args.agent!r} are of another config than "
                         f"its default today ({default_hash}): they cannot be reproduced here")
    print(f"recomputing {args.agent} (default config) on {len(sample)} problems of the "
          f"{args.sweep} sweep; published: "
          f"{published.describe([args.agent], [p.problem_id for p in sample])}", file=sys.stderr)
    new = sweep_lib.run_agent(spec.make(spec.default), sample, args.agent,
                              config=spec.default, progress=True)
    by_key = {(r["problem_id"], r["tau"]): r for r in rows if r["estimator"] == "auto"}
    records = [baselines.agreement(by_key[r.problem_id, r.tau], r.as_dict()) for r in new
               if (r.problem_id, r.tau) in by_key and r.status == "ok"]
    failed = [r for r in new if r.status != "ok"]
    print(scoring.format_records(records, args.format, (
        "problem_id", "tau", "published", "recomputed", "diff", "stderr", "agree")))
    agree = sum(r["agree"] for r in records)
    print(f"{agree} of {len(records)} rows agree within {baselines.AGREEMENT_SIGMAS:g} standard "
          f"errors of the difference (their test samples')"
          + (f"; {len(failed)} rows failed" if failed else ""))
    paired = baselines.paired_agreement(records)
    for check in paired:
        verdict = {None: f"too few problems to tell (fewer than "
                         f"{baselines.PAIRED_MIN_PROBLEMS})",
                   True: f"zero within {baselines.AGREEMENT_SIGMAS:g} standard errors",
                   False: "not zero"}[check["agree"]]
        print(f"tau = {check['tau']}: mean difference {check['mean_diff']:+.4g} ± "
              f"{check['stderr']:.2g} over {check['problems']} problems: {verdict}")
    if failed:
        return 1
    if agree == len(records):
        return 0
    if all(check["agree"] for check in paired):
        print("the rows that differ more moved with their training run (float rounding, as in "
              "a batch of another size or on another machine, sends a long training "
              "elsewhere); on average the published rows are reproduced")
        return 0
    return 1


def _cmd_plot(args) -> int:
    plots = _figures_module("neural_testbed.figures.leaderboard")
    _check_output_dir(args.out, "--out")
    problems = _sweep_problems(args)
    real = problems_lib.get_sweep(args.real_sweep) if args.real_sweep else {}
    rows = _counted(_stored_rows(args), {**problems, **real},
                    None if args.with_baselines else ())
    if args.agent:  # checked before any figure is drawn
        spec = _registered_agent(args.agent, rows)
        config = registry.parse_overrides(spec, args.overrides)
        paper = problems_lib.get_sweep("paper")
        if args.problem not in paper:
            raise ValueError(f"unknown problem {args.problem!r}; see `neural-testbed problems "
                             "--sweep paper`")
    records = None
    if args.real_sweep:  # computed before any figure is drawn: a bad pairing is one line
        _remember_datasets(args, real)
        on_both = ({r["agent"] for r in rows if r["problem_id"] in problems}
                   & {r["agent"] for r in rows if r["problem_id"] in real})
        if not on_both:
            raise ValueError(f"no agent has rows on both {args.sweep} and {args.real_sweep} "
                             f"in {args.db}")
        records = correlation.correlate(rows, problems, real, sorted(on_both))
    paths = plots.save_figures(rows, problems, args.out)
    figures = _figures_module("neural_testbed.figures.diagnostics")
    if figures.tau_curves(rows, problems):
        paths.append(figures.figure_kl_per_tau(rows, problems,
                                               pathlib.Path(args.out) / "tau_curve.png"))
    if records is not None:
        paths.append(plots.figure_testbed_vs_real(records, pathlib.Path(args.out) /
                                                  "figure6b.png"))
    if args.agent:
        paths.append(plots.figure_agent_samples(
            jax.random.key(0), spec.make(config), paper[args.problem],
            pathlib.Path(args.out) / "figure5.png"))
    for path in paths:
        print(f"wrote {path}")
    return 0


def _cmd_correlate(args) -> int:
    if args.plot:  # checked before any work
        plots = _figures_module("neural_testbed.figures.leaderboard")
        _check_output_file(args.plot, "--plot")
    agents = list(dict.fromkeys(args.agent))
    synthetic = problems_lib.get_sweep(args.synthetic_sweep)
    real = problems_lib.get_sweep(args.real_sweep)
    _remember_datasets(args, real)
    rows = _stored_rows(args)
    for name in agents:
        _check_agent_in_store(name, rows, args.db, "--agent")
    rows = _counted(rows, {**synthetic, **real})
    records = correlation.correlate(rows, synthetic, real, agents, args.baseline,
                                    num_bootstrap=args.num_bootstrap, seed=0)
    notes = sys.stdout if args.format == "table" else sys.stderr  # CSV and Markdown stay clean
    print(f"synthetic: {args.synthetic_sweep}; real: {args.real_sweep}; "
          + correlation.describe(args.baseline, args.num_bootstrap, seed=0), file=notes)
    print(scoring.format_records(records, args.format, correlation.COLUMNS))
    if args.plot:
        print(f"wrote {plots.figure_testbed_vs_real(records, args.plot, baseline=args.baseline)}",
              file=notes)
    return 0


def _parse_list(text: str, kind: type, flag: str) -> tuple:
    """``"1,2,5"`` -> ``(1, 2, 5)`` of ``kind``; the values' rules are the settings'."""
    try:
        return tuple(kind(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected {kind.__name__} values separated by "
                         "commas, e.g. 1,2,5") from None


def _probe_problems(args) -> list[Any]:
    """The sweep's problems, or those ``--problems`` names (in the sweep's order)."""
    problems = problems_lib.get_sweep(args.sweep)
    if not args.problems:
        return list(problems.values())
    unknown = [pid for pid in args.problems if pid not in problems]
    if unknown:
        raise ValueError(f"--problems: {', '.join(unknown)} not in the {args.sweep} sweep; see "
                         f"`neural-testbed problems --sweep {args.sweep}`")
    return [p for pid, p in problems.items() if pid in set(args.problems)]


def _cmd_probe(args) -> int:
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    settings = probing.ProbeSettings(
        inclusion_ks=_parse_list(args.inclusion_k, float, "--inclusion-k"),
        reduction_ks=_parse_list(args.reduction_k, int, "--reduction-k"),
        num_bins=args.bins, num_samples=args.num_samples, agent_seed=args.seed)
    problems = _probe_problems(args)
    probing.check_problems(args.agent, problems, settings)
    if args.out:  # checked before any work
        figures = _figures_module("neural_testbed.figures.probes")
        _check_output_dir(args.out, "--out")
    notes = sys.stdout if args.format == "text" else sys.stderr  # CSV and Markdown stay clean
    settings_json = studies.probe_settings_json(settings)
    with store_lib.ResultsStore(args.db) as store:  # refuses a file it cannot use, before work
        stored = ({} if args.recompute else
                  studies.stored_by_problem(store, args.agent, config, "probe", settings_json))
        todo = [p for p in problems if p.problem_id not in stored]
        print(f"probe {args.agent}: {config}; {len(problems)} problems ({args.sweep})"
              + _stored_note(len(problems) - len(todo), args.db), file=sys.stderr)
        start = last = time.perf_counter()
        for problem, result in probing.probe_problems(spec.make(config), todo, settings,
                                                      progress=not args.quiet,
                                                      desc=args.agent):
            now = time.perf_counter()
            store.write_studies([studies.probe_record(args.agent, config, problem.problem_id,
                                                      result, settings, now - last)])
            last = now
        seconds = time.perf_counter() - start
        stored = studies.stored_by_problem(store, args.agent, config, "probe", settings_json)
    # Every problem is reported from the store: a rerun prints what the first run did.
    results = [(p, studies.probe_result(stored[p.problem_id])) for p in problems]
    records = probing.summarise(results, settings, per_problem=args.per_problem)
    print(probing.describe(settings), file=notes)
    if args.format == "text":
        print(probing.format_text(records))
    else:
        columns = probing.PROBLEM_COLUMNS if args.per_problem else probing.COLUMNS
        print(scoring.format_records(records, args.format, columns))
    if args.out:
        summary = (records if not args.per_problem
                   else probing.summarise(results, settings))
        for path in figures.save_probe_figures(results, summary, args.out, agent=args.agent):
            print(f"wrote {path}", file=notes)
    print(_computed_line(seconds, len(todo), len(problems) - len(todo), args.db), file=notes)
    return 0


def _stored_note(reused: int, db: str) -> str:
    return f", {reused} of them stored in {db} (reused)" if reused else ""


def _computed_line(seconds: float, computed: int, reused: int, db: str) -> str:
    """The last lines of `tal` and `probe`: time, then what was computed and reused."""
    per_problem = (f" ({seconds / computed:.1f} s per problem computed, compilation included)"
                   if computed else "")
    return (f"time: {seconds:.1f} s{per_problem}\n"
            f"{computed} problems computed, {reused} reused from {db}")


def _cmd_tal(args) -> int:
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    if "regression" not in spec.targets:
        raise ValueError(f"agent {args.agent!r} is not built for regression problems (it "
                         f"predicts {', '.join(spec.targets)}); tal needs a regression agent")
    methods = tuple(m.strip() for m in args.method.split(",") if m.strip())
    sweep_lib.check_options(agent_seed=args.seed)
    settings = active.TALSettings(num_rounds=args.rounds, batch_size=args.batch,
                                  num_samples=args.samples, methods=methods,
                                  agent_seed=args.seed)
    if args.out:  # checked before any work
        figures = _figures_module("neural_testbed.figures.active")
        _check_output_file(args.out, "--out")
    sweep = problems_lib.get_sweep(args.sweep)
    if any(p.target != "regression" for p in sweep.values()):
        raise ValueError(f"tal needs a regression sweep; {args.sweep} holds classification "
                         "problems (try --sweep regression-wang)")
    try:
        problems = active.tal.pick_problems(sweep, args.problems)
    except ValueError as error:
        raise ValueError(f"--problems {error}") from None
    active.tal.check_problems(problems, settings)
    agent = spec.make(config)
    if not isinstance(agent, base.Agent):
        raise ValueError(f"agent {args.agent!r} trains outside JAX (a host agent); tal "
                         "retrains its selection model each round and needs a JAX agent")
    settings_json = studies.tal_settings_json(settings)
    with store_lib.ResultsStore(args.db) as store:  # refuses a file it cannot use, before work
        stored = ({} if args.recompute else
                  studies.stored_by_problem(store, args.agent, config, "tal", settings_json))
        todo = [p for p in problems if p.problem_id not in stored]
        print(f"tal: agent {args.agent}: {config}; {len(problems)} problems of {args.sweep}; "
              f"{settings.num_rounds} rounds x {settings.batch_size} queries"
              + _stored_note(len(problems) - len(todo), args.db), file=sys.stderr)
        start = time.perf_counter()
        for result in active.tal.iter_tal(agent, todo, settings, progress=not args.quiet):
            store.write_studies([studies.tal_record(args.agent, config, result, settings)])
        seconds = time.perf_counter() - start
        stored = studies.stored_by_problem(store, args.agent, config, "tal", settings_json)
    # Every problem is reported from the store: a rerun prints what the first run did.
    results = [studies.tal_result(stored[p.problem_id]) for p in problems]
    records = active.summarise(results)
    notes = sys.stdout if args.format == "table" else sys.stderr  # CSV and Markdown stay clean
    print(f"test log-likelihood of the exact posterior after each round (mean and standard "
          f"error over {len(results)} problems), queries chosen by {args.agent}:", file=notes)
    columns = ["round", "queried"] + [c for m in methods for c in (m, f"{m}_se")]
    print(scoring.format_records(records, args.format, columns))
    rounds = sorted({1, settings.num_rounds})  # the paper's TAL score is after one round
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
             else "n/a (its belief samples do not vary, or no method used it)"), file=notes)
    if args.out:
        title = f"{args.agent} selecting on {args.sweep} ({len(results)} problems)"
        print(f"wrote {figures.figure_tal(records, args.out, title)}", file=notes)
    print(_computed_line(seconds, len(todo), len(problems) - len(todo), args.db), file=notes)
    return 0


def _plus_minus(mean: float, stderr: float, spec: str) -> str:
    """``mean ± stderr``; the error is n/a for a single problem."""
    return f"{mean:{spec}} ± {_number(stderr, '.4f')}"


def _cmd_xll(args) -> int:
    agents = list(args.agent)
    problems = problems_lib.get_sweep(args.sweep)
    xll_scores.check_options(problems, agents, args.batch_size)
    with store_lib.ResultsStore(args.db, create=False) as store:
        rows = store.rows()
        if not rows:
            raise store_lib.StoreError(f"{args.db!r} holds no results yet")
        for name in agents:
            _check_agent_in_store(name, rows, args.db, "--agent")
        records, notes = xll_scores.xll_scores(store, problems, agents, args.batch_size,
                                               progress=True)
    out = sys.stdout if args.format == "table" else sys.stderr  # CSV and Markdown stay clean
    print(f"sweep: {args.sweep}; " + xll_scores.describe(len(agents), args.batch_size),
          file=out)
    for note in notes:
        print(f"note: {note}", file=out)
    print(scoring.format_records(records, args.format, xll_scores.COLUMNS))
    return 0


def _registered_agent(name: str, rows: Sequence[Mapping[str, Any]]) -> registry.AgentSpec:
    """The agent's spec; for an agent known only from the store, say how to load it."""
    if name not in registry.AGENTS and any(r["agent"] == name for r in rows):
        raise ValueError(f"agent {name!r} has results in the store but is not registered in "
                         "this command: load the module that registers it with --import MODULE")
    return registry.get_agent(name)


def _cmd_merge(args) -> int:
    store_lib.check_writable(args.output)  # before reading anything
    rows, records = [], []
    for path in args.inputs:
        if not os.path.exists(path):
            raise store_lib.StoreError(f"merge input {path!r}: no such file")
        with store_lib.ResultsStore(path, create=False) as source:
            rows += source.rows(predictive=True)
            records += source.studies()
    if not os.path.exists(args.output) or os.path.getsize(args.output) == 0:
        store_lib.merge_plan(rows)  # refuse conflicts before the new store is made
    with store_lib.ResultsStore(args.output) as target:
        # Both refusals come before either write: a conflict anywhere writes nothing.
        store_lib.merge_plan(rows, target.rows())
        store_lib.study_merge_plan(records, target.studies())
        added, duplicates = target.merge(rows)
        studies_added, studies_duplicates = target.merge_studies(records)
    line = (f"merged {len(args.inputs)} stores into {args.output}: {added} rows added, "
            f"{duplicates} exact duplicates skipped")
    if records:
        line += (f"; {studies_added} tal/probe results added, {studies_duplicates} exact "
                 "duplicates skipped")
    print(line)
    return 0


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_SPREADSHEET_NOTE = ("a text cell that a spreadsheet would run as a formula (one starting with "
                     "=, +, -, @, a tab or a carriage return, e.g. an agent's name) is written "
                     "with a leading single quote")


def _spreadsheet_safe(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with each text value that a spreadsheet would run as a formula given a
    leading single quote: OWASP's defence against CSV injection (numbers are not text)."""
    return {key: "'" + value if isinstance(value, str) and value.startswith(_FORMULA_STARTS)
            else value for key, value in record.items()}


def _cmd_export(args) -> int:
    _check_output_file(args.output, "-o")
    with store_lib.ResultsStore(args.db, create=False) as store:
        if args.table == "rows":
            count = store.to_csv(args.output, [_spreadsheet_safe(r) for r in store.rows()])
        else:
            records = [_spreadsheet_safe(r) for r in studies.long_records(store.studies())]
            with outputs.written_whole(args.output, newline="") as f:
                f.write(scoring.format_records(records, "csv", studies.LONG_COLUMNS)
                        or ",".join(studies.LONG_COLUMNS) + "\n")
            count = len(records)
    print(f"wrote {count} {'rows' if args.table == 'rows' else 'study values'} to "
          f"{args.output}")
    return 0


def _figures_module(name: str):
    """A module that draws with matplotlib, or one clear error where matplotlib is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ValueError(f"figures need matplotlib ({error}); install it with "
                         "pip install 'neural-testbed[analysis]'") from None


_COMMANDS = {"run": _cmd_run, "sweep": _cmd_sweep, "leaderboard": _cmd_leaderboard,
             "compare": _cmd_compare, "plot": _cmd_plot, "correlate": _cmd_correlate,
             "diagnose": _cmd_diagnose, "probe": _cmd_probe, "tal": _cmd_tal, "xll": _cmd_xll,
             "merge": _cmd_merge, "reproduce": _cmd_reproduce,
             "export": _cmd_export,
             "agents": lambda args: _cmd_agents(), "problems": _cmd_problems}


# The commands that compute results into --db.
_STORE_WRITERS = ("run", "sweep", "diagnose", "tal", "probe")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neural-testbed`` command; returns the exit status.

    Run as the command (``argv`` None), an interrupted command (Ctrl-C) ends
    the process at once with status 130 after its one-line message, without
    interpreter shutdown (see :func:`_exit_now`); called with ``argv`` it
    returns 130 instead. A full disk ends it the same way, with status 2.
    """
    if sys.stdout is None:  # started with it closed (`>&-`): a file opened later would get
        if sys.stderr is not None:  # its descriptor and receive the output
            print("neural-testbed: error: standard output is closed; redirect it to a file "
                  "or /dev/null instead", file=sys.stderr)
        return 2
    command = None
    try:
        args = _parser().parse_args(argv)
        command = args.command
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
        memory.keep_freed_memory()  # the command owns its process; see memory.py
        compilation_cache.enable()  # likewise; see compilation_cache.py
        runner.use_full_float32_products()  # likewise; see runner.MATMUL_PRECISION
        plugins.load_entry_points()
        for module in args.imports:
            plugins.import_agent_module(module)
        status = _COMMANDS[args.command](args)
        sys.stdout.flush()  # here, so that a closed pipe is met below, not at shutdown
        # Results on wine or digits are never to be read as the paper's datasets'.
        for note in datasets.stand_in_notes(getattr(args, "built_in_datasets", ())):
            print(f"note: {note}", file=sys.stderr)
        return status
    except BrokenPipeError:  # output piped into a reader that stopped (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 141  # as a shell reports a process ended by SIGPIPE
    except (store_lib.StoreFullError, outputs.DiskFullError) as error:
        kept = ""
        if isinstance(error, outputs.DiskFullError) and command in _STORE_WRITERS:
            kept = f"; the results are kept in {args.db!r}"
        print(f"neural-testbed: error: {error}{kept}", file=sys.stderr)
        # Units may still be computing in threads of this process (their results could not
        # be stored anyway); at interpreter shutdown they would fail and warn, one line a
        # problem, so the process ends here, as after Ctrl-C.
        if argv is None:
            _exit_now(2)
        return 2
    except (ValueError, TypeError, store_lib.StoreError) as error:
        print(f"neural-testbed: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Every store is closed by now: the exception has left each `with` block.
        if command in ("run", "sweep", "tal", "probe"):
            print("neural-testbed: interrupted; everything computed so far is in the store, "
                  "rerun the same command to continue", file=sys.stderr)
        else:
            print("neural-testbed: interrupted", file=sys.stderr)
        if argv is None:
            _exit_now(130)
        return 130


def _exit_now(status: int) -> None:
    """Flushes the output and ends the process without interpreter shutdown.

    Ctrl-C interrupts the main thread's wait for an XLA compilation, but the
    compilation goes on in XLA's own thread pool. Interpreter shutdown then
    destroys the JAX client under that thread, which crashes the process with
    a segmentation fault (exit 139) after the message. Nothing is left to
    save at this point (the store is closed, local workers are stopped, a Ray
    cluster started here is shut down), so the process ends here instead.
    """
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:  # as at a normal exit, release the worker pool's semaphores,
        try:  # or multiprocessing's resource tracker warns about them after our last line
            mp_util._exit_function()
        except Exception:  # the process ends anyway
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
