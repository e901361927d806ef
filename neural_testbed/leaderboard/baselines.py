"""Published baseline results: each agent's default config on the standard sweeps,
computed by this project's own commands and shipped inside the package.

A user who evaluates a new agent compares it with strong baselines without
computing them: ``compare --baseline ensemble+`` and ``leaderboard
--with-baselines`` fall back on these rows where the user's store has none of
an agent, and ``reproduce`` recomputes a sample of them to check them. A row is
used only for a problem of the same definition (its ``key_seed``, a hash of
everything that defines its draws, and its N, M and taus), so a changed problem
never borrows stale numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import math
import os
import pathlib
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base, run
from neural_testbed.agents import registry
from neural_testbed.diagnostics import report as diagnostics_report
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import store as store_lib

__all__ = [
    "FORMAT_VERSION",
    "LOCAL",
    "PUBLISHED_TABLE",
    "Published",
    "Reproduction",
    "agreement",
    "build_table",
    "computed_on",
    "load",
    "paired_agreement",
    "reproduce",
    "reproduce_sample",
    "rows_for",
    "write_table",
]

FORMAT_VERSION = 1
PUBLISHED_TABLE = pathlib.Path(__file__).with_name("published_baselines.json.gz")


@dataclasses.dataclass(frozen=True)
class Published:
    """The published table: its rows (as a store holds them) and where they came from."""

    version: str  # e.g. "baselines v1, neural-testbed 0.1.0"
    computed: str  # machine, JAX version, dates (of every part, in one line)
    rows: tuple[store_lib.StoredRow, ...]
    # problem id -> (key_seed, num_test, num_samples, taus): the definition it was computed on
    definitions: Mapping[str, tuple]
    # per (agent, sweep): problems done of the sweep's, how many of them with a failed row
    # ("failed", absent from tables before 2026-11-27), and where and when ("computed")
    progress: tuple[dict[str, Any], ...]
    sweeps: Mapping[str, frozenset] = dataclasses.field(default_factory=dict)  # sweep -> ids

    def describe(self, agents: Iterable[str] | None = None,
                 problem_ids: Iterable[str] | None = None) -> str:
        """The version, and where ``agents``' rows on ``problem_ids`` (default: all) were
        computed: parts of the table may come from different machines."""
        wanted = None if agents is None else set(agents)
        ids = None if problem_ids is None else set(problem_ids)
        where: dict[str, list[str]] = {}
        for p in self.progress:
            if (p["problems"] and (wanted is None or p["agent"] in wanted)
                    and (ids is None or p["sweep"] not in self.sweeps
                         or ids & self.sweeps[p["sweep"]])):
                names = where.setdefault(p.get("computed", self.computed), [])
                if p["agent"] not in names:
                    names.append(p["agent"])
        if len(where) <= 1:
            return f"{self.version}; computed {next(iter(where), self.computed)}"
        return f"{self.version}; computed " + "; ".join(
            f"{', '.join(names)}: {stamp}" for stamp, names in where.items())


def _problem_signature(problem) -> tuple:
    return (int(problem.key_seed), int(problem.num_test), int(problem.num_samples),
            tuple(int(t) for t in problem.taus))


LOCAL = "this store's rows (the machine is not recorded in a row)"


def computed_on(published: Published, rows: Iterable[store_lib.StoredRow]) -> dict[str, str]:
    """Agent -> where its ``rows`` were computed: for published rows the table's record of
    each (agent, sweep) part they come from, for a store's rows :data:`LOCAL`; several
    places are joined by "; ". Times compare only between rows of one kind of machine."""
    by_sweep = {(p["agent"], p["sweep"]): p.get("computed", published.computed)
                for p in published.progress}
    where: dict[str, set[str]] = {}
    for row in rows:
        if getattr(row, "source", "local") != "published":
            where.setdefault(row.agent, set()).add(LOCAL)
            continue
        places = {stamp for (agent, sweep), stamp in by_sweep.items()
                  if agent == row.agent and row.problem_id in published.sweeps.get(sweep, ())}
        where.setdefault(row.agent, set()).update(places or {published.computed})
    return {agent: "; ".join(sorted(places)) for agent, places in where.items()}


def build_table(rows: Iterable[store_lib.StoredRow], sweeps: Mapping[str, Mapping[str, Any]],
                agents: Mapping[str, Sequence[str]], package_version: str,
                computed: str | Callable[[str, str, list], str]) -> dict[str, Any]:
    """The table of the default-config rows (agent seed 0, estimator "auto") of
    ``agents[sweep]`` on each of ``sweeps`` (name -> problems), with each problem's
    definition and each (agent, sweep)'s progress (problems with rows, and how many of
    them have a failed row) and provenance (``computed``: one line for all, or a function
    of (agent, sweep, that part's rows))."""
    problems = {pid: p for sweep in sweeps.values() for pid, p in sweep.items()}
    names = {name for sweep_agents in agents.values() for name in sweep_agents}
    wanted = {name: configs_lib.config_hash(name, registry.get_agent(name).default)
              for name in names}
    kept = [r for r in rows
            if wanted.get(r.agent) == r.config_hash and r.problem_id in problems
            and r.agent_seed == 0 and r.estimator == "auto"
            and (r.num_test, r.num_samples) == (problems[r.problem_id].num_test,
                                                problems[r.problem_id].num_samples)]
    progress = []
    for sweep_name, sweep in sweeps.items():
        for name in agents[sweep_name]:
            part = [r for r in kept if r.agent == name and r.problem_id in sweep]
            done = {r.problem_id for r in part}
            failed = {r.problem_id for r in part if r.status != "ok"}
            stamp = computed if isinstance(computed, str) else computed(name, sweep_name, part)
            progress.append({"agent": name, "sweep": sweep_name, "problems": len(done),
                             "failed": len(failed), "of": len(sweep), "computed": stamp})
    # The scalars `leaderboard --metrics` reads and the agent's own report (hmc's
    # convergence, which flags a problem); not the per-bin arrays, which would make the
    # table 19 times larger.
    kept = [dataclasses.replace(r, diagnostics=json.dumps(
                {k: v for k, v in json.loads(r.diagnostics).items()
                 if k in diagnostics_report.ROW_METRICS or k.startswith("agent_")},
                sort_keys=True))
            if r.diagnostics else r for r in kept]
    columns = list(store_lib.COLUMNS)
    used = {r.problem_id for r in kept}
    return {
        "format": FORMAT_VERSION,
        "version": f"baselines v{FORMAT_VERSION}, neural-testbed {package_version}",
        "computed": (" / ".join(dict.fromkeys(p["computed"] for p in progress if p["problems"]))
                     or (computed if isinstance(computed, str) else "")),
        "problems": {pid: list(_problem_signature(problems[pid])) for pid in sorted(used)},
        "progress": progress,
        "sweeps": {name: sorted(sweep) for name, sweep in sweeps.items()},
        "columns": columns,
        "rows": [[getattr(r, c) for c in columns] for r in sorted(
            kept, key=lambda r: (r.agent, r.problem_id, r.tau))],
    }


def write_table(table: Mapping[str, Any], path: str | pathlib.Path) -> None:
    """Writes the table as gzipped JSON, byte-identical for the same table (no name or
    time in the gzip header)."""
    data = json.dumps(table, separators=(",", ":"), sort_keys=True).encode()
    with open(path, "wb") as raw, gzip.GzipFile(
            filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(data)


def load(path: str | pathlib.Path | None = None) -> Published:
    """The published table shipped with the package, or the one at ``path``."""
    path = str(path or PUBLISHED_TABLE)
    try:
        stamp = os.stat(path).st_mtime_ns  # a rewritten table is read again
    except OSError:
        stamp = None  # reading says what is wrong
    return _load(path, stamp)


@functools.lru_cache(maxsize=4)  # read once per process
def _load(path: str, stamp: int | None) -> Published:
    try:
        with gzip.open(path, "rt") as f:
            table = json.load(f)
    except (OSError, ValueError) as error:
        raise store_lib.StoreError(f"cannot read the published baselines {path!r}: "
                                   f"{error}") from None
    if table.get("format") != FORMAT_VERSION:
        raise store_lib.StoreError(f"{path!r} is published-baselines format "
                                   f"{table.get('format')!r}; this version reads "
                                   f"{FORMAT_VERSION}")
    # Rows in the columns of a store of their time: read as such a store's are.
    columns = table["columns"]
    rows = tuple(store_lib.stored_row(dict(zip(columns, values)), source="published")
                 for values in table["rows"])
    return Published(table["version"], table["computed"], rows,
                     {pid: (*sig[:3], tuple(sig[3])) for pid, sig in table["problems"].items()},
                     tuple(table["progress"]),
                     {name: frozenset(ids) for name, ids in table.get("sweeps", {}).items()})


def rows_for(published: Published, agents: Iterable[str],
             problems: Mapping[str, Any]) -> tuple[list[store_lib.StoredRow], list[str]]:
    """The published rows of ``agents`` on ``problems`` whose definitions match, and notes
    on the problems whose published definition differs (their rows are left out)."""
    agents = set(agents)
    rows, stale = [], set()
    for r in published.rows:
        problem = problems.get(r.problem_id)
        if r.agent not in agents or problem is None:
            continue
        if published.definitions.get(r.problem_id) != _problem_signature(problem):
            stale.add(r.problem_id)
            continue
        rows.append(r)
    notes = [f"{len(stale)} problems have published rows of another definition (left out), "
             f"e.g. {min(stale)}"] if stale else []
    return rows, notes


def reproduce_sample(published: Published, agent: str, problems: Mapping[str, Any],
                     num: int) -> list[Any]:
    """Up to ``num`` of ``problems`` with published rows of ``agent``, spread over the
    strata: one problem of each stratum in turn (lowest seed first), the strata in a
    fixed shuffled order."""
    rows, _ = rows_for(published, [agent], problems)
    ids = sorted({r.problem_id for r in rows})
    by_stratum: dict[Any, list[Any]] = {}
    for pid in ids:
        p = problems[pid]
        by_stratum.setdefault(p.stratum, []).append(p)
    for members in by_stratum.values():
        members.sort(key=lambda p: (p.seed, p.problem_id))
    chosen, depth = [], 0
    try:
        strata = sorted(by_stratum)
    except TypeError:  # strata of mixed kinds
        strata = sorted(by_stratum, key=repr)
    random.Random(0).shuffle(strata)  # a few problems still cover temperatures and T
    while len(chosen) < num and any(depth < len(by_stratum[s]) for s in strata):
        for s in strata:
            if depth < len(by_stratum[s]) and len(chosen) < num:
                chosen.append(by_stratum[s][depth])
        depth += 1
    return chosen


# Published and recomputed values agree when they differ by at most this many standard
# errors of the difference of two independent estimates (conservative: both use the
# same test samples, so their Monte Carlo noise is shared).
AGREEMENT_SIGMAS = 3.0


def agreement(published_row: base.ProblemResult, new_row: base.ProblemResult,
              metric: base.Metric) -> dict[str, Any]:
    """The difference of a recomputed row from its published one in ``metric`` (the
    problem's), and whether they agree."""
    (published, published_se), (new, new_se) = (published_row.estimate(metric),
                                                new_row.estimate(metric))
    diff = new - published
    stderr = math.hypot(published_se or 0.0, new_se or 0.0)
    return {"problem_id": new_row.problem_id, "tau": new_row.tau, "published": published,
            "recomputed": new, "diff": diff, "stderr": stderr,
            "agree": bool(abs(diff) <= AGREEMENT_SIGMAS * stderr or diff == 0.0)}


# Problems a tau needs for the paired check of :func:`paired_agreement` (Student's t with
# 4 degrees of freedom exceeds 3 in 4% of samples; with fewer, the check is too lenient).
PAIRED_MIN_PROBLEMS = 5


def paired_agreement(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per tau, whether the recomputed rows of :func:`agreement`'s records differ from the
    published ones by zero on average: the mean difference and its standard error over
    the problems (the spread of the paired differences), agreeing within
    :data:`AGREEMENT_SIGMAS` of them.

    A row's own standard error covers its test samples only. Where training is chaotic
    (cnp's 10,000 meta-training steps), float rounding (a batch of another size, another
    machine) sends the training run elsewhere, moving a row by more than that; such
    rows still agree in distribution, which this checks. ``agree`` is None for a tau
    with fewer than :data:`PAIRED_MIN_PROBLEMS` problems.
    """
    by_tau: dict[int, list[float]] = {}
    for r in records:
        by_tau.setdefault(r["tau"], []).append(r["diff"])
    checks = []
    for tau, diffs in sorted(by_tau.items()):
        n, mean = len(diffs), statistics.fmean(diffs)
        stderr = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.nan
        agree = None if n < PAIRED_MIN_PROBLEMS else bool(
            abs(mean) <= AGREEMENT_SIGMAS * stderr or not any(diffs))
        checks.append({"tau": tau, "problems": n, "mean_diff": mean, "stderr": stderr,
                       "agree": agree})
    return checks


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """What :func:`reproduce` found: per recomputed row its :func:`agreement` record,
    the rows that failed to compute, and per tau the :func:`paired_agreement` check."""

    records: list[dict[str, Any]]
    failed: int
    paired: list[dict[str, Any]]

    @property
    def agree(self) -> int:
        """Rows within :data:`AGREEMENT_SIGMAS` standard errors of their published ones."""
        return sum(r["agree"] for r in self.records)

    @property
    def verdict(self) -> str:
        """``failed`` (a row failed to compute), ``agree`` (every row agrees), ``on
        average`` (some rows differ more, but every tau's differences average to zero:
        they moved with their training run) or ``disagree``."""
        if self.failed:
            return "failed"
        if self.agree == len(self.records):
            return "agree"
        if all(check["agree"] for check in self.paired):
            return "on average"
        return "disagree"

    @property
    def reproduced(self) -> bool:
        """Whether the published rows are reproduced, every row or on average."""
        return self.verdict in ("agree", "on average")


def reproduce(agent: str, problems: Mapping[str, Any], num_problems: int, *,
              sweep_name: str, announce: Callable[[str], None] | None = None,
              progress: bool = True) -> Reproduction:
    """Recomputes ``agent``'s default config on up to ``num_problems`` of ``problems``
    that the published results cover (:func:`reproduce_sample`), in this process and
    without a store, and compares each row with its published one.

    Refused with a ValueError where the published results have no rows of the agent
    on ``problems`` (``sweep_name`` names them in the message) or where they are of
    another config than its default today. ``announce`` gets a line saying what is
    recomputed, before the work starts.
    """
    spec = registry.get_agent(agent)
    published = load()
    sample = reproduce_sample(published, agent, problems, num_problems)
    if not sample:
        covered = sorted({r.agent for r in published.rows if r.problem_id in problems})
        raise ValueError(f"the published baseline results ({published.version}) have no rows "
                         f"of {agent!r} on the {sweep_name} sweep; on it they have "
                         f"{', '.join(covered) or 'no agent yet'}")
    rows, _ = rows_for(published, [agent], {p.problem_id: p for p in sample})
    default_hash = store_lib.config_hash(agent, spec.default)
    if {r.config_hash for r in rows} != {default_hash}:
        raise ValueError(f"the published rows of {agent!r} are of another config than "
                         f"its default today ({default_hash}): they cannot be reproduced here")
    if announce is not None:
        announce(f"recomputing {agent} (default config) on {len(sample)} problems of the "
                 f"{sweep_name} sweep; published: "
                 f"{published.describe([agent], [p.problem_id for p in sample])}")
    new = run.run_agent(functools.partial(spec.make, spec.default), sample, agent,
                        config=spec.default, options=run.RunOptions(progress=progress))
    by_key = {(r.problem_id, r.tau): r for r in rows if r.estimator == "auto"}
    records = [agreement(by_key[r.problem_id, r.tau], r, problems[r.problem_id].metric)
               for r in new if (r.problem_id, r.tau) in by_key and r.status == "ok"]
    failed = sum(r.status != "ok" for r in new)
    return Reproduction(records, failed, paired_agreement(records))
