"""`bandit`: the decision tasks, which ask whether an agent's belief makes good decisions."""

from __future__ import annotations

import functools
import math
import sys

from neural_testbed import bandit as bandit_lib
from neural_testbed.agents import registry
from neural_testbed.cli import checks, figures, options
from neural_testbed.leaderboard import scoring, studies, study_runs
from neural_testbed.leaderboard import store as store_lib


def _add_bandit(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "bandit", parents=[g.common, g.db, g.one_agent, g.fmt, g.study],
        help="Thompson sampling by an agent on a contextual bandit made from the testbed's "
             "environment: its regret",
        description="Each seed draws a bandit: the testbed's random-MLP environment (two "
                    "classes, --temperature) and a pool of actions with N(0, I) features; "
                    "an action pays 1 with the environment's probability of class 1 there. "
                    "At each step the agent draws one belief sample and takes the action it "
                    "rates best; it is trained again on all its data every --retrain-every "
                    "steps. Regret is the best action's probability minus the one taken. "
                    "Prints every agent config stored with these settings: cumulative "
                    "regret (mean ± se over seeds) and the share of steps that took the "
                    "best action. Each unit of seeds is stored in --db when done; a rerun "
                    "with the same settings reuses them (Ctrl-C and rerun to resume). The "
                    "defaults are the reference's (neural_testbed/bandit).")
    setting = bandit_lib.BanditSetting()
    parser.add_argument("--seeds", type=int, default=8, metavar="N",
                        help="bandits 0 .. N-1, one environment each (default: 8)")
    parser.add_argument("--steps", type=int, default=setting.num_steps,
                        help=f"steps of each run (default: {setting.num_steps})")
    parser.add_argument("--retrain-every", type=int, default=setting.retrain_every,
                        metavar="STEPS", help="steps between trainings on all the data so "
                        f"far (default: {setting.retrain_every})")
    parser.add_argument("--input-dim", type=int, default=setting.input_dim, metavar="D",
                        help=f"the actions' feature dimension (default: {setting.input_dim})")
    parser.add_argument("--temperature", type=float, default=setting.temperature,
                        help=f"the environment's temperature (default: {setting.temperature})")
    parser.add_argument("--num-actions", type=int, metavar="A",
                        help="actions in the pool (default: 50 x the input dimension)")
    parser.add_argument("--seeds-per-unit", type=int, default=4, metavar="K",
                        help="seeds computed in one program and stored together (default: 4)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="also draw every printed agent's cumulative regret against the "
                             "step here")
    parser.set_defaults(handler=bandit)


def _setting(args) -> bandit_lib.BanditSetting:
    for flag, value in (("--seeds", args.seeds), ("--seeds-per-unit", args.seeds_per_unit)):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    return bandit_lib.BanditSetting(input_dim=args.input_dim, temperature=args.temperature,
                                    num_actions=args.num_actions, num_steps=args.steps,
                                    retrain_every=args.retrain_every)


def bandit(args) -> int:
    """`bandit`: one agent config's runs into the store; every stored config's regret."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    setting = _setting(args)
    if "classification" not in spec.targets:
        raise ValueError(f"agent {args.agent!r} is for regression only; the bandit's rewards "
                         "are two classes")
    if args.out:  # checked before any work
        drawing = figures.load("bandit")
        checks.output_file(args.out, "--out")
    run = study_runs.run_bandit(
        args.db, args.agent, functools.partial(spec.make, config), config, setting,
        range(args.seeds), seeds_per_unit=args.seeds_per_unit, recompute=args.recompute,
        progress=not args.quiet,
        announce=lambda reused: print(
            f"bandit: agent {args.agent}: {config}; {args.seeds} seeds, d = "
            f"{setting.input_dim}, {setting.actions} actions, temperature "
            f"{setting.temperature}, {setting.num_steps} steps, trained every "
            f"{setting.retrain_every}" + (f"; {reused} seeds reused from {args.db}"
                                          if reused else ""), file=sys.stderr))
    settings_hash = studies.settings_hash("bandit", studies.bandit_settings_json(setting))
    with store_lib.ResultsStore(args.db, create=False) as store:
        summary = studies.bandit_summary(
            store.studies(study="bandit", settings_hash=settings_hash))
    records = [{"agent": r["agent"], "config_hash": r["config_hash"], "seeds": r["seeds"],
                "regret": r["regret"], "regret_se": r["regret_se"],
                "best_action_share": r["best_action_share"]} for r in summary]
    notes = options.notes_stream(args)
    print(f"cumulative regret after {setting.num_steps} steps (mean ± se over seeds), every "
          "agent config stored with these settings:", file=notes)
    print(scoring.format_records(records, args.format, list(records[0])))
    if args.out:
        title = (f"Thompson sampling, d = {setting.input_dim}, {setting.actions} actions, "
                 f"temperature {setting.temperature}")
        print(f"wrote {drawing.figure_regret(summary, args.out, title)}", file=notes)
    computed = f"{run.computed} seeds computed in {run.seconds:.1f} s"
    per_seed = run.seconds / run.computed if run.computed else math.nan
    print(f"{computed}" + (f" ({per_seed:.1f} s a seed)" if run.computed else "")
          + f", {run.reused} reused from {args.db}", file=notes)
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"bandit": _add_bandit}
