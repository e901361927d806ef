"""Leaderboard scores and paired comparisons from stored rows.

Pure functions over row dicts (as :meth:`ResultsStore.rows` returns them).
A *candidate* is one (agent, config, estimator, agent seed). For each tau, an
agent's d_KL^tau is the mean KL over the sweep's problems;
``d_KL^agg = sum_tau d_KL^tau / tau`` (= d_KL^1 + d_KL^100 / 100 for the
paper's taus). Tuning picks, per agent, the candidate with the lowest d_KL^agg
(``global``), or one per (temperature, T) setting (``per-setting``, as the
paper's Figures 2 and 3). An agent that lacks results for some problems is
scored on those it has and flagged, never silently.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "TUNINGS",
    "compare_agents",
    "format_records",
    "kl_by_setting",
    "score_agents",
    "score_candidates",
]

TUNINGS = ("global", "per-setting")

# Two-sided 95% quantiles of Student's t for small degrees of freedom (paired t-test).
_T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
          10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11,
          18: 2.10, 19: 2.09, 20: 2.09, 25: 2.06, 30: 2.04}


def _t_critical(df: int) -> float:
    usable = [d for d in _T_975 if d <= df]
    return _T_975[max(usable)] if df <= 30 else 1.96


@dataclasses.dataclass
class _ProblemScore:
    kl: dict[int, float]  # tau -> KL
    accuracy: float = math.nan  # of the smallest tau's evaluation
    ece: float = math.nan
    seconds: float = 0.0  # train + every tau's evaluation


Candidate = tuple[str, str, str, int]  # agent, config_hash, estimator, agent_seed


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _collect(rows: Iterable[Mapping[str, Any]], problems: Mapping[str, Any]):
    """candidate -> problem id -> scores, from ok rows of the sweep's problems."""
    scores: dict[Candidate, dict[str, _ProblemScore]] = {}
    configs: dict[Candidate, str] = {}
    for r in rows:
        p = problems.get(r["problem_id"])
        if (p is None or r["status"] != "ok" or r["tau"] not in p.taus
                or r["num_test"] != p.num_test or r["num_samples"] != p.num_samples):
            continue
        cand = (r["agent"], r["config_hash"], r["estimator"], r["agent_seed"])
        configs[cand] = r["config"]
        s = scores.setdefault(cand, {}).setdefault(r["problem_id"], _ProblemScore(kl={}))
        s.kl[r["tau"]] = r["kl"]
        if r["tau"] == min(p.taus):
            s.accuracy, s.ece = r["accuracy"], r["ece"]
            s.seconds += r["train_seconds"]
        s.seconds += r["eval_seconds"]
    complete = {
        cand: {pid: s for pid, s in by_pid.items() if set(s.kl) == set(problems[pid].taus)}
        for cand, by_pid in scores.items()
    }
    return complete, configs


def _agg(by_pid: Mapping[str, _ProblemScore], taus: Sequence[int]) -> float:
    if not by_pid:
        return math.inf
    return sum(_mean_se([s.kl[tau] for s in by_pid.values()])[0] / tau for tau in taus)


def _best(cands: Sequence[Candidate], scores, pids: set[str], taus) -> Candidate:
    """Most problems covered first, then the lowest d_KL^agg over them."""
    def key(cand):
        covered = {pid: s for pid, s in scores[cand].items() if pid in pids}
        return (-len(covered), _agg(covered, taus), cand[1])

    return min(cands, key=key)


