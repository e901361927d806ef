"""Time and peak memory of each agent on the `classification` sweep, cell by cell.

Not a test. The reference's current sweep spans d in {2, 10, 100} and T = {1, 10, 100,
1000} x d: its largest problems train on 100,000 pairs of 100 inputs. For each agent
asked for, this runs its default config on one problem of every (d, T) cell
(temperature 0.1, seed 0), each in a fresh process (``leaderboard.run_agent``, what
``neural-testbed run`` does), and records per cell the wall time, the compilation, the
training and each tau's evaluation seconds and the process's peak resident memory. A
cell that runs past ``--timeout`` or fails is recorded so. From the cells it estimates
the whole sweep's cost: per cell one compilation and 15 problems' training and
evaluation (the sweep's 3 temperatures x 5 seeds share the cell's programs). Appends
one record per agent, with the machine, date, versions and command, to
``benchmarks/results/classification_sweep.jsonl``.

Usage:
  PYTHONPATH=. python benchmarks/classification_sweep.py --agents mlp ensemble
  PYTHONPATH=. python benchmarks/classification_sweep.py --agents knn --timeout 120
  PYTHONPATH=. python benchmarks/classification_sweep.py --agents sgmcmc \
      --cells classification/50 classification/110    # some cells only (no sweep estimate)
  PYTHONPATH=. python benchmarks/classification_sweep.py --table   # the records, as Markdown
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mechanisms  # noqa: E402  (machine and versions, recorded alike)

RESULTS = pathlib.Path(__file__).parent / "results" / "classification_sweep.jsonl"
PROBLEMS_PER_CELL = 15  # 3 temperatures x 5 seeds

_CELL = """
import functools, json, resource, sys, time
from neural_testbed import agents, leaderboard
agent, pid = sys.argv[1], sys.argv[2]
problem = leaderboard.get_sweep("classification")[pid]
spec = agents.get_agent(agent)
start = time.perf_counter()
rows = leaderboard.run_agent(functools.partial(spec.make, spec.default), [problem], agent,
                             config=spec.default, progress=False)
wall = time.perf_counter() - start
first = min(rows, key=lambda r: r.tau)
print(json.dumps({
    "wall_s": round(wall, 2), "compile_s": round(first.compile_seconds, 2),
    "train_s": round(first.train_seconds, 2),
    "eval_s": {str(r.tau): round(r.eval_seconds, 2) for r in rows},
    "status": sorted({r.status for r in rows}), "errors": sorted({r.error for r in rows if r.error}),
    "kl": {str(r.tau): r.kl for r in rows},
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def _cells():
    from neural_testbed import leaderboard

    sweep = leaderboard.get_sweep("classification")
    return [(pid, p.input_dim, p.num_train) for pid, p in sweep.items()
            if p.temperature == 0.1 and p.seed == 0]


def measure(agent: str, timeout: float, only: list[str] | None = None) -> dict[str, object]:
    cells, estimate, complete = [], 0.0, not only
    for pid, d, t in _cells():
        if only and pid not in only:
            continue
        load = os.getloadavg()[0]
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", _CELL, agent, pid], capture_output=True,
                                  text=True, timeout=timeout)
            cell = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                    else {"status": ["crashed"], "errors": [done.stderr.strip()[-300:]]})
        except subprocess.TimeoutExpired:
            cell = {"status": ["timeout"], "wall_s": round(time.perf_counter() - start, 1)}
        cell.update(problem_id=pid, input_dim=d, num_train=t, load_average_before=round(load, 2))
        cells.append(cell)
        print(f"{agent:>20} d={d:<3} T={t:<6} {cell.get('status')} wall "
              f"{cell.get('wall_s')} s, peak {cell.get('peak_rss_mb')} MB", flush=True)
        if cell["status"] == ["ok"]:
            per_problem = cell["train_s"] + sum(cell["eval_s"].values())
            estimate += cell["compile_s"] + PROBLEMS_PER_CELL * per_problem
        else:
            complete = False
    return {
        "benchmark": "classification_sweep", "agent": agent, "cells": cells,
        "sweep_estimate_s": round(estimate) if complete else None,
        "estimate_of_cells_that_ran_s": round(estimate),
        "command": f"PYTHONPATH=. python benchmarks/classification_sweep.py --agents {agent} "
                   f"--timeout {timeout:g}" + (f" --cells {' '.join(only)}" if only else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": mechanisms._machine(), "versions": mechanisms._versions(),
    }


def table(records: list[dict]) -> str:
    """Each agent's newest record as a Markdown row (for docs/speed.md): a record of every
    cell gives the whole sweep's estimate, one of some cells only what those cells cost."""
    from neural_testbed.leaderboard import scoring

    newest = {}
    for r in records:
        whole = r["sweep_estimate_s"] is not None
        if whole or newest.get(r["agent"], r)["sweep_estimate_s"] is None:
            newest[r["agent"]] = r
    num_cells, rows = len(_cells()), []
    # Whole-sweep estimates first, by cost; partial records after them, where their
    # cost of some cells would otherwise read as a cheap sweep.
    order = sorted(newest.items(), key=lambda a: (a[1]["sweep_estimate_s"] is None,
                                                  a[1]["estimate_of_cells_that_ran_s"]))
    for agent, r in order:
        ran = [c for c in r["cells"] if c["status"] == ["ok"]]
        slowest = max(ran, key=lambda c: c["wall_s"], default=None)
        slow = (f"{slowest['wall_s']:g} s (d = {slowest['input_dim']}, "
                f"T = {slowest['num_train']:,})" if slowest else "none ran")
        stopped = [f"d = {c['input_dim']}, T = {c['num_train']:,}: {c['status'][0]}"
                   for c in r["cells"] if c["status"] != ["ok"]]
        if stopped:
            slow += "; " + ", ".join(stopped)
        peak = max((c["peak_rss_mb"] for c in ran), default=None)
        loads = [c["load_average_before"] for c in r["cells"]]
        rows.append({
            "agent": agent,
            "whole sweep": (f"about {r['sweep_estimate_s']:,} s" if r["sweep_estimate_s"]
                            is not None else f"not estimated ({len(ran)} of {num_cells} "
                                             "cells ran)"),
            "slowest cell (one problem)": slow,
            "peak memory": f"{peak:,} MB" if peak else "-",
            "load average": f"{min(loads):g}-{max(loads):g}",
            "measured": f"{r['date'][:10]}, {r['versions'].get('commit', '?')}",
        })
    return scoring.format_records(rows, "markdown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["mlp"])
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds a cell may take (default 600)")
    parser.add_argument("--cells", nargs="+", metavar="ID",
                        help="only these cells' problems (ids of the temperature-0.1, seed-0 "
                             "problems); the whole sweep is then not estimated")
    parser.add_argument("--table", action="store_true",
                        help="only print each agent's newest record as a Markdown table")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in RESULTS.read_text().splitlines()]))
        return
    cell_ids = {pid for pid, _, _ in _cells()}
    for pid in args.cells or ():
        if pid not in cell_ids:
            parser.error(f"--cells {pid!r} is not a cell's problem; allowed: "
                         f"{', '.join(sorted(cell_ids))}")
    RESULTS.parent.mkdir(exist_ok=True)
    for agent in args.agents:
        record = measure(agent, args.timeout, args.cells)
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{agent}: whole sweep about {record['sweep_estimate_s']} s "
              f"(cells that ran: {record['estimate_of_cells_that_ran_s']} s)", flush=True)


if __name__ == "__main__":
    main()
