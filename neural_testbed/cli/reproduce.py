"""`reproduce`: recompute a sample of the published baseline results and check them."""

from __future__ import annotations

import sys

from neural_testbed.agents import registry
from neural_testbed.cli import options
from neural_testbed.leaderboard import baselines, scoring


def _add_reproduce(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "reproduce", parents=[g.common, g.sweep, g.fmt],
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
    parser.add_argument("--agent", required=True, help="an agent of the published results")
    parser.add_argument("--problems", type=int, default=6, metavar="N",
                        help="how many problems to recompute (default: 6)")
    parser.set_defaults(handler=reproduce)


# What each verdict of the paired check reads as.
_PAIRED = {None: f"too few problems to tell (fewer than {baselines.PAIRED_MIN_PROBLEMS})",
           True: f"zero within {baselines.AGREEMENT_SIGMAS:g} standard errors",
           False: "not zero"}


def reproduce(args) -> int:
    """`reproduce`: exit status 0 where the published rows are reproduced, row by row or
    on average (:attr:`baselines.Reproduction.verdict`)."""
    if args.problems < 1:
        raise ValueError(f"--problems must be an integer >= 1, got {args.problems}")
    registry.get_agent(args.agent)  # an unknown agent is refused before the problems are read
    problems = options.sweep_problems(args)
    result = baselines.reproduce(args.agent, problems, args.problems, sweep_name=args.sweep,
                                 announce=lambda line: print(line, file=sys.stderr))
    print(scoring.format_records(result.records, args.format, (
        "problem_id", "tau", "published", "recomputed", "diff", "stderr", "agree")))
    print(f"{result.agree} of {len(result.records)} rows agree within "
          f"{baselines.AGREEMENT_SIGMAS:g} standard errors of the difference (their test "
          "samples')" + (f"; {result.failed} rows failed" if result.failed else ""))
    for check in result.paired:
        print(f"tau = {check['tau']}: mean difference {check['mean_diff']:+.4g} ± "
              f"{check['stderr']:.2g} over {check['problems']} problems: "
              f"{_PAIRED[check['agree']]}")
    if result.verdict == "on average":
        print("the rows that differ more moved with their training run (float rounding, as in "
              "a batch of another size or on another machine, sends a long training "
              "elsewhere); on average the published rows are reproduced")
    return 0 if result.reproduced else 1


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"reproduce": _add_reproduce}
