"""What the Thompson-sampling bandit costs per agent, and the regret each reaches.

Not a test. Issue 49 asks the bandit's cost per agent in a benchmark, and whether greedy
(a single mlp: its one network, no exploration) does worse than Thompson sampling with
a posterior. This runs :func:`neural_testbed.bandit.run_seeds` for each agent (one
program over the seeds, compiled ahead, then timed running)
and records, per agent, its config, compile and run seconds and the cumulative regret
at the end (mean and standard error over seeds), appended with the machine, date,
versions and command to ``benchmarks/results/bandit.jsonl``, and printed.

Usage:
  PYTHONPATH=. python benchmarks/bandit.py --agent mlp --agent ensemble:num_ensemble=10 \
      --steps 1000 --retrain-every 50 --seeds 4
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

from neural_testbed import bandit, base  # noqa: E402
from neural_testbed.agents import registry  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results" / "bandit.jsonl"


def measure(agent: str, setting: bandit.BanditSetting, seeds: int) -> dict[str, object]:
    """``agent`` is a name, or ``name:field=value,...`` (fields of its default config)."""
    name, _, overrides = agent.partition(":")
    spec = registry.get_agent(name)
    config = registry.parse_overrides(spec, [o for o in overrides.split(",") if o])
    built = spec.make(config, base.Shapes(setting.input_dim, 2))
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds, dtype=jnp.uint32))  # run_seeds' keys
    start = time.perf_counter()
    program = jax.jit(jax.vmap(lambda key: bandit.run_thompson(key, built, setting))).lower(
        keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    run = jax.block_until_ready(program(keys))
    seconds = time.perf_counter() - start
    total = np.asarray(run.regret).sum(axis=1, dtype=np.float64)
    return {"agent": name, "config": dataclasses.asdict(config), "seeds": seeds,
            "compile_s": round(compile_s, 2), "run_s": round(seconds, 2),
            "run_s_per_seed": round(seconds / seeds, 3),
            "cumulative_regret": round(float(total.mean()), 3),
            "cumulative_regret_stderr": round(float(total.std(ddof=1) / np.sqrt(seeds)), 3),
            "per_seed": [round(float(t), 3) for t in total]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", required=True)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--retrain-every", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--input-dim", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.1)
    args = parser.parse_args()
    setting = bandit.BanditSetting(input_dim=args.input_dim, temperature=args.temperature,
                                   num_steps=args.steps, retrain_every=args.retrain_every)
    RESULTS.parent.mkdir(exist_ok=True)
    for agent in args.agent:
        record = {"benchmark": "bandit", **measure(agent, setting, args.seeds),
                  "setting": {**dataclasses.asdict(setting), "num_actions": setting.actions},
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds"),
                  "load_average_before": round(os.getloadavg()[0], 2),
                  "machine": mechanisms._machine(), "versions": mechanisms._versions(),
                  "command": "PYTHONPATH=. python " + " ".join(["benchmarks/bandit.py",
                                                                *sys.argv[1:]])}
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{agent:32s} regret {record['cumulative_regret']:8.2f} ± "
              f"{record['cumulative_regret_stderr']:.2f}  run {record['run_s']:.1f} s "
              f"(compile {record['compile_s']:.1f} s)")


if __name__ == "__main__":
    main()
