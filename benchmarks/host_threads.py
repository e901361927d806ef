"""How many threads a PyTorch host agent should train with, beside the JAX evaluator.

Not a test. The command trains a host agent's problems in Python while it evaluates
others in compiled JAX programs, which use every core; PyTorch's default intra-op
thread count is also the machine's cores, so the two thread pools compete. This
times the training of ``examples/torch_dropout.py`` (its default config, 1,000 Adam
steps, on a smoke problem) with ``torch.set_num_threads(N)`` for each N asked for
(``default``: PyTorch's own count), once alone and once while another thread keeps a
jitted JAX program running (as the evaluator does), and appends each figure with the
machine, date and versions to ``benchmarks/results/host_threads.jsonl``.

Needs torch in the environment (``pip install torch``).

Usage:
  PYTHONPATH=. python benchmarks/host_threads.py --threads default 1
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results" / "host_threads.jsonl"
EXAMPLE = HERE.parent / "examples" / "torch_dropout.py"


def _busy_jax(stop: threading.Event) -> None:
    """Runs a jitted, multithreaded JAX program until ``stop`` is set."""
    import jax
    import jax.numpy as jnp

    program = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
    a = jax.random.normal(jax.random.key(0), (1024, 1024))
    while not stop.is_set():
        jax.block_until_ready(program(a))


def _train_seconds(agent, data, prior, beside_jax: bool) -> float:
    stop = threading.Event()
    busy = threading.Thread(target=_busy_jax, args=(stop,)) if beside_jax else None
    if busy:
        busy.start()
        time.sleep(1.0)  # the JAX program compiled and running
    start = time.perf_counter()
    agent.train(0, data, prior)
    seconds = time.perf_counter() - start
    stop.set()
    if busy:
        busy.join()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", nargs="+", default=["default", "1"])
    args = parser.parse_args()
    import numpy as np
    import torch

    from neural_testbed import base, leaderboard
    from neural_testbed.agents import plugins

    module = plugins.import_agent_module(str(EXAMPLE))
    problem = leaderboard.get_sweep("smoke")["classification_2d/110"]
    data, prior, _ = problem.instance()
    data = base.Data(np.asarray(data.x), np.asarray(data.y))
    agent = module.make_torch_dropout(module.TorchDropoutConfig(), base.Shapes.of(problem))
    default = torch.get_num_threads()
    for threads in args.threads:
        torch.set_num_threads(default if threads == "default" else int(threads))
        for beside_jax in (False, True):
            load = os.getloadavg()[0]
            seconds = _train_seconds(agent, data, prior, beside_jax)
            record = {
                "benchmark": "host_threads", "threads": threads,
                "torch_threads": torch.get_num_threads(), "beside_jax": beside_jax,
                "train_s": round(seconds, 2), "problem": problem.problem_id,
                "command": "PYTHONPATH=. python benchmarks/host_threads.py --threads "
                           + " ".join(args.threads),
                "load_average_before": round(load, 2),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "machine": mechanisms._machine(),
                "versions": {**mechanisms._versions(), "torch": torch.__version__}}
            with open(RESULTS, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
            print(f"torch threads {threads:>7} ({record['torch_threads']}), "
                  f"{'beside a JAX program' if beside_jax else 'alone':>20}: "
                  f"training {seconds:.1f} s")


if __name__ == "__main__":
    main()