def _tuned(agent: str, scores, configs, problems, tuning: str):
    """The per-problem scores of the agent's tuned choice, and a description of it."""
    if tuning not in TUNINGS:
        raise ValueError(f"unknown tuning {tuning!r}; allowed: {', '.join(TUNINGS)}")
    cands = [c for c in scores if c[0] == agent]
    taus = _taus(problems)
    if tuning == "global":
        best = _best(cands, scores, set(problems), taus)
        return dict(scores[best]), configs[best], best[1]
    chosen: dict[str, _ProblemScore] = {}
    hashes = []
    for setting in sorted({(p.temperature, p.num_train) for p in problems.values()}):
        pids = {pid for pid, p in problems.items() if (p.temperature, p.num_train) == setting}
        best = _best(cands, scores, pids, taus)
        hashes.append(best[1])
        chosen.update({pid: s for pid, s in scores[best].items() if pid in pids})
    distinct = sorted(set(hashes))
    if len(distinct) == 1:
        return chosen, configs[next(c for c in cands if c[1] == distinct[0])], distinct[0]
    return chosen, f"per setting: {len(distinct)} configs", ",".join(distinct)


def _taus(problems: Mapping[str, Any]) -> list[int]:
    return sorted({t for p in problems.values() for t in p.taus})


def score_agents(
    rows: Iterable[Mapping[str, Any]],
    problems: Mapping[str, Any],
    tuning: str = "global",
    baseline: str = "mlp",
) -> tuple[list[dict[str, Any]], list[str]]:
    """The leaderboard: one record per agent, sorted by d_KL^agg.

    Args:
      rows: stored rows.
      problems: the sweep, problem id -> Problem.
      tuning: ``"global"`` or ``"per-setting"``.
      baseline: the agent every KL is normalised by.

    Returns:
      The records and a list of warnings (e.g. no baseline results).
    """
    scores, configs = _collect(rows, problems)
    taus = _taus(problems)
    agents = sorted({c[0] for c in scores})
    tuned = {a: _tuned(a, scores, configs, problems, tuning) for a in agents}
    warnings = []
    base_means = {}
    if baseline in tuned and tuned[baseline][0]:
        base_means = {tau: _mean_se([s.kl[tau] for s in tuned[baseline][0].values()])[0]
                      for tau in taus}
    else:
        warnings.append(f"no {baseline} results for this sweep, so KL is not normalised; run "
                        f"`neural-testbed sweep --agent {baseline}` (or `run`) to add them")
    records = []
    for agent in agents:
        by_pid, config, hashes = tuned[agent]
        record: dict[str, Any] = {"agent": agent}
        for tau in taus:
            mean, se = _mean_se([s.kl[tau] for s in by_pid.values()])
            record[f"kl_{tau}"] = mean
            record[f"kl_{tau}_stderr"] = se
            record[f"kl_{tau}_norm"] = (mean / base_means[tau]) if base_means else math.nan
        record["kl_agg"] = sum(record[f"kl_{tau}"] / tau for tau in taus)
        record["accuracy"] = _mean_se([s.accuracy for s in by_pid.values()])[0]
        record["ece"] = _mean_se([s.ece for s in by_pid.values()])[0]
        record["seconds_per_problem"] = _mean_se([s.seconds for s in by_pid.values()])[0]
        record["problems"] = len(by_pid)
        record["of"] = len(problems)
        missing = len(problems) - len(by_pid)
        record["flag"] = f"MISSING {missing} of {len(problems)} problems" if missing else ""
        record["config_hash"] = hashes
        record["config"] = config
        records.append(record)
    records.sort(key=lambda r: (r["kl_agg"], r["agent"]))
    return records, warnings


