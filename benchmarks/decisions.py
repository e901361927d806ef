"""What the decision tasks cost per agent, and what each agent reaches in them.

Not a test. Issue 49 asks the cost per agent of the bandit and of active learning in a
benchmark, and whether greedy (a single mlp: one network, no exploration) does worse
than Thompson sampling with a posterior. For each agent this compiles the task's
program over all seeds (:func:`neural_testbed.bandit.seeds_program`,
:func:`neural_testbed.active.classification.active_program`), then times it running,
and appends a record to ``benchmarks/results/decisions.jsonl`` with the machine, date,
versions and command: the agent's config, compile and run seconds, and per seed

- ``bandit``: the cumulative regret (with its mean and standard error over seeds);
- ``active``: d_KL at tau = 1 after the last label and its mean over the trainings.

Usage:
  PYTHONPATH=. python benchmarks/decisions.py bandit --agent mlp \
      --agent ensemble:num_ensemble=10 --seeds 8
  PYTHONPATH=. python benchmarks/decisions.py active --agent mlp --priority entropy --seeds 4
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
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

from neural_testbed import bandit, base  # noqa: E402
from neural_testbed.active import classification  # noqa: E402
from neural_testbed.agents import registry  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results" / "decisions.jsonl"


def _summary(values: np.ndarray) -> tuple[float, float | None]:
    """Mean and standard error; no standard error from one seed (JSON has no NaN)."""
    if len(values) < 2:
        return round(float(values.mean()), 4), None
    return round(float(values.mean()), 4), round(float(values.std(ddof=1) /
                                                       np.sqrt(len(values))), 4)


def measure(task: str, agent: str, setting, seeds: int) -> dict[str, object]:
    """``agent`` is a name, or ``name:field=value,...`` (fields of its default config)."""
    name, _, overrides = agent.partition(":")
    spec = registry.get_agent(name)
    config = registry.parse_overrides(spec, [o for o in overrides.split(",") if o])
    built = spec.make(config, base.Shapes(setting.input_dim, 2))
    program = (bandit.seeds_program if task == "bandit" else
               classification.active_program)(built, setting)
    keys = bandit.seed_keys(range(seeds))
    start = time.perf_counter()
    compiled = jax.jit(program).lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    run = jax.block_until_ready(compiled(keys))
    seconds = time.perf_counter() - start
    if task == "bandit":
        per_seed = {"cumulative_regret": np.asarray(run.regret).sum(1, dtype=np.float64)}
    else:
        kl = np.asarray(run.kl, np.float64)
        per_seed = {"final_kl": kl[:, -1], "mean_kl": kl.mean(1)}
    record = {"task": task, "agent": name, "config": dataclasses.asdict(config),
              "seeds": seeds, "compile_s": round(compile_s, 2), "run_s": round(seconds, 2),
              "run_s_per_seed": round(seconds / seeds, 3)}
    for metric, values in per_seed.items():
        record[metric], record[f"{metric}_stderr"] = _summary(values)
        record[f"{metric}_per_seed"] = [round(float(v), 4) for v in values]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["bandit", "active"])
    parser.add_argument("--agent", action="append", required=True)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--steps", type=int, help="steps (bandit) or labels (active)")
    parser.add_argument("--retrain-every", type=int, help="bandit: steps between trainings")
    parser.add_argument("--batch-size", type=int, help="active: labels per training")
    parser.add_argument("--priority", default="entropy", help="active: the priority")
    args = parser.parse_args()
    if args.task == "bandit":
        setting = bandit.BanditSetting(**{k: v for k, v in (
            ("num_steps", args.steps), ("retrain_every", args.retrain_every)) if v})
    else:
        setting = classification.ActiveSetting(priority=args.priority, **{k: v for k, v in (
            ("num_steps", args.steps), ("batch_size", args.batch_size)) if v})
    RESULTS.parent.mkdir(exist_ok=True)
    for agent in args.agent:
        record = {"benchmark": "decisions", **measure(args.task, agent, setting, args.seeds),
                  "setting": dataclasses.asdict(setting),
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds"),
                  "load_average_before": round(os.getloadavg()[0], 2),
                  "machine": mechanisms._machine(), "versions": mechanisms._versions(),
                  "command": "PYTHONPATH=. python " + " ".join(["benchmarks/decisions.py",
                                                                *sys.argv[1:]])}
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record, allow_nan=False) + "\n")
        metric = "cumulative_regret" if args.task == "bandit" else "final_kl"
        stderr = record[metric + "_stderr"]
        spread = "(one seed)" if stderr is None else f"± {stderr:.2g}"
        print(f"{agent:32s} {metric} {record[metric]:.4g} {spread}  "
              f"run {record['run_s']:.1f} s (compile {record['compile_s']:.1f} s)")


if __name__ == "__main__":
    main()
