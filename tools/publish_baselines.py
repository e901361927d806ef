"""Computes the published baseline results and packs them into the package's table.

Not part of the package: the maintainers' way to (re)make
``neural_testbed/leaderboard/published_baselines.json.gz``. The rows are computed by
the project's own command, ``neural-testbed run --agent A --sweep S`` (each agent's
default config), into one results store, which resumes where it stopped (and
computes again the problems whose rows failed: a failure may be the device's). After each
(agent, sweep) the table is rewritten from the store, with how many problems of
each sweep every agent has, so a partial table is always consistent and can be
committed as it grows. On a new machine, ``--resume-from-table`` first fills a new
store with the published rows, so that the computation goes on from where the
table got.

Usage:
  PYTHONPATH=. python tools/publish_baselines.py --db baselines.db --compute
  PYTHONPATH=. python tools/publish_baselines.py --db baselines.db --compute \
      --resume-from-table --compute-sweeps classification --compute-agents uniform,mlp
  PYTHONPATH=. python tools/publish_baselines.py --db baselines.db   # only repack the table
  PYTHONPATH=. python tools/publish_baselines.py --db baselines.db --computed-on \
      "2026-11-27 on an NVIDIA H200, JAX 0.11.2"  # repack after merging another machine's rows
  PYTHONPATH=. python tools/publish_baselines.py --progress            # the README's table
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys

import jax

import neural_testbed
from neural_testbed.agents import registry
from neural_testbed.leaderboard import baselines, problems, store

# Cheapest first, so that a partial table covers as many agents as it can; each sweep
# runs the agents whose targets include its problems'.
AGENTS = ("uniform", "average_class_probs", "mlp", "logistic", "knn", "random_forest",
          "ensemble", "laplace", "deep_kernel", "ensemble+", "dropout", "epinet", "svgp", "bbb",
          "hypermodel", "sgmcmc", "hmc", "oracle_gp", "gp", "cnp")
SWEEPS = ("paper", "real", "regression", "classification")


def agents_for(sweep: str, agents) -> list[str]:
    """The agents of ``agents`` that can be evaluated on ``sweep``'s problems."""
    target = next(iter(problems.get_sweep(sweep).values())).target
    return [a for a in agents if target in registry.get_agent(a).targets]


def _computed_on() -> str:
    device = jax.devices()[0]
    where = (f"{device.device_kind}" if device.platform == "gpu"
             else f"{os.cpu_count()}-core {platform.machine()} CPU")
    return (f"{datetime.date.today().isoformat()} on a {where}, JAX {jax.__version__}, "
            "by `neural-testbed run --agent A --sweep S` (default configs, agent seed 0)")


def pack(db: str, agents, sweeps, out, computed_on: str | None = None) -> None:
    """Rewrites the table at ``out`` from the store: an (agent, sweep) whose rows are
    unchanged keeps the provenance it had there; one with new or recomputed rows is
    stamped ``computed_on`` (default: this machine, today)."""
    with store.ResultsStore(db, create=False) as results:
        rows = results.rows()
    sweep_problems = {s: problems.get_sweep(s) for s in sweeps}
    sweep_agents = {s: agents_for(s, agents) for s in sweeps}
    stamp = computed_on or _computed_on()
    before = {}
    if os.path.exists(out):
        old = baselines.load(out)
        sweep_of = {pid: name for name, ids in old.sweeps.items() for pid in ids}
        rows_before: dict = {}
        for r in old.rows:
            rows_before.setdefault((r.agent, sweep_of.get(r.problem_id)), set()).add(
                _fingerprint(r))
        before = {(p["agent"], p["sweep"]): (rows_before.get((p["agent"], p["sweep"]), set()),
                                             p.get("computed", old.computed))
                  for p in old.progress}

    def provenance(agent: str, sweep: str, part: list) -> str:
        rows_then, earlier = before.get((agent, sweep), (None, None))
        return earlier if rows_then == {_fingerprint(r) for r in part} else stamp

    table = baselines.build_table(rows, sweep_problems, sweep_agents, neural_testbed.__version__,
                                  provenance)
    baselines.write_table(table, out)
    done = ", ".join(f"{p['agent']} {p['problems']}/{p['of']}" for p in table["progress"])
    print(f"wrote {out}: {len(table['rows'])} rows; {done}", flush=True)


def _fingerprint(row) -> tuple:
    """What changes when a row is recomputed (its time), or computed anew."""
    return row.problem_id, row.tau, row.timestamp


