"""`agents` and `problems`: what can be run, listed."""

from __future__ import annotations

from neural_testbed.agents import registry
from neural_testbed.cli import options


def _add_agents(commands, g: options.Groups) -> None:
    parser = commands.add_parser("agents", parents=[g.common],
                                 help="list the registered agents and their defaults")
    parser.set_defaults(handler=agents)


def _add_problems(commands, g: options.Groups) -> None:
    parser = commands.add_parser("problems", parents=[g.common, g.sweep],
                                 help="list the problems of a sweep")
    parser.set_defaults(handler=problems)


def agents(args) -> int:
    """`agents`: each registered agent, its config sweeps and its default config."""
    for name, spec in sorted(registry.AGENTS.items()):
        print(f"{name}: {spec.description}")
        print(f"  sweep: {len(spec.sweep())} configs")
        for sweep_name, make in sorted(spec.other_sweeps.items()):
            print(f"  sweep --configs {sweep_name}: {len(make())} configs")
        for field, value in vars(spec.default).items():
            print(f"  {field} = {value!r}")
    return 0


def problems(args) -> int:
    """`problems`: one line per problem of the sweep (or --dataset file)."""
    sweep = options.sweep_problems(args)
    real = any(p.metric == "nll" for p in sweep.values())
    regression = any(p.target == "regression" for p in sweep.values())
    first = "dataset" if real else "d, noise" if regression else "temperature"
    print(f"{'problem_id':<24}{first:>14}{'T':>6}{'seed':>6}  taus      N     M  metric")
    for p in sweep.values():
        taus = ",".join(map(str, p.taus))
        where = (p.stratum[0] if real else f"{p.input_dim}, {p.noise_variance:g}" if regression
                 else f"{p.temperature:g}")
        print(f"{p.problem_id:<24}{where:>14}{p.num_train:>6}{p.seed:>6}  "
              f"{taus:<8}{p.num_test:>5}{p.num_samples:>6}  {p.metric}")
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"agents": _add_agents, "problems": _add_problems}
