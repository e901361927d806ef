"""What OpenBLAS's thread pool costs the LAPACK calls of JAX programs on this machine.

Not a test. On a CPU, jaxlib runs a program's triangular solves, inverses and other
LAPACK-style primitives through scipy's OpenBLAS, which by default starts a thread per
core; XLA's own threads hold those cores, and OpenBLAS's wait for them. The command
(``neural_testbed.cli``) therefore sets ``OPENBLAS_NUM_THREADS=1`` for its process and
the workers it starts unless the user has set it. This times, in fresh subprocesses with
the variable unset and set to 1: a jitted triangular solve (``[50, 50]`` by
``[50, 100]``, float32, median of 50 calls) and 200 training steps of the svgp agent
(M = 50 inducing inputs, T = 100, one compiled program); it appends the figures, the
load average, the machine, date and versions to ``benchmarks/results/openblas_threads.jsonl``.

Usage:
  PYTHONPATH=. python benchmarks/openblas_threads.py
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys

RESULTS = pathlib.Path(__file__).parent / "results" / "openblas_threads.jsonl"

_PROGRAM = """
import json, statistics, time, jax, jax.numpy as jnp, numpy as np
from neural_testbed import base
from neural_testbed.agents import svgp
rng = np.random.default_rng(0)
a = rng.normal(size=(50, 50)).astype(np.float32)
low = jnp.linalg.cholesky(jnp.asarray(a @ a.T + 50 * np.eye(50, dtype=np.float32)))
rhs = jnp.asarray(rng.normal(size=(50, 100)).astype(np.float32))
solve = jax.jit(lambda low, rhs: jax.scipy.linalg.solve_triangular(low, rhs, lower=True))
solve(low, rhs).block_until_ready()
times = []
for _ in range(50):
    start = time.perf_counter()
    solve(low, rhs).block_until_ready()
    times.append(time.perf_counter() - start)
x = jnp.asarray(rng.normal(size=(100, 2)).astype(np.float32))
data = base.Data(x, (x[:, 0] > 0).astype(jnp.int32))
prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50), temperature=0.1)
agent = svgp.make_svgp_agent(svgp.SVGPConfig(num_steps=200), base.Shapes(2, 2))
train = jax.jit(agent.train).lower(jax.random.key(0), data, prior).compile()
start = time.perf_counter()
jax.block_until_ready(train(jax.random.key(0), data, prior))
print(json.dumps({"solve_ms": 1e3 * statistics.median(times),
                  "svgp_200_steps_s": time.perf_counter() - start}))
"""


def main() -> None:
    import jax
    import jaxlib

    RESULTS.parent.mkdir(exist_ok=True)
    for setting in (None, "1"):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if setting is not None:
            env["OPENBLAS_NUM_THREADS"] = setting
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True,
                             text=True, check=True).stdout
        record = {
            "benchmark": "openblas_threads", "OPENBLAS_NUM_THREADS": setting or "unset",
            **{k: round(v, 4) for k, v in json.loads(out).items()},
            "load_average_1min": round(load, 2),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "usable_cores":
                        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count()},
            "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__},
            "command": "PYTHONPATH=. python benchmarks/openblas_threads.py",
        }
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        print(json.dumps(record, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