def progress_markdown(path) -> str:
    """How far the table at ``path`` got, as the README's Markdown table: each part with
    rows names, by a letter, the note under the table that says where it was computed."""
    published = baselines.load(path)
    sweeps = list(dict.fromkeys(p["sweep"] for p in published.progress))
    def stamp(p) -> str:  # parts packed before stamps were per part carry the table's
        return p.get("computed", published.computed)

    stamps = list(dict.fromkeys(stamp(p) for p in published.progress if p["problems"]))
    letters = {stamp: chr(ord("a") + i) for i, stamp in enumerate(stamps)}

    def cell(p) -> str:
        text = f"{p['problems']} of {p['of']}"
        if p.get("failed"):
            text += f" ({p['failed']} with a failed row)"
        if p["problems"]:
            text += f" ({letters[stamp(p)]})"
        return text

    done = {(p["agent"], p["sweep"]): cell(p) for p in published.progress}
    lines = ["| agent | " + " | ".join(sweeps) + " |", "|---|" + "---|" * len(sweeps)]
    for agent in dict.fromkeys(p["agent"] for p in published.progress):
        lines.append(f"| {agent} | " + " | ".join(done.get((agent, s), "-") for s in sweeps)
                     + " |")
    lines.append("")
    lines.extend(f"- ({letters[stamp]}) {stamp}" for stamp in stamps)
    return "\n".join(lines)


def dropped_parts(out, agents, sweeps) -> list[str]:
    """The parts with rows of the table at ``out`` that packing it for ``agents`` on
    ``sweeps`` would leave out (the table is rewritten whole)."""
    if not os.path.exists(out):
        return []
    return [f"{p['agent']} on {p['sweep']}" for p in baselines.load(out).progress
            if p["problems"] and (p["agent"] not in agents or p["sweep"] not in sweeps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the results store the rows are computed in")
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--sweeps", default=",".join(SWEEPS))
    parser.add_argument("--out", default=str(baselines.PUBLISHED_TABLE))
    parser.add_argument("--compute", action="store_true",
                        help="run each agent on each sweep first (resumes a partial store)")
    parser.add_argument("--compute-agents", metavar="A,B",
                        help="with --compute, compute only these agents (default: --agents); "
                             "the table is still packed for every agent of --agents")
    parser.add_argument("--compute-sweeps", metavar="S,T",
                        help="with --compute, compute only on these sweeps (default: --sweeps)")
    parser.add_argument("--resume-from-table", action="store_true",
                        help="fill a new --db with the published rows before computing")
    parser.add_argument("--computed-on", metavar="TEXT",
                        help="where and when new rows were computed, when not on this machine "
                             "(e.g. rows merged from a GPU machine's store)")
    parser.add_argument("--progress", action="store_true",
                        help="only print how far the table at --out got, as Markdown")
    args = parser.parse_args()
    if args.progress:
        print(progress_markdown(args.out))
        return
    if not args.db:
        parser.error("--db is required (the results store the rows are computed in)")
    agents, sweeps = args.agents.split(","), args.sweeps.split(",")
    dropped = dropped_parts(args.out, agents, sweeps)
    if dropped:  # before the store is made or filled
        named = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3
                                          else "")
        parser.error(f"the table at --out {args.out!r} would lose its rows of {named}: name "
                     "those agents in --agents and those sweeps in --sweeps "
                     "(--compute-agents and --compute-sweeps choose what to compute)")
    if args.resume_from_table and not os.path.exists(args.out):  # before the store is made
        parser.error(f"--resume-from-table reads the table at --out {args.out!r}, which does "
                     "not exist (copy the shipped table there first)")
    if args.resume_from_table and os.path.exists(args.db):
        print(f"note: {args.db} exists, so it is not filled from the table again", flush=True)
    elif args.resume_from_table:
        with store.ResultsStore(args.db) as results:
            added, _ = results.merge(baselines.load(args.out).rows)
        print(f"filled {args.db} with {added} published rows", flush=True)
    if args.compute:
        for sweep in (args.compute_sweeps or args.sweeps).split(","):
            for agent in agents_for(sweep, (args.compute_agents or args.agents).split(",")):
                print(f"== {agent} on {sweep} ({datetime.datetime.now():%H:%M})", flush=True)
                done = subprocess.run([sys.executable, "-m", "neural_testbed.cli", "run",
                                       "--agent", agent, "--sweep", sweep, "--db", args.db,
                                       "--quiet", "--keep-going", "--retry-failed"],
                                      check=False, stdout=subprocess.DEVNULL)
                if done.returncode:  # a crash prints nothing of its own
                    print(f"the run of {agent} on {sweep} exited with status "
                          f"{done.returncode}", flush=True)
                pack(args.db, agents, sweeps, args.out, args.computed_on)
    else:
        pack(args.db, agents, sweeps, args.out, args.computed_on)


if __name__ == "__main__":
    main()
