"""Seconds per problem of each agent's default config, on whatever device JAX sees.

Not a test. Each agent runs through ``leaderboard.run_agent`` (the runner the CLI
uses: problems of a shape trained together, training sets padded where the agent
accepts it) on a sweep's problems, in this process with an empty in-memory
compilation cache (the persistent one is left off unless you set
``JAX_COMPILATION_CACHE_DIR``), and the script prints a Markdown table: per agent,
the wall seconds of the whole run, the part of it spent compiling, and the seconds
per problem without compilation (both taus, training and evaluation). The device
and the load average are printed: timings on a shared machine are noisy.

Usage:
  PYTHONPATH=. python benchmarks/seconds_per_problem.py                  # the 7 paper agents, smoke
  PYTHONPATH=. python benchmarks/seconds_per_problem.py --agents mlp ensemble --sweep quick
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import time

import jax

from neural_testbed import agents, leaderboard

PAPER_AGENTS = ["mlp", "ensemble", "dropout", "bbb", "hypermodel", "ensemble+", "sgmcmc"]


def time_agent(name: str, problems) -> tuple[float, float, int]:
    """(wall seconds, compile seconds, problems) of one agent's default config."""
    spec = agents.get_agent(name)
    jax.clear_caches()  # every agent starts from nothing compiled in this process
    start = time.perf_counter()
    build = functools.partial(spec.make, spec.default)
    rows = leaderboard.run_agent(build, problems, name, config=spec.default,
                                 progress=False)
    wall = time.perf_counter() - start
    failed = [r for r in rows if r.status != "ok"]
    if failed:
        raise SystemExit(f"{name} failed on {failed[0].problem_id}: {failed[0].error}")
    # Each problem's rows (one per tau) carry the same share of the compile time.
    compiling = sum({r.problem_id: r.compile_seconds for r in rows}.values())
    return wall, compiling, len(problems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=PAPER_AGENTS)
    parser.add_argument("--sweep", default="smoke")
    args = parser.parse_args()
    problems = list(leaderboard.get_sweep(args.sweep).values())
    device = jax.devices()[0]
    kind = device.device_kind if device.platform != "cpu" else f"{os.cpu_count()}-core CPU"
    print(f"device: {kind} ({platform.machine()}), JAX {jax.__version__}; sweep {args.sweep} "
          f"({len(problems)} problems); load average {os.getloadavg()[0]:.1f}\n")
    print("| agent | wall s | of it compiling | s / problem without compiling |")
    print("|---|---|---|---|")
    for name in args.agents:
        wall, compiling, count = time_agent(name, problems)
        print(f"| {name} | {wall:.1f} | {compiling:.1f} | {(wall - compiling) / count:.2f} |",
              flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
