"""Wall time of one agent config on a sweep, serial, with local workers, and on Ray.

Usage: python benchmarks/scale_out.py [--sweep paper] [--agent mlp] [--ray-tasks 200]

Each mode runs the agent's default config on every problem into a fresh
store (compilation included, as a user sees it). Also measures Ray's per-task
overhead: the wall time of ``--ray-tasks`` empty tasks on the same local
cluster, per task.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from neural_testbed import agents, leaderboard


def _sweep(agent: str, problems, **kwargs) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        with leaderboard.ResultsStore(os.path.join(tmp, "r.db")) as store:
            start = time.perf_counter()
            summary = leaderboard.run_sweep(agent, [agents.get_agent(agent).default], problems,
                                            store, progress=False, **kwargs)
            seconds = time.perf_counter() - start
    assert summary.failed == 0, summary
    return seconds


def _ray_task_overhead(num_tasks: int) -> float:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        noop = ray.remote(lambda: None)
        ray.get([noop.remote() for _ in range(20)])  # warm the workers
        start = time.perf_counter()
        ray.get([noop.remote() for _ in range(num_tasks)])
        return (time.perf_counter() - start) / num_tasks
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="paper")
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--ray-tasks", type=int, default=200)
    parser.add_argument("--modes", default="serial,workers2,ray2")
    args = parser.parse_args()
    problems = list(leaderboard.get_sweep(args.sweep).values())
    modes = {
        "serial": dict(workers=1),
        "workers2": dict(workers=2),
        "ray2": dict(backend="ray", workers=2),
    }
    print(f"{args.agent} default config on {args.sweep} ({len(problems)} problems), "
          f"{os.cpu_count()} cpus")
    for name in args.modes.split(","):
        print(f"{name:>9}: {_sweep(args.agent, problems, **modes[name]):.1f} s", flush=True)
    if "ray2" in args.modes:
        print(f"Ray per-task overhead: {_ray_task_overhead(args.ray_tasks) * 1000:.2f} ms "
              f"(median of 1 run of {args.ray_tasks} empty tasks)")


if __name__ == "__main__":
    main()
