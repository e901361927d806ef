"""Wall time of a command run cold (empty compilation cache) and warm (the cache the cold
run filled), each into a new store, as a user runs it.

Not a test. Runs `neural-testbed run --agent A --sweep S` as a subprocess: first
with a new, empty cache directory (NEURAL_TESTBED_CACHE_DIR), then --repeats times
more with the same cache, every run into its own new store so that every result
is computed again. Prints each run's wall seconds (interpreter start and imports
included) and the command's own compiling figure, and the medians of the
warm runs. The machine's load average is printed: timings on a shared machine
are noisy.

Usage:
  PYTHONPATH=. python benchmarks/cold_and_warm.py                       # mlp, quick sweep
  PYTHONPATH=. python benchmarks/cold_and_warm.py --sweep paper --repeats 3
  PYTHONPATH=. python benchmarks/cold_and_warm.py --sweep paper --problems-per-batch 210
  PYTHONPATH=. python benchmarks/cold_and_warm.py --sweep paper --matmul-precision tensorfloat32

``--matmul-precision`` runs the command with the runner's ``MATMUL_PRECISION`` replaced
(the command fixes its products to full float32 on every device): on a GPU, the warm
runs of ``float32`` against ``tensorfloat32`` are what full float32 costs.
Environment variables
reach the command, so JAX's and XLA's settings can be tried the same way, e.g.
``JAX_THREEFRY_GPU_KERNEL_LOWERING=true`` (the hash behind every random draw as one
CUDA kernel, the same bits) or ``XLA_FLAGS=--xla_gpu_autotune_level=0``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

_SHOWN = ("XLA_FLAGS", "JAX_THREEFRY_GPU_KERNEL_LOWERING")  # settings a run is printed with

# The command, with the run's matrix-product precision replaced (sys.argv[1]).
_PATCHED = """
import sys
from neural_testbed.run import programs
programs.MATMUL_PRECISION = sys.argv.pop(1)
from neural_testbed import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _run(agent: str, sweep: str, cache: str, db: str, more: list[str],
         precision: str | None) -> tuple[float, float, str]:
    env = dict(os.environ, NEURAL_TESTBED_CACHE_DIR=cache)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    command = ["-m", "neural_testbed.cli"] if precision is None else ["-c", _PATCHED, precision]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *command, "run", "--agent", agent,
                           "--sweep", sweep, "--db", db, "--quiet", *more],
                          env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    compiling = re.search(r"\(([\d.]+) s (?:of it compiling|compiling, added up)", proc.stdout)
    aggregate = next(line for line in proc.stdout.splitlines() if line.startswith("aggregate"))
    return wall, float(compiling.group(1)) if compiling else float("nan"), aggregate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--sweep", default="quick")
    parser.add_argument("--repeats", type=int, default=2, help="warm runs after the cold one")
    parser.add_argument("--problems-per-batch", type=int, default=None,
                        help="passed to the command (default: its own)")
    parser.add_argument("--matmul-precision", default=None,
                        choices=("float32", "tensorfloat32", "bfloat16"),
                        help="replaces the command's matrix-product precision (default: its own, "
                             "full float32)")
    args = parser.parse_args()
    more = ([] if args.problems_per_batch is None
            else ["--problems-per-batch", str(args.problems_per_batch)])
    print(f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; "
          f"neural-testbed run --agent {args.agent} --sweep {args.sweep} {' '.join(more)}"
          f"{'' if args.matmul_precision is None else '; products in ' + args.matmul_precision}"
          f"{''.join(f'; {k}={v}' for k, v in sorted(os.environ.items()) if k in _SHOWN)}")
    with tempfile.TemporaryDirectory() as scratch:
        cache = os.path.join(scratch, "cache")
        warm = []
        for i in range(1 + args.repeats):
            wall, compiling, aggregate = _run(args.agent, args.sweep, cache,
                                              os.path.join(scratch, f"r{i}.db"), more,
                                              args.matmul_precision)
            print(f"{'cold' if i == 0 else 'warm'}: {wall:.1f} s wall, {compiling:.1f} s of it "
                  f"compiling (the command's count); {aggregate}")
            if i:
                warm.append(wall)
        if warm:
            print(f"median warm: {statistics.median(warm):.1f} s; load average "
                  f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
