"""What each program of a run costs to compile: tracing, lowering and XLA's compile, per program.

Not a test. Issue 45 asks the cold start to be won by compiling less (fewer, smaller
programs), with what each program costs said in a benchmark. This runs one agent's
default config over a sweep in this process, serially (one unit at a time), with JAX's
persistent compilation cache off, so every program of the run is compiled from scratch,
and times, for each program the run path compiles (its key in the run's
:class:`~neural_testbed.run.programs.Programs`: the batch build, the training, and one
evaluation per (tau, estimator)):

- ``trace_s``: Python tracing to a jaxpr (the rest of the first call's compile seconds);
- ``lower_s``: lowering the jaxpr to StableHLO;
- ``compile_s``: XLA's compile of it;
- ``hlo_lines``: lines of the StableHLO text, a measure of the program's size.

The record (machine, date, versions, command, every program's figures) is appended to
``benchmarks/results/program_costs.jsonl`` and a table printed.

Usage:
  PYTHONPATH=. python benchmarks/program_costs.py                  # mlp on smoke
  PYTHONPATH=. python benchmarks/program_costs.py --agent ensemble --sweep quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
import time

os.environ["NEURAL_TESTBED_CACHE_DIR"] = "off"  # before the package sets the cache up
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)

import jax  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

from neural_testbed import agents, leaderboard  # noqa: E402
from neural_testbed.run import programs as programs_lib  # noqa: E402

RESULTS = pathlib.Path("/tmp/pc.jsonl")


def measure(agent: str, sweep: str) -> dict[str, object]:
    """Runs the agent's default config over the sweep; every program's costs."""
    jax.config.update("jax_enable_compilation_cache", False)
    compiled: list[dict[str, float]] = []  # lower and compile of each program, in order
    plain_compile = programs_lib.compile_traced

    def timed_compile(traced):
        start = time.perf_counter()
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        executable = lowered.compile()
        compiled.append({"lower_s": lowered_at - start,
                         "compile_s": time.perf_counter() - lowered_at,
                         "hlo_lines": lowered.as_text().count("\n")})
        return executable

    programs: list[dict[str, object]] = []
    plain_run = programs_lib.Programs.run

    def timed_run(self, key, program, args):
        before = len(compiled)
        result, compile_seconds, run_seconds = plain_run(self, key, program, args)
        if len(compiled) > before:  # compiled by this call (one unit at a time)
            costs = compiled[-1]
            # Keys: ("build", shape, batch), (runner, "train", batch) and (runner,
            # "evaluate", tau, estimator, batch).
            name = "build" if key[0] == "build" else " ".join(map(str, key[1:-1]))
            programs.append({"program": name,
                             "batch": key[-1],
                             "trace_s": round(compile_seconds - costs["lower_s"]
                                              - costs["compile_s"], 3),
                             "lower_s": round(costs["lower_s"], 3),
                             "compile_s": round(costs["compile_s"], 3),
                             "hlo_lines": costs["hlo_lines"],
                             "first_run_s": round(run_seconds, 3)})
        return result, compile_seconds, run_seconds

    programs_lib.compile_traced = timed_compile
    programs_lib.Programs.run = timed_run
    try:
        spec = agents.get_agent(agent)
        problems = list(leaderboard.get_sweep(sweep).values())
        start = time.perf_counter()
        leaderboard.run_agent(lambda shapes: spec.make(spec.default, shapes), problems, agent,
                              config=spec.default, progress=False, units_at_once=1)
        wall = time.perf_counter() - start
    finally:
        programs_lib.compile_traced = plain_compile
        programs_lib.Programs.run = plain_run
    return {
        "benchmark": "program_costs", "agent": agent, "sweep": sweep,
        "problems": len(problems), "programs": programs, "wall_s": round(wall, 2),
        "compiling_s": round(sum(p["trace_s"] + p["lower_s"] + p["compile_s"]
                                 for p in programs), 2),
        "command": f"PYTHONPATH=. python benchmarks/program_costs.py --agent {agent} "
                   f"--sweep {sweep}",
        "load_average_before": round(os.getloadavg()[0], 2),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": mechanisms._machine(), "versions": mechanisms._versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--sweep", default="smoke")
    args = parser.parse_args()
    record = measure(args.agent, args.sweep)
    RESULTS.parent.mkdir(exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    print(f"{args.agent} on {args.sweep} ({record['problems']} problems), no compilation "
          f"cache: {record['wall_s']:.1f} s, {record['compiling_s']:.1f} s of it compiling")
    print(f"{'program':<28} {'batch':>5} {'trace':>7} {'lower':>7} {'compile':>8} "
          f"{'HLO lines':>9} {'run':>7}")
    for p in record["programs"]:
        print(f"{p['program']:<28} {p['batch']:>5} {p['trace_s']:>6.2f}s {p['lower_s']:>6.2f}s "
              f"{p['compile_s']:>7.2f}s {p['hlo_lines']:>9} {p['first_run_s']:>6.2f}s")


if __name__ == "__main__":
    main()
