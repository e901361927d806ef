"""What the diagnostics (issue 14) add to a sweep's time: the same command before and after.

Runs ``neural-testbed run --agent A --sweep quick`` (the default config) from a
git worktree of ``--before`` (a commit without diagnostics) and from this
tree, each into a new store with a warm compilation cache (a first, untimed
run fills it), alternating, and prints per agent the median wall time and the
summed training and evaluation seconds the rows record (compilation apart).

    PYTHONPATH=. python benchmarks/diagnostics_overhead.py --agent mlp --agent ensemble+
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def _run(tree: pathlib.Path, agent: str, sweep: str, work: pathlib.Path, cache: pathlib.Path,
         tag: str) -> tuple[float, float, float]:
    db = work / f"{tag}.db"
    db.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree), JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "neural_testbed.cli", "run", "--agent", agent,
                    "--sweep", sweep, "--db", str(db), "--quiet"], env=env, cwd=work,
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    with sqlite3.connect(db) as conn:
        (train,) = conn.execute("SELECT sum(train_seconds) FROM results WHERE tau = 1").fetchone()
        (evaluate,) = conn.execute("SELECT sum(eval_seconds) FROM results").fetchone()
    return wall, train, evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", default=None)
    parser.add_argument("--sweep", default="quick")
    parser.add_argument("--before", default="9edc86f",
                        help="a commit without diagnostics (default: 9edc86f)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    agents = args.agent or ["mlp", "ensemble+"]
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        before = work / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before),
                        args.before], check=True, capture_output=True)
        try:
            trees = {"before": before, "after": REPO}
            print(f"{'agent':<12}{'tree':<8}{'wall s (median)':>17}{'train s':>10}"
                  f"{'eval s':>10}")
            for agent in agents:
                results = {name: [] for name in trees}
                for name, tree in trees.items():  # warm each tree's compilation cache
                    _run(tree, agent, args.sweep, work, work / f"xla-{name}", name)
                for _ in range(args.repeats):
                    for name, tree in trees.items():
                        results[name].append(_run(tree, agent, args.sweep, work,
                                                  work / f"xla-{name}", name))
                for name, runs in results.items():
                    wall, train, evaluate = (statistics.median(v) for v in zip(*runs))
                    print(f"{agent:<12}{name:<8}{wall:>17.1f}{train:>10.2f}{evaluate:>10.2f}")
                ratio = (statistics.median(r[0] for r in results["after"])
                         / statistics.median(r[0] for r in results["before"]))
                print(f"{agent:<12}after / before wall time: {ratio:.3f}")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(before)], check=False, capture_output=True)


if __name__ == "__main__":
    main()
