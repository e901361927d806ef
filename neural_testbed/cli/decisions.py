"""`bandit` and `active`: the decision tasks, which ask whether an agent's belief makes good
decisions; `correlate-decisions`: whether d_KL predicts them across agents."""

from __future__ import annotations

import dataclasses
import functools
import sys

from neural_testbed import bandit as bandit_lib
from neural_testbed import base
from neural_testbed.active import classification
from neural_testbed.agents import registry
from neural_testbed.cli import checks, figures, options
from neural_testbed.leaderboard import counted, decision_correlation, scoring, studies, study_runs
from neural_testbed.leaderboard import problems as problems_lib
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


def _check_seeds(args) -> None:
    for flag, value in (("--seeds", args.seeds), ("--seeds-per-unit", args.seeds_per_unit)):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")


def _agent_and_drawing(args, task: str):
    """The agent's spec and config, and the module that draws the figure (None without
    --out), every one checked before any work: a decision task's labels are two classes."""
    spec = registry.get_agent(args.agent)
    config = registry.parse_overrides(spec, args.overrides)
    if "classification" not in spec.targets:
        raise ValueError(f"agent {args.agent!r} is for regression only; {task} needs an agent "
                         "of two classes")
    drawing = None
    if args.out:
        drawing = figures.load(args.command)
        checks.output_file(args.out, "--out")
    return spec, config, drawing


def _setting(args) -> bandit_lib.BanditSetting:
    _check_seeds(args)
    return bandit_lib.BanditSetting(input_dim=args.input_dim, temperature=args.temperature,
                                    num_actions=args.num_actions, num_steps=args.steps,
                                    retrain_every=args.retrain_every)


def bandit(args) -> int:
    """`bandit`: one agent config's runs into the store; every stored config's regret."""
    setting = _setting(args)
    spec, config, drawing = _agent_and_drawing(args, "the bandit")
    run = study_runs.run_bandit(
        args.db, args.agent, functools.partial(spec.make, config), config, setting,
        range(args.seeds), seeds_per_unit=args.seeds_per_unit, recompute=args.recompute,
        progress=not args.quiet,
        announce=lambda reused: sys.stderr.write(  # one write: see cli/compute.py
            f"bandit: agent {args.agent}: {config}; {args.seeds} seeds, d = "
            f"{setting.input_dim}, {setting.actions} actions, temperature "
            f"{setting.temperature}, {setting.num_steps} steps, trained every "
            f"{setting.retrain_every}" + (f"; {reused} seeds reused from {args.db}"
                                          if reused else "") + "\n"))
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
    if drawing:
        title = (f"Thompson sampling, d = {setting.input_dim}, {setting.actions} actions, "
                 f"temperature {setting.temperature}")
        print(f"wrote {drawing.figure_regret(summary, args.out, title)}", file=notes)
    per_seed = f" ({run.seconds / run.computed:.1f} s a seed)" if run.computed else ""
    print(f"{run.computed} seeds computed in {run.seconds:.1f} s{per_seed}, {run.reused} "
          f"reused from {args.db}", file=notes)
    return 0


