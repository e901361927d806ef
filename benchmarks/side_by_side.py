"""The command's wall time at two commits, side by side on this machine, cold and warm.

Not a test. A loaded or busy machine runs everything slower, so figures compare only
when taken together: this extracts ``--before`` (a commit) with ``git archive``, then
runs ``neural-testbed run --agent A --sweep S`` from each tree in turn (``--rounds``
times, alternating), each round with a new, empty compilation cache (cold) and then
again with the cache it filled (warm), every run into a new store. Appends each run
(tree, commit, round, cold/warm, wall seconds, the command's own time line), with the
machine, date, versions and load, to ``benchmarks/results/side_by_side.jsonl``.

Usage:
  PYTHONPATH=. python benchmarks/side_by_side.py --before 28f1f48 --sweep smoke
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
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results" / "side_by_side.jsonl"


def _commit(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], capture_output=True, text=True,
                          cwd=HERE, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--agent", default="mlp")
    parser.add_argument("--sweep", default="smoke")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import jax

    RESULTS.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        old = pathlib.Path(scratch) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.before], capture_output=True,
                                 cwd=HERE, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        trees = {"before": (old, _commit(args.before)), "now": (HERE.parent, _commit("HEAD"))}
        for round_ in range(1, args.rounds + 1):
            for name, (tree, commit) in trees.items():
                cache = pathlib.Path(scratch) / f"cache-{name}-{round_}"
                for run in ("cold", "warm"):
                    db = pathlib.Path(scratch) / f"{name}-{round_}-{run}.db"
                    env = dict(os.environ, PYTHONPATH=str(tree), NEURAL_TESTBED_CACHE_DIR=str(cache))
                    load = os.getloadavg()[0]
                    start = time.perf_counter()
                    done = subprocess.run(
                        [sys.executable, "-m", "neural_testbed.cli", "run", "--agent", args.agent,
                         "--sweep", args.sweep, "--db", str(db), "--quiet"],
                        env=env, capture_output=True, text=True, check=True)
                    wall = time.perf_counter() - start
                    line = next(x for x in done.stdout.splitlines() if x.startswith("time:"))
                    record = {
                        "benchmark": "side_by_side", "tree": name, "commit": commit,
                        "round": round_, "run": run, "wall_s": round(wall, 2), "time_line": line,
                        "command": f"neural-testbed run --agent {args.agent} --sweep {args.sweep}",
                        "load_average_before": round(load, 2),
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                            timespec="seconds"),
                        "machine": {"platform": platform.platform(), "usable_cores": len(
                            os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                            else os.cpu_count()},
                        "versions": {"jax": jax.__version__, "python": platform.python_version()},
                    }
                    with open(RESULTS, "a") as f:
                        f.write(json.dumps(record, sort_keys=True) + "\n")
                    print(f"round {round_} {name} ({commit}) {run}: {wall:.1f} s; {line}",
                          flush=True)


if __name__ == "__main__":
    main()