def compare_agents(
    rows: Iterable[Mapping[str, Any]],
    problems: Mapping[str, Any],
    agent: str,
    baselines: Sequence[str],
) -> list[dict[str, Any]]:
    """Paired differences of KL (agent - baseline) per (temperature, T) and tau.

    Each agent uses its globally tuned config. Differences are paired by
    problem; ``verdict`` is ``better`` / ``worse`` where a paired t-test
    rejects equality at the 5% level (``better`` = lower KL), else ``n.s.``.

    Raises:
      ValueError: if the agent or a baseline has no results for the sweep.
    """
    scores, configs = _collect(rows, problems)
    present = {c[0] for c in scores}
    for name in (agent, *baselines):
        if name not in present:
            raise ValueError(f"no results for agent {name!r} on this sweep; agents with "
                             f"results: {', '.join(sorted(present)) or 'none'}")
    mine = _tuned(agent, scores, configs, problems, "global")[0]
    records = []
    settings = sorted({(p.temperature, p.num_train) for p in problems.values()})
    for name in baselines:
        theirs = _tuned(name, scores, configs, problems, "global")[0]
        for temperature, num_train in settings:
            pids = [pid for pid, p in problems.items()
                    if (p.temperature, p.num_train) == (temperature, num_train)
                    and pid in mine and pid in theirs]
            for tau in _taus(problems):
                diffs = [mine[pid].kl[tau] - theirs[pid].kl[tau] for pid in pids]
                mean, se = _mean_se(diffs)
                verdict = "n.s."
                if len(diffs) > 1 and se > 0 and abs(mean) > _t_critical(len(diffs) - 1) * se or len(diffs) > 1 and se == 0 and mean != 0:
                    verdict = "better" if mean < 0 else "worse"
                records.append({
                    "agent": agent, "baseline": name, "temperature": temperature,
                    "num_train": num_train, "tau": tau, "kl_diff": mean, "stderr": se,
                    "pairs": len(diffs), "verdict": verdict,
                })
    return records


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}"
    return str(value)


def format_records(records: Sequence[Mapping[str, Any]], fmt: str = "table",
                   columns: Sequence[str] | None = None) -> str:
    """Renders records as an aligned terminal table, CSV or Markdown."""
    if fmt not in ("table", "csv", "markdown"):
        raise ValueError(f"unknown format {fmt!r}; allowed: table, csv, markdown")
    if not records:
        return ""
    columns = list(columns or records[0].keys())
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
        return out.getvalue()
    cells = [[_cell(r.get(c, "")) for c in columns] for r in records]
    if fmt == "markdown":
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def score_candidates(
    rows: Iterable[Mapping[str, Any]], problems: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One record per (agent, config, estimator, agent seed), untuned.

    Each has ``agent``, ``config_hash``, ``config``, ``kl_<tau>`` (mean over the
    problems it covers), ``kl_agg``, ``seconds_per_problem`` and ``problems``.
    """
    scores, configs = _collect(rows, problems)
    taus = _taus(problems)
    records = []
    for cand, by_pid in sorted(scores.items()):
        record: dict[str, Any] = {"agent": cand[0], "config_hash": cand[1], "config": configs[cand]}
        for tau in taus:
            record[f"kl_{tau}"] = _mean_se([s.kl[tau] for s in by_pid.values()])[0]
        record["kl_agg"] = _agg(by_pid, taus)
        record["seconds_per_problem"] = _mean_se([s.seconds for s in by_pid.values()])[0]
        record["problems"] = len(by_pid)
        records.append(record)
    return records


def kl_by_setting(
    rows: Iterable[Mapping[str, Any]], problems: Mapping[str, Any], tuning: str = "global"
) -> list[dict[str, Any]]:
    """Each agent's mean KL (and its stderr over seeds) per (temperature, T, tau), tuned."""
    scores, configs = _collect(rows, problems)
    records = []
    for agent in sorted({c[0] for c in scores}):
        by_pid = _tuned(agent, scores, configs, problems, tuning)[0]
        for setting in sorted({(p.temperature, p.num_train) for p in problems.values()}):
            pids = [pid for pid in by_pid if (problems[pid].temperature,
                                              problems[pid].num_train) == setting]
            for tau in _taus(problems):
                mean, se = _mean_se([by_pid[pid].kl[tau] for pid in pids])
                records.append({"agent": agent, "temperature": setting[0], "num_train": setting[1],
                                "tau": tau, "kl": mean, "kl_stderr": se, "problems": len(pids)})
    return records
