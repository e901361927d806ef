"""`inputs` and `score`: joint predictions of a model in any framework, scored from arrays
(:mod:`neural_testbed.leaderboard.arrays`)."""

from __future__ import annotations

import os
import sys

from neural_testbed.agents import registry
from neural_testbed.cli import checks, options
from neural_testbed.leaderboard import arrays
from neural_testbed.leaderboard import store as store_lib


def _add_inputs(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "inputs", parents=[g.common, g.sweep],
        help="write what a model must predict on a sweep, as NumPy files",
        description="One .npz per problem in --out (classification_5.npz for "
                    "classification/5): x_train [T, d], y_train [T], num_classes, num_samples "
                    "(M) and, per tau, x_tau<tau> [N, A + 1, d] (each test tau-sample's A "
                    "distinct inputs, then its out-of-distribution input) and index_tau<tau> "
                    "[N, tau] (which of them each of its tau inputs is). Predict M belief "
                    "samples at them (sample m of tau-sample n one network at all its inputs) "
                    "and save probs_tau<tau> [N, M, A + 1, K] (or logits_tau<tau>) in a file "
                    "of the same name for `score`.")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the files")
    options.add_problem_ids(parser)
    parser.set_defaults(handler=inputs)


def _add_score(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "score", parents=[g.common, g.db, g.sweep],
        help="score a model's predictions from arrays into the store",
        description="Score the predictions files in --predictions (written as `inputs` "
                    "describes) with the estimators, test labels and standard errors a JAX "
                    "agent gets, and store the rows under --agent, beside the agents' rows "
                    "(`leaderboard` and `compare` then rank it). A problem whose predictions "
                    "cannot be scored gets failed rows saying why; one without a file is "
                    "left out.")
    parser.add_argument("--agent", required=True, metavar="NAME",
                        help="the name of your model's rows (not a registered agent's)")
    parser.add_argument("--predictions", required=True, metavar="DIR",
                        help="directory of the predictions files")
    options.add_problem_ids(parser)
    parser.set_defaults(handler=score)


def inputs(args) -> int:
    """`inputs`: the sweep's problems as arrays, one file each."""
    problems = list(options.sweep_problems(args).values())
    checks.output_dir(args.out, "--out")
    print(f"writing {len(problems)} problems' arrays to {args.out} ...", file=sys.stderr)
    paths = arrays.write_problem_arrays(problems, args.out)
    print(f"wrote {len(paths)} files to {args.out}")
    return 0


def score(args) -> int:
    """`score`: predictions from files, scored into the store."""
    if args.agent in registry.AGENTS:
        raise ValueError(f"--agent {args.agent!r} is a registered agent; name your model's "
                         "rows otherwise, so that they never mix with that agent's")
    problems = list(options.sweep_problems(args).values())
    _some_predictions(args.predictions, problems)
    with store_lib.ResultsStore(args.db) as store:
        done = arrays.score_directory(problems, args.predictions, args.agent, store)
    for problem_id, error in done.failed.items():
        print(f"failed: {problem_id}: {error}", file=sys.stderr)
    if done.missing:
        print(f"note: no predictions file for {len(done.missing)} of {len(problems)} problems "
              f"(e.g. {done.missing[0]})", file=sys.stderr)
    print(f"scored {len(done.scored)} problems into {args.db} ({len(done.failed)} failed); "
          f"`neural-testbed leaderboard --sweep {args.sweep}` ranks them")
    return 0


def _some_predictions(directory: str, problems) -> None:
    """Refuses, before the store is opened, a directory with no problem's predictions."""
    if not os.path.isdir(directory):
        raise ValueError(f"--predictions {directory!r} is not a directory; save the "
                         "predictions files there as `neural-testbed inputs --help` describes")
    if not any(os.path.exists(os.path.join(directory, arrays.file_name(p.problem_id)))
               for p in problems):
        raise ValueError(f"--predictions {directory!r} holds no predictions file for any of "
                         f"the {len(problems)} problems (e.g. "
                         f"{arrays.file_name(problems[0].problem_id)})")


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"inputs": _add_inputs, "score": _add_score}