def _add_active(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "active", parents=[g.common, g.db, g.one_agent, g.fmt, g.study],
        help="classification active learning: the agent's belief picks the labels it "
             "learns from; d_KL after each batch, per priority",
        description="Each seed draws the testbed's random-MLP environment (two classes, "
                    "--temperature) and a pool of inputs from N(0, I); a label is drawn from "
                    "the environment each time an input is chosen. The agent starts from one "
                    "random label; after each training on its labels so far it is scored "
                    "(d_KL at tau = 1 on fresh test inputs) and a priority of its belief "
                    "samples at the pool (enn's: uniform, variance, nll, joint_nll, "
                    "entropy, margin, bald, var_ratios) picks the next --batch-size inputs. "
                    "Prints, per agent config and priority stored with these settings, the "
                    "final d_KL and its mean over the trainings (mean ± se over seeds). "
                    "Each unit of seeds is stored in --db when done; a rerun reuses them. "
                    "d = 10, temperature 0.1 and 20 pool inputs per dimension are the "
                    "reference's (neural_testbed/active_learning).")
    setting = classification.ActiveSetting()
    parser.add_argument("--priority", default=",".join(classification.PRIORITIES),
                        metavar="P1,P2,...", help="priorities to run, each its own run "
                        f"(default: all: {','.join(classification.PRIORITIES)})")
    parser.add_argument("--seeds", type=int, default=8, metavar="N",
                        help="problems 0 .. N-1, one environment each (default: 8)")
    parser.add_argument("--steps", type=int, default=setting.num_steps,
                        help=f"labels in all (default: {setting.num_steps})")
    parser.add_argument("--batch-size", type=int, default=setting.batch_size, metavar="B",
                        help=f"labels chosen per training (default: {setting.batch_size})")
    parser.add_argument("--input-dim", type=int, default=setting.input_dim, metavar="D",
                        help=f"input dimension (default: {setting.input_dim})")
    parser.add_argument("--temperature", type=float, default=setting.temperature,
                        help=f"the environment's temperature (default: {setting.temperature})")
    parser.add_argument("--pool-size", type=int, metavar="N",
                        help="inputs in the pool (default: 20 x the input dimension)")
    parser.add_argument("--num-samples", type=int, default=setting.num_samples, metavar="M",
                        help="belief samples for the priorities and the score (default: "
                             f"{setting.num_samples})")
    parser.add_argument("--seeds-per-unit", type=int, default=4, metavar="K",
                        help="seeds computed in one program and stored together (default: 4)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="also draw every printed run's d_KL against the labels here")
    parser.set_defaults(handler=active)


def _active_settings(args) -> list[classification.ActiveSetting]:
    _check_seeds(args)
    priorities = list(dict.fromkeys(p.strip() for p in args.priority.split(",")))
    return [classification.ActiveSetting(
        priority=p, input_dim=args.input_dim, temperature=args.temperature,
        pool_size=args.pool_size, num_steps=args.steps, batch_size=args.batch_size,
        num_samples=args.num_samples) for p in priorities]


def active(args) -> int:
    """`active`: one agent config's runs per priority into the store; every stored config
    and priority of these settings, scored."""
    settings = _active_settings(args)
    spec, config, drawing = _agent_and_drawing(args, "active learning")
    runs = [study_runs.run_active(
        args.db, args.agent, functools.partial(spec.make, config), config, setting,
        range(args.seeds), seeds_per_unit=args.seeds_per_unit, recompute=args.recompute,
        progress=not args.quiet,
        announce=lambda reused, setting=setting: sys.stderr.write(  # one write, as above
            f"active: agent {args.agent}: {config}; priority {setting.priority}; "
            f"{args.seeds} seeds, d = {setting.input_dim}, pool {setting.pool}, "
            f"{setting.num_steps} labels in batches of {setting.batch_size}"
            + (f"; {reused} seeds reused from {args.db}" if reused else "") + "\n"))
        for setting in settings]
    every = [dataclasses.replace(settings[0], priority=p) for p in classification.PRIORITIES]
    with store_lib.ResultsStore(args.db, create=False) as store:
        summary = studies.active_summary(r for s in every for r in store.studies(
            study="active", settings_hash=studies.settings_hash(
                "active", studies.active_settings_json(s))))
    records = [{k: r[k] for k in ("agent", "config_hash", "priority", "seeds", "final_kl",
                                  "final_kl_se", "mean_kl", "mean_kl_se")} for r in summary]
    notes = options.notes_stream(args)
    print(f"d_KL at tau = 1 after {settings[0].num_steps} labels and its mean over the "
          "trainings (mean ± se over seeds), every agent config and priority stored with "
          "these settings:", file=notes)
    print(scoring.format_records(records, args.format, list(records[0])))
    if drawing:
        title = (f"active learning, d = {settings[0].input_dim}, pool {settings[0].pool}, "
                 f"temperature {settings[0].temperature}")
        print(f"wrote {drawing.figure_active(summary, args.out, title)}", file=notes)
    computed, seconds = sum(r.computed for r in runs), sum(r.seconds for r in runs)
    print(f"{computed} runs computed in {seconds:.1f} s, {sum(r.reused for r in runs)} reused "
          f"from {args.db}", file=notes)
    return 0


_TRIVIAL = ("uniform", "average_class_probs")  # no belief to decide with: left out by default
_SWEEPS = ("classification", "paper")  # d_KL^1 and ^10 (dyadic), d_KL^1 and ^100 (2021)


def _add_correlate_decisions(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "correlate-decisions", parents=[g.common, g.db, g.fmt, g.study],
        help="do joint predictions drive decisions? across agents, d_KL^1 and d_KL^tau "
             "against bandit regret and active-learning gain",
        description="Runs the bandit and active learning (uniform and --priority) for every "
                    "agent's default config, reusing what --db holds, then correlates across "
                    "the agents their d_KL^1 and d_KL^tau (classification: tau = 10 with "
                    "dyadic inputs; paper: tau = 100), from --db and the published rows, "
                    "with each decision: Spearman's rho with 5th and 95th bootstrap "
                    "percentiles (seeds and problems resampled, agents kept), and how much "
                    "better d_KL^tau predicts than d_KL^1 (advantage). The defaults are the "
                    "reference's settings of both tasks.")
    bandit_setting, active_setting = bandit_lib.BanditSetting(), classification.ActiveSetting()
    parser.add_argument("--agent", metavar="A1,A2,...",
                        help="agents, each at its default config (default: every registered "
                             "agent the decision tasks can run, but the trivial baselines)")
    parser.add_argument("--seeds", type=int, default=8, metavar="N",
                        help="seeds 0 .. N-1 of each task (default: 8)")
    parser.add_argument("--steps", type=int, default=bandit_setting.num_steps,
                        help=f"the bandit's steps (default: {bandit_setting.num_steps})")
    parser.add_argument("--retrain-every", type=int, default=bandit_setting.retrain_every,
                        metavar="STEPS", help="the bandit's steps between trainings "
                        f"(default: {bandit_setting.retrain_every})")
    parser.add_argument("--labels", type=int, default=active_setting.num_steps,
                        help=f"active learning's labels (default: {active_setting.num_steps})")
    parser.add_argument("--batch-size", type=int, default=active_setting.batch_size,
                        metavar="B", help="active learning's labels per training (default: "
                        f"{active_setting.batch_size})")
    parser.add_argument("--priority", default="bald",
                        choices=[p for p in classification.PRIORITIES if p != "uniform"],
                        help="the priority whose gain over uniform labelling is correlated "
                             "(default: bald)")
    parser.add_argument("--num-bootstrap", type=int, default=1000, metavar="B",
                        help="bootstrap draws (default: 1000)")
    parser.add_argument("--seeds-per-unit", type=int, default=4, metavar="K",
                        help="seeds computed in one program and stored together (default: 4)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="also draw each decision against each d_KL, a point per agent")
    parser.set_defaults(handler=correlate_decisions)


def _decision_agents(args) -> tuple[list[str], list[str]]:
    """The agents asked for, each checked to run both tasks, before any work; without
    --agent, also the registered ones left out because they cannot."""
    if args.agent:
        names = list(dict.fromkeys(a.strip() for a in args.agent.split(",") if a.strip()))
    else:
        names = [n for n, s in registry.AGENTS.items()
                 if "classification" in s.targets and n not in _TRIVIAL]
    able, unable = [], []
    for name in names:
        spec = registry.get_agent(name)
        if "classification" not in spec.targets:
            raise ValueError(f"agent {name!r} is for regression only; the decision tasks need "
                             "an agent of two classes")
        agent = spec.make(spec.default, base.Shapes(bandit_lib.BanditSetting().input_dim, 2))
        try:
            bandit_lib.check_agent(agent, "the decision tasks")
        except ValueError as error:
            if args.agent:
                raise ValueError(f"agent {name!r}: {error}") from None
            unable.append(name)  # random_forest (a host agent); hmc (declines padding)
            continue
        able.append(name)
    if len(able) < 3:
        raise ValueError(f"a correlation across agents needs 3 agents, got {len(able)} "
                         f"({', '.join(able) or 'none'})")
    return able, unable


def correlate_decisions(args) -> int:
    """`correlate-decisions`: every agent's decision runs into the store, then the table."""
    _check_seeds(args)
    if args.num_bootstrap < 1:
        raise ValueError(f"--num-bootstrap must be an integer >= 1, got {args.num_bootstrap}")
    agents, unable = _decision_agents(args)
    bandit_setting = bandit_lib.BanditSetting(num_steps=args.steps,
                                              retrain_every=args.retrain_every)
    active_settings = [classification.ActiveSetting(priority=p, num_steps=args.labels,
                                                    batch_size=args.batch_size)
                       for p in ("uniform", args.priority)]
    drawing = None
    if args.out:
        drawing = figures.load(args.command)
        checks.output_file(args.out, "--out")
    tasks = [("bandit", bandit_setting, study_runs.run_bandit),
             *(("active", s, study_runs.run_active) for s in active_settings)]
    seeds, computed = range(args.seeds), 0
    for name in agents:
        spec = registry.get_agent(name)
        for task, setting, run_task in tasks:
            what = task if task == "bandit" else f"active ({setting.priority})"
            run = run_task(
                args.db, name, functools.partial(spec.make, spec.default), spec.default,
                setting, seeds, seeds_per_unit=args.seeds_per_unit, recompute=args.recompute,
                progress=not args.quiet,
                announce=lambda reused, what=what, name=name: print(
                    f"correlate-decisions: {name}: {what}, {args.seeds - reused} seeds to "
                    f"compute, {reused} reused from {args.db}", file=sys.stderr))
            computed += run.computed
    hashes = counted.default_hashes(agents)
    with store_lib.ResultsStore(args.db, create=False) as store:
        regrets = decision_correlation.bandit_regrets(store.studies(
            study="bandit", settings_hash=studies.settings_hash(
                "bandit", studies.bandit_settings_json(bandit_setting))), hashes, seeds)
        gains = decision_correlation.active_gains(
            [r for s in active_settings for r in store.studies(
                study="active", settings_hash=studies.settings_hash(
                    "active", studies.active_settings_json(s)))], hashes, args.priority,
            seeds)
        rows = store.rows()
    sweeps, notes = {}, []
    for sweep in _SWEEPS:
        problems = problems_lib.get_sweep(sweep)
        counted_rows, sweep_notes = counted.counted_rows(rows, problems, None)
        notes += sweep_notes
        sweeps[sweep] = (problems, decision_correlation.kl_values(counted_rows, problems,
                                                                  hashes))
    if unable:
        notes.append(f"left out, as the decision tasks cannot run them: {', '.join(unable)}")
    options.print_notes(args, notes)
    records = decision_correlation.correlate_decisions(
        {"bandit": regrets, "active": gains}, sweeps, args.num_bootstrap, seed=0)
    out = options.notes_stream(args)
    print(f"agents: {', '.join(agents)}; seeds 0..{args.seeds - 1}; bandit: d = "
          f"{bandit_setting.input_dim}, {bandit_setting.num_steps} steps, trained every "
          f"{bandit_setting.retrain_every}; active: d = {active_settings[0].input_dim}, "
          f"{args.labels} labels in batches of {args.batch_size}\n"
          + decision_correlation.describe(args.priority, args.num_bootstrap, seed=0), file=out)
    print(scoring.format_records(records, args.format, decision_correlation.COLUMNS))
    if drawing:
        print(f"wrote {drawing.figure_decision_correlation(records, args.out)}", file=out)
    print(f"{computed} seed runs computed, the rest reused from {args.db}", file=out)
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"bandit": _add_bandit, "active": _add_active,
           "correlate-decisions": _add_correlate_decisions}
