"""What a process pays before any work: the interpreter, importing the command, and JAX's
first operation.

Not a test. A short run (the ``smoke`` sweep with a warm cache) is start-up-bound, and so
is every process the test suite starts (its test processes, the commands and workers its
tests run): a second of start-up is most of a warm ``smoke`` run. This starts a new
interpreter ``--repeats`` times for each stage and times it from outside:

- ``python``: the interpreter alone;
- ``ml_dtypes``: importing ``ml_dtypes``, JAX's extra dtypes (imported by JAX itself);
- ``jax``: importing JAX and running one operation;
- ``command``: importing ``neural_testbed.cli``, the command.

The medians are appended, with the machine, date, versions (numpy's and ml_dtypes'
among them) and command, to ``benchmarks/results/startup.jsonl``, and printed. Run it
once per installed version to compare them, in the same hour.

Usage:
  PYTHONPATH=. python benchmarks/startup.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

RESULTS = pathlib.Path(__file__).parent / "results" / "startup.jsonl"
STAGES = {
    "python": "pass",
    "ml_dtypes": "import ml_dtypes",
    "jax": "import jax.numpy as jnp; (jnp.zeros(1) + 1).block_until_ready()",
    "command": "import neural_testbed.cli",
}


def _seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ,
                   JAX_PLATFORMS="cpu"))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    _seconds(STAGES["command"])  # files into the page cache
    medians = {stage: round(statistics.median(_seconds(code) for _ in range(args.repeats)), 3)
               for stage, code in STAGES.items()}
    record = {"benchmark": "startup", "median_s": medians, "repeats": args.repeats,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "load_average_before": round(os.getloadavg()[0], 2),
              "machine": mechanisms._machine(), "versions": mechanisms._versions(),
              "command": "PYTHONPATH=. python " + " ".join(["benchmarks/startup.py",
                                                            *sys.argv[1:]])}
    RESULTS.parent.mkdir(exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(record) + "\n")
    for stage, seconds in medians.items():
        print(f"{stage:10s} {seconds:6.3f} s")
    print(f"versions: {record['versions']}")


if __name__ == "__main__":
    main()
