"""Whether two programs that factorise can run at once in one process on this machine.

Not a test. ``run/programs.py`` runs programs holding LAPACK-style primitives one at a
time (``Programs.factorising``) while other programs of units computed at once run side
by side: with JAX 0.10 on the 2-core CPU, two threads each running a batched Cholesky
program hung for good. This starts, in a subprocess with a time limit, two threads that
each run a jitted batched Cholesky + triangular solve + eigh program 60 times (the
``factorising`` case), and the same with matrix products only (``products``); it appends
whether each finished, and in how long, with the machine, date and versions, to
``benchmarks/results/lapack_threads.jsonl``. If the ``factorising`` case finishes on a
later JAX, the lock can go.

Usage:
  PYTHONPATH=. python benchmarks/lapack_threads.py [--limit-s 120]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

RESULTS = pathlib.Path(__file__).parent / "results" / "lapack_threads.jsonl"

_PROGRAM = """
import sys, threading, jax, jax.numpy as jnp
factorise = sys.argv[1] == "factorising"
def one(seed):
    a = jax.random.normal(jax.random.key(seed), (16, 120, 120))
    m = a @ jnp.swapaxes(a, 1, 2) + 120 * jnp.eye(120)
    if not factorise:
        return (m @ jnp.ones((16, 120, 1))).sum()
    low = jnp.linalg.cholesky(m)
    solved = jax.scipy.linalg.solve_triangular(low, jnp.ones((16, 120, 1)), lower=True)
    return solved.sum() + jnp.linalg.eigh(m)[0].sum()
programs = [jax.jit(lambda s: jax.lax.map(one, s)), jax.jit(lambda s: jax.vmap(one)(s))]
def work(program):
    for i in range(60):
        jax.block_until_ready(program(jnp.arange(4) + i))
threads = [threading.Thread(target=work, args=(p,)) for p in programs]
for t in threads: t.start()
for t in threads: t.join()
print("finished", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args()
    import jax
    import jaxlib

    RESULTS.parent.mkdir(exist_ok=True)
    for case in ("products", "factorising"):
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", _PROGRAM, case], capture_output=True,
                                  text=True, timeout=args.limit_s).stdout.strip() == "finished"
        except subprocess.TimeoutExpired:
            done = False
        record = {
            "benchmark": "lapack_threads", "case": case, "finished": done,
            "seconds": round(time.perf_counter() - start, 1), "limit_s": args.limit_s,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "usable_cores":
                        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count()},
            "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__},
            "command": "PYTHONPATH=. python benchmarks/lapack_threads.py",
        }
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        print(f"{case}: {'finished' if done else 'did not finish'} in {record['seconds']} s "
              f"(limit {args.limit_s} s)", flush=True)


if __name__ == "__main__":
    main()
