"""Wall time of a config sweep with and without configs batched (`--configs-per-batch`).

Not a test. Runs `neural-testbed sweep --agent A --sweep S --configs-per-batch N` as a
subprocess for each N, each cold (a new, empty compilation cache) into a new store, as a
user's first sweep runs, then reads both stores and prints how far each config's rows
moved from N = 1's (they differ in float32 rounding only), in standard errors. On
whatever device JAX sees: on a GPU it shows what batching configs does to launch-bound
sweeps (`--batches 1,14`: mlp's two groups of 7; `--agent bbb --batches 1,8`: 86 configs in 7
groups, long).

Usage:
  PYTHONPATH=. python benchmarks/config_sweep.py                        # mlp, smoke, N 1 and 7
  PYTHONPATH=. python benchmarks/config_sweep.py --agent dropout --batches 1,16
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time


def _sweep(agent: str, sweep: str, per_batch: int, cache: str, db: str) -> float:
    env = dict(os.environ, NEURAL_TESTBED_CACHE_DIR=cache)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "neural_testbed.cli", "sweep", "--agent", agent,
                    "--sweep", sweep, "--db", db, "--quiet", "--configs-per-batch",
                    str(per_batch)], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start


def _rows(db: str) -> dict:
    with sqlite3.connect(db) as conn:
        return {tuple(r[:3]): r[3:] for r in conn.execute(
            "SELECT config_hash, problem_id, tau, kl, kl_stderr FROM results")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--sweep", default="smoke")
    parser.add_argument("--batches", default="1,7", help="values of --configs-per-batch")
    args = parser.parse_args()
    sizes = [int(n) for n in args.batches.split(",")]
    device = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()[0])"],
                            capture_output=True, text=True).stdout.strip()
    print(f"device {device}, {os.cpu_count()} CPU cores, load average "
          f"{os.getloadavg()[0]:.1f}; neural-testbed sweep --agent {args.agent} --sweep "
          f"{args.sweep}, cold")
    with tempfile.TemporaryDirectory() as scratch:
        stores = {}
        for n in sizes:
            stores[n] = os.path.join(scratch, f"n{n}.db")
            wall = _sweep(args.agent, args.sweep, n, os.path.join(scratch, f"cache{n}"),
                          stores[n])
            print(f"--configs-per-batch {n}: {wall:.1f} s wall")
        reference = _rows(stores[sizes[0]])
        for n in sizes[1:]:
            rows = _rows(stores[n])
            moved = [abs(rows[k][0] - kl) / se for k, (kl, se) in reference.items()
                     if k in rows and se and se > 0]
            same = sum(rows.get(k) == v for k, v in reference.items())
            print(f"N = {n} vs {sizes[0]}: {len(rows)} rows ({len(reference)}), {same} identical, "
                  f"largest difference {max(moved, default=float('nan')):.2g} standard errors")


if __name__ == "__main__":
    main()
