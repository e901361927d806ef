"""Leaderboard scores and paired comparisons from stored rows.

Pure functions over stored rows (as :meth:`ResultsStore.rows` returns them).
A *candidate* is one (agent, config, estimator, agent seed). For each tau, an
agent's d_KL^tau is the mean KL over the sweep's problems (the NLL on problems whose
metric is ``nll``: each row's value is read from the column of its problem's metric);
``d_KL^agg = sum_tau d_KL^tau / tau`` (= d_KL^1 + d_KL^100 / 100 for the
paper's taus). Tuning picks, per agent, the candidate with the lowest d_KL^agg
(``global``), or one per (temperature, T) setting (``per-setting``, as the
paper's Figures 2 and 3). An agent that lacks results for some problems is
scored on those it has and flagged, never silently; so is an agent whose rows
clipped infinite KL terms (``num_clipped > 0``), which flatters it.

Statistics: the problems are independent and the (temperature, T) settings
are fixed strata of about ten seeds each, so every standard error is the
stratified one (see :func:`stratified`); the spread *between* settings is
the sweep's design, not noise.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base
from neural_testbed.diagnostics import report as diagnostics_report
from neural_testbed.leaderboard.notes import Note
from neural_testbed.leaderboard.store import StoredRow

__all__ = [
    "COMPARE_METRICS",
    "SELECTIONS",
    "TUNINGS",
    "ProblemScore",
    "collect_scores",
    "compare_agents",
    "default_normaliser",
    "format_records",
    "kl_by_setting",
    "plus_minus",
    "score_agents",
    "score_candidates",
    "significance_groups",
    "stratified",
    "tuned_candidates",
]

TUNINGS = ("global", "per-setting")

# How configs are selected and reported; the value is what a table says about it.
SELECTIONS: Mapping[str, str] = types.MappingProxyType({
    "same": "configs chosen and scored on the same problems (optimistic for agents with "
            "large sweeps)",
    "held-out": "configs chosen on the first half of each (temperature, T) setting's seeds, "
                "scored on the other half",
})

_LEVEL = 0.05  # significance level of the verdicts

# The per-problem scalars `compare` takes, and whether higher is better: the rows' loss
# per tau (``loss``: d_KL on the testbed, the NLL on real data; ``kl`` and ``nll`` name it
# where it is that one), a regression row's metacorrelation and XLL (diagnostics), the
# studies' TAL score and self-certainty (leaderboard.studies).
COMPARE_METRICS: Mapping[str, bool] = types.MappingProxyType({
    "loss": False, "kl": False, "nll": False, "metacorrelation": True, "xll": True,
    "tal": True, "self_certainty": False,
})
LOSSES = ("loss", "kl", "nll")  # the names of COMPARE_METRICS that mean the rows' loss


@dataclasses.dataclass
class ProblemScore:
    """One candidate's scores on one problem, gathered from its ok rows."""

    loss: dict[int, float]  # tau -> d_KL or NLL, as the problem's metric says
    accuracy: float = math.nan  # of the smallest tau's evaluation
    ece: float = math.nan
    seconds: float = 0.0  # train + every tau's evaluation
    clipped: set[int] = dataclasses.field(default_factory=set)  # taus with num_clipped > 0
    sources: set[str] = dataclasses.field(default_factory=set)  # "local", "published"
    diagnostics: dict[str, float] = dataclasses.field(default_factory=dict)  # smallest tau's
    unconverged: bool = False  # the agent reported its training did not converge (hmc)


Candidate = tuple[str, str, str, int]  # agent, config_hash, estimator, agent_seed
# A problem's stratum: (temperature, T), (temperature, T, d) where d is not 2, (dataset, T)
# on real data, or ((d, noise variance), T) on regression.
Setting = tuple[Any, ...]


def _where(problems: Mapping[str, Any]) -> dict[Setting | None, dict[str, Any]]:
    """Each setting's columns, named by its problems (``Problem.stratum_columns``:
    temperature, dataset, or d and noise variance, then T, ...); under ``None`` (pooled
    over settings) the same names, each None."""
    where = {p.stratum: dict(p.stratum_columns) for p in problems.values()}
    where[None] = dict.fromkeys(next(iter(where.values()), {}))
    return where


def _setting(problem: Any) -> Setting:
    return problem.stratum


def _mean(values: Sequence[float | None]) -> float:
    """The mean; NaN when there are no values or one is undefined (None: accuracy and
    ECE of regression rows)."""
    if not values or any(v is None for v in values):
        return math.nan
    return sum(values) / len(values)


def stratified(values: Iterable[tuple[Setting, float]]) -> tuple[float, float, int]:
    """Mean of per-problem values, its stratified standard error, and the number of strata.

    mean = sum_s (n_s/n) mean_s (the plain mean) and var = sum_s (n_s/n)^2 s2_s / n_s,
    with s2_s the sample variance (ddof=1) over the problems of setting s. A setting
    with a single problem has no variance estimate, and the stderr is then NaN: KL's
    spread differs by orders of magnitude between settings, so borrowing another
    setting's would be a guess.
    """
    groups: dict[Setting, list[float]] = {}
    for setting, value in values:
        groups.setdefault(setting, []).append(value)
    n = sum(len(g) for g in groups.values())
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(sum(g) for g in groups.values()) / n
    if any(len(g) < 2 for g in groups.values()):
        return mean, math.nan, len(groups)
    var = 0.0
    for g in groups.values():
        g_mean = _mean(g)
        s2 = sum((v - g_mean) ** 2 for v in g) / (len(g) - 1)
        var += (len(g) / n) ** 2 * s2 / len(g)
    return mean, math.sqrt(var), len(groups)


def _ratio(mine: Mapping[str, ProblemScore], base: Mapping[str, ProblemScore], tau: int,
           problems: Mapping[str, Any]) -> tuple[float, float]:
    """R = A / B over the problems both cover, with its delta-method standard error.

    Pairing by problem lets the shared difficulty of a problem cancel:
    var(R) ~ (var(A) - 2 R cov(A, B) + R^2 var(B)) / B^2, which is the stratified
    variance of the mean of the residuals a_i - R b_i, divided by B^2.
    """
    pids = [pid for pid in mine if pid in base]
    a = _mean([mine[pid].loss[tau] for pid in pids])
    b = _mean([base[pid].loss[tau] for pid in pids])
    if not pids or b == 0:
        return math.nan, math.nan
    r = a / b
    residuals = [(_setting(problems[pid]), mine[pid].loss[tau] - r * base[pid].loss[tau])
                 for pid in pids]
    return r, stratified(residuals)[1] / abs(b)


def _above(mine: Mapping[str, ProblemScore], floor: Mapping[str, ProblemScore], tau: int,
           problems: Mapping[str, Any]) -> tuple[float, float]:
    """The mean of A - F over the problems both cover, with its stratified standard error:
    how far an agent is above the floor agent (paired, so the floor's own Monte Carlo
    error on a problem cancels with the shared difficulty)."""
    pairs = [(_setting(problems[pid]), mine[pid].loss[tau] - floor[pid].loss[tau])
             for pid in mine if pid in floor]
    return stratified(pairs)[:2]


def _p_value(mean: float, stderr: float, df: int) -> float:
    """Two-sided p-value of mean = 0 under Student's t with ``df`` degrees of freedom."""
    if df < 1 or math.isnan(stderr):
        return math.nan
    if stderr == 0:  # identical differences: exact
        return 0.0 if mean != 0 else 1.0
    from scipy import stats  # about half a second to import: only comparisons need it

    return float(2 * stats.t.sf(abs(mean / stderr), df))


def _verdict(mean: float, p_value: float, higher_is_better: bool = False) -> str:
    if math.isnan(p_value):
        return "n/a"
    if p_value >= _LEVEL:
        return "n.s."
    return "better" if (mean > 0 if higher_is_better else mean < 0) else "worse"


PerProblem = Mapping[tuple[str, str, int, str], Mapping[str, float]]


def default_normaliser(problems: Mapping[str, Any]) -> str:
    """The agent a leaderboard of ``problems`` is normalised by unless told otherwise: the
    uniform baseline on the reference's current protocol (dyadic test inputs), as its
    leaderboard does; mlp on the 2021 paper's, as the paper does."""
    current = [getattr(p, "kappa", None) is not None for p in problems.values()]
    return "uniform" if current and all(current) else "mlp"


def collect_scores(rows: Iterable[StoredRow], problems: Mapping[str, Any],
                   per_problem: PerProblem | None = None):
    """candidate -> problem id -> scores, from ok rows of the sweep's problems, each
    row's d_KL or NLL as its problem's metric says; each problem's diagnostics gain the
    ``per_problem`` values of its (agent, config hash, agent seed, problem id).

    Raises:
      ValueError: if those rows mix metrics (KL and NLL): a mean over both means nothing.
    """
    scores: dict[Candidate, dict[str, ProblemScore]] = {}
    configs: dict[Candidate, str] = {}
    metrics = set()
    for r in rows:
        p = problems.get(r.problem_id)
        if (p is None or r.status != "ok" or r.tau not in p.taus
                or r.num_test != p.num_test or r.num_samples != p.num_samples
                or r.problem_hash != base.definition_hash(p)):  # other data, same id
            continue
        metrics.add(p.metric)
        cand = (r.agent, r.config_hash, r.estimator, r.agent_seed)
        configs[cand] = r.config
        s = scores.setdefault(cand, {}).setdefault(r.problem_id, ProblemScore(loss={}))
        s.loss[r.tau] = r.estimate(p.metric)[0]
        s.sources.add(r.source)
        if r.num_clipped:
            s.clipped.add(r.tau)
        if r.tau == min(p.taus):
            s.accuracy, s.ece = r.accuracy, r.ece
            s.seconds += r.train_seconds
            if r.diagnostics:  # rows before schema 3 have none
                record = json.loads(r.diagnostics)
                s.diagnostics = {k: math.nan if v is None else v for k, v in record.items()
                                 if k in diagnostics_report.ROW_METRICS}
                s.unconverged = record.get("agent_converged") == 0  # base.Agent.report
        s.seconds += r.eval_seconds
    for (agent, chash, _, seed), by_pid in scores.items():
        for pid, s in by_pid.items():
            s.diagnostics.update((per_problem or {}).get((agent, chash, seed, pid), {}))
    if len(metrics) > 1:
        raise ValueError(f"the rows of this sweep mix metrics ({', '.join(sorted(metrics))}); "
                         "score problems with and without an exact likelihood separately")
    complete = {
        cand: {pid: s for pid, s in by_pid.items() if set(s.loss) == set(problems[pid].taus)}
        for cand, by_pid in scores.items()
    }
    return complete, configs, metrics.pop() if metrics else "kl"


def _halves(problems: Mapping[str, Any], selection: str) -> tuple[set[str], set[str]]:
    """The problem ids configs are selected on, and those they are reported on.

    ``held-out`` sorts each setting's problems by seed: the first half (n // 2)
    selects, the rest (the extra one of an odd count included) reports, so no
    reported number was used to choose the config it reports.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}; allowed: {', '.join(SELECTIONS)}")
    if selection == "same":
        return set(problems), set(problems)
    by_setting: dict[Setting, list[Any]] = {}
    for p in problems.values():
        by_setting.setdefault(_setting(p), []).append(p)
    select, report = set(), set()
    for setting, group in sorted(by_setting.items()):
        if len(group) < 2:
            raise ValueError(f"held-out selection needs at least 2 seeds per (temperature, T) "
                             f"setting; setting {setting} has {len(group)}")
        group.sort(key=lambda p: (p.seed, p.problem_id))
        half = len(group) // 2
        select.update(p.problem_id for p in group[:half])
        report.update(p.problem_id for p in group[half:])
    return select, report


def _agg(by_pid: Mapping[str, ProblemScore], taus: Sequence[int]) -> float:
    if not by_pid:
        return math.inf
    return sum(_mean([s.loss[tau] for s in by_pid.values()]) / tau for tau in taus)


def _best(cands: Sequence[Candidate], scores, pids: set[str], taus) -> Candidate:
    """Most problems covered first, then the lowest d_KL^agg over them."""
    def key(cand):
        covered = {pid: s for pid, s in scores[cand].items() if pid in pids}
        return (-len(covered), _agg(covered, taus), cand[1])

    return min(cands, key=key)


def _tuned(agent: str, scores, configs, problems, tuning: str, halves):
    """The agent's tuned choice: its scores on the report problems, and a description."""
    if tuning not in TUNINGS:
        raise ValueError(f"unknown tuning {tuning!r}; allowed: {', '.join(TUNINGS)}")
    select, report = halves
    cands = [c for c in scores if c[0] == agent]
    taus = _taus(problems)
    if tuning == "global":
        best = _best(cands, scores, select, taus)
        return {pid: s for pid, s in scores[best].items() if pid in report}, configs[best], best[1]
    chosen: dict[str, ProblemScore] = {}
    hashes = []
    for setting in sorted({_setting(p) for p in problems.values()}):
        pids = {pid for pid, p in problems.items() if _setting(p) == setting}
        best = _best(cands, scores, pids & select, taus)
        hashes.append(best[1])
        chosen.update({pid: s for pid, s in scores[best].items() if pid in pids & report})
    distinct = sorted(set(hashes))
    if len(distinct) == 1:
        return chosen, configs[next(c for c in cands if c[1] == distinct[0])], distinct[0]
    return chosen, f"per setting: {len(distinct)} configs", ",".join(distinct)


def _taus(problems: Mapping[str, Any]) -> list[int]:
    return sorted({t for p in problems.values() for t in p.taus})


def _flag(missing: int, of: int, clipped: int, unconverged: int = 0) -> str:
    parts = [f"MISSING {missing} of {of} problems"] if missing else []
    if clipped:
        parts.append(f"CLIPPED {clipped} row{'s' if clipped != 1 else ''}")
    if unconverged:
        parts.append(f"UNCONVERGED on {unconverged} problem{'s' if unconverged != 1 else ''}")
    return "; ".join(parts)


def score_agents(
    rows: Iterable[StoredRow],
    problems: Mapping[str, Any],
    tuning: str = "global",
    baseline: str = "mlp",
    selection: str = "same",
    per_problem: PerProblem | None = None,
    defaults: Mapping[str, str] | None = None,
    rules: str = "ours",
    floor: str | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The leaderboard: one record per agent's tuned choice, sorted by d_KL^agg, and one
    more for its default config where the tuned choice is another.

    ``rules`` says what a mean is taken over: ``"ours"`` (the problems the record has,
    ``problems`` of ``of`` saying how many) or ``"reference"`` (the reference's
    leaderboard: every reported problem, a missing or non-finite estimate counted as
    :data:`REFERENCE_FILL`, a negative one as 0; see :data:`RULES`). ``health`` is the
    same under both.

    Columns are named by the rows' metric (``metric``: ``kl``, or ``nll`` on real data),
    so a column holds one quantity whatever the sweep: ``kl_<tau>`` (``nll_<tau>``) is
    the mean over the reported problems with its stratified ``kl_<tau>_stderr``,
    ``kl_agg`` the sum of ``kl_<tau> / tau``. ``kl_<tau>_norm`` = A / B, the agent's and
    the baseline's means over the problems both cover, and ``kl_<tau>_norm_stderr`` its
    delta-method error over those pairs (not a ratio of two errors: a problem
    hard for one agent is hard for both). With ``floor`` (an agent, e.g. ``hmc``: the
    Bayes-optimal floor), ``kl_<tau>_above_floor`` is the mean of A - F over the problems
    both cover and ``kl_<tau>_above_floor_stderr`` its paired stratified error, F the
    floor agent's default config. The baseline B is always the baseline
    agent's default config, whatever its tuning picks. ``source`` says where a
    record's rows came from (``local``, ``published`` or ``local+published``,
    see :mod:`neural_testbed.leaderboard.counted`), ``label`` names the record
    in tables and figures and ``extra_default`` marks the default config's record
    shown beside an agent's tuned choice. ``clipped`` counts the tuned choice's
    (problem, tau) rows that clipped infinite KL terms; ``flag`` names them, any
    missing problems and those where the agent reported that its training did not
    converge (:attr:`base.Agent.report`, hmc's chains).

    Args:
      rows: stored rows.
      problems: the sweep, problem id -> Problem.
      tuning: ``"global"`` or ``"per-setting"``.
      baseline: the agent every KL is normalised by.
      selection: ``"same"`` (choose configs on every problem and report on them)
        or ``"held-out"`` (choose on half the seeds, report on the rest); see
        :data:`SELECTIONS`.
      per_problem: more per-problem values, by (agent, config hash, agent seed,
        problem id) and name (e.g. the studies' ``tal``, see
        :func:`neural_testbed.leaderboard.studies.per_problem_metrics`).
      defaults: agent -> its default config's hash (default: the registered agents').
      floor: an agent whose default config every loss is also compared with, paired by
        problem (``<metric>_<tau>_above_floor``); None: no such columns.

    Each diagnostics scalar (and each name of ``per_problem``) gets the mean over
    the reported problems that have it and its stratified ``<name>_stderr``
    (NaN where none has it).

    Returns:
      The records and a list of warnings (e.g. no baseline results).
    """
    scores, configs, metric = collect_scores(rows, problems, per_problem)
    names = list(dict.fromkeys([*diagnostics_report.ROW_METRICS,
                                *(n for values in (per_problem or {}).values() for n in values)]))
    halves = _halves(problems, selection)
    taus = _taus(problems)
    signed = any(_signed(p) for p in problems.values())
    agents = sorted({c[0] for c in scores})
    tuned = {a: _tuned(a, scores, configs, problems, tuning, halves) for a in agents}
    defaults = _defaults(agents) if defaults is None else defaults
    chosen = []  # (agent, its scores, config, hashes, whether it is the extra default row)
    for agent in agents:
        chosen.append((agent, *tuned[agent], False))
        default = _default_candidate(agent, scores, defaults, halves[0], taus)
        if default is not None and tuned[agent][2] != default[1]:
            chosen.append((agent, {pid: s for pid, s in scores[default].items()
                                   if pid in halves[1]}, configs[default], default[1], True))
    warnings = []
    base = {}
    default = _default_candidate(baseline, scores, defaults, halves[0], taus)
    if default is not None:
        base = {pid: s for pid, s in scores[default].items() if pid in halves[1]}
    elif baseline in tuned and baseline not in defaults:
        base = tuned[baseline][0]
        warnings.append(Note(f"{baseline} is not a registered agent here, so its default "
                             "config is unknown: KL is normalised by its tuned config",
                             f"normalised by {baseline}'s tuned config"))
    if not base:
        warnings.append(Note(f"no {baseline} default-config results for this sweep, so KL is "
                             f"not normalised; run `neural-testbed run --agent {baseline}` (or "
                             "`leaderboard --with-baselines`) to add them",
                             f"not normalised (no {baseline} default-config rows)"))
    floor_scores = {}
    if floor is not None:
        default = _default_candidate(floor, scores, defaults, halves[0], taus)
        if default is None:
            warnings.append(Note(f"no {floor} default-config results for this sweep, so there "
                                 f"is no floor to compare with; run `neural-testbed run --agent "
                                 f"{floor}` on it", f"no floor ({floor} has no rows)"))
        else:
            floor_scores = {pid: s for pid, s in scores[default].items() if pid in halves[1]}
    if rules not in RULES:
        raise ValueError(f"unknown rules {rules!r}; allowed: {', '.join(RULES)}")
    records = []
    for agent, by_pid, config, hashes, extra in chosen:
        health, present = _health(by_pid, len(halves[1]), taus, signed), len(by_pid)
        if rules == "reference":
            by_pid = _reference_filled(by_pid, halves[1], taus)
        record: dict[str, Any] = {"agent": agent}
        for tau in taus:
            mean, se, _ = stratified((_setting(problems[pid]), s.loss[tau])
                                     for pid, s in by_pid.items())
            norm, norm_se = _ratio(by_pid, base, tau, problems) if base else (math.nan, math.nan)
            record[f"{metric}_{tau}"] = mean
            record[f"{metric}_{tau}_stderr"] = se
            record[f"{metric}_{tau}_norm"] = norm
            record[f"{metric}_{tau}_norm_stderr"] = norm_se
            if floor is not None:
                above, above_se = (_above(by_pid, floor_scores, tau, problems) if floor_scores
                                   else (math.nan, math.nan))
                record[f"{metric}_{tau}_above_floor"] = above
                record[f"{metric}_{tau}_above_floor_stderr"] = above_se
        record[f"{metric}_agg"] = sum(record[f"{metric}_{tau}"] / tau for tau in taus)
        record["accuracy"] = _mean([s.accuracy for s in by_pid.values()])
        record["ece"] = _mean([s.ece for s in by_pid.values()])
        for name in names:  # over the problems that have it
            record[name], record[f"{name}_stderr"] = stratified(
                (_setting(problems[pid]), s.diagnostics[name]) for pid, s in by_pid.items()
                if not math.isnan(s.diagnostics.get(name, math.nan)))[:2]
        record["seconds_per_problem"] = _mean([s.seconds for s in by_pid.values()])
        record["problems"] = present
        record["of"] = len(halves[1])
        record["health"] = health
        record["rules"] = rules
        record["clipped"] = sum(len(s.clipped) for s in by_pid.values())
        record["flag"] = _flag(len(halves[1]) - present, len(halves[1]), record["clipped"],
                               sum(s.unconverged for s in by_pid.values()))
        record["metric"] = metric
        record["source"] = _source(by_pid)
        record["label"] = _label(agent, record["source"], extra)
        record["extra_default"] = extra  # the default config's row beside a tuned choice
        record["selection"] = selection
        record["config_hash"] = hashes
        record["config"] = config
        records.append(record)
    records.sort(key=lambda r: (r[f"{metric}_agg"], r["agent"]))
    warnings += _close_calls(records, taus, metric)
    lonely = [r["agent"] for r in records
              if r["problems"] and any(math.isnan(r[f"{metric}_{tau}_stderr"]) for tau in taus)]
    if lonely:
        warnings.append(Note(f"standard errors are n/a for {', '.join(lonely)}: some "
                             "(temperature, T) setting has a single scored problem, so no "
                             "variance estimate", f"standard errors n/a for {len(lonely)} "
                             "agents"))
    return records, warnings


# How a leaderboard's means treat missing, non-finite and negative estimates.
RULES: Mapping[str, str] = types.MappingProxyType({
    "ours": "means over the problems a record has (how many: the problems and of "
            "columns); no estimate is changed",
    "reference": "the reference's leaderboard: a missing or non-finite estimate counts as "
                 "1e6, a negative one as 0, and every mean is over all reported problems",
})
REFERENCE_FILL = 1e6  # the reference's KL_FILL


def _reference_filled(by_pid: Mapping[str, ProblemScore], reported: Iterable[str],
                      taus: Sequence[int]) -> dict[str, ProblemScore]:
    """Every reported problem's scores under the reference's rules (:data:`RULES`)."""
    filled = {}
    for pid in reported:
        score = by_pid.get(pid)
        loss = {tau: (REFERENCE_FILL if score is None or not math.isfinite(score.loss[tau])
                      else max(score.loss[tau], 0.0)) for tau in taus}
        filled[pid] = (ProblemScore(loss=loss) if score is None
                       else dataclasses.replace(score, loss=loss))
    return filled


# An estimate below this is unhealthy; above it, a negative KL is the estimator's noise
# around 0 (the reference's tolerance).
NEGATIVE_TOLERANCE = -1e-4


def _signed(problem: Any) -> bool:
    """Whether a problem's loss may be negative: the NLL of real-valued targets (a density,
    not a probability); a d_KL and a class NLL are not."""
    return problem.target == "regression" and problem.metric == "nll"


def _health(by_pid: Mapping[str, ProblemScore], reported: int, taus: Sequence[int],
            signed: bool = False) -> float:
    """The share of the sweep's (problem, tau) entries a record's score rests on that are
    present (computed, successfully), finite and not below :data:`NEGATIVE_TOLERANCE`
    (unless the loss is ``signed``, :func:`_signed`): the reference's ``pct_health`` (a
    store holds no duplicate rows, its fourth test)."""
    healthy = sum(math.isfinite(v) and (signed or v >= NEGATIVE_TOLERANCE)
                  for s in by_pid.values() for v in s.loss.values())
    return healthy / (reported * len(taus)) if reported else math.nan


def _defaults(agents: Iterable[str]) -> dict[str, str]:
    from neural_testbed.leaderboard import counted  # the registry: only when not given

    return counted.default_hashes(agents)


def _default_candidate(agent: str, scores, defaults: Mapping[str, str], select: set[str],
                       taus) -> Candidate | None:
    """The agent's default-config candidate (of its seeds and estimators, the one tuning
    would pick), or None where it has none or its default is unknown."""
    cands = [c for c in scores if c[0] == agent and c[1] == defaults.get(agent)]
    return _best(cands, scores, select, taus) if cands else None


def _source(by_pid: Mapping[str, ProblemScore]) -> str:
    """Where a record's rows came from: ``local``, ``published`` or both."""
    return "+".join(sorted(set().union(*(s.sources for s in by_pid.values())))) or "local"


# What a record's label adds for where its rows come from (a store's own rows: nothing).
SOURCE_MARKS = {"published": " [published]", "local+published": " [partly published]"}


def _label(agent: str, source: str, extra_default: bool) -> str:
    """A record's name in tables and figures: the agent, which config, which rows."""
    label = agent + (" (default)" if extra_default else "")
    return label + SOURCE_MARKS.get(source, "")


def _close_calls(records: Sequence[Mapping[str, Any]], taus: Sequence[int],
                 metric: str) -> list[Note]:
    """Warnings for neighbours in the ranking whose mean KLs differ by less than the larger
    of their standard errors at some tau: their order there is noise."""
    notes = []
    for upper, lower in zip(records, records[1:]):
        close = [tau for tau in taus
                 if abs(upper[f"{metric}_{tau}"] - lower[f"{metric}_{tau}"])
                 < max(upper[f"{metric}_{tau}_stderr"], lower[f"{metric}_{tau}_stderr"])]
        if close:
            notes.append(Note(f"{upper['label']} and {lower['label']} differ by less than a "
                              f"standard error at tau = {', '.join(map(str, close))}: their "
                              f"order there is not meaningful (`compare --agent "
                              f"{lower['agent']} --baseline {upper['agent']}` tests it on "
                              "paired problems)", "neighbours within a standard error"))
    return notes


def _comparison(scope: str, agent: str, baseline: str, where: Mapping[str, Any],
                tau: int | None, pairs: Sequence[tuple[Setting, float]], of: int, clipped: int,
                selection: str, metric: str = "loss", loss: str = "kl") -> dict[str, Any]:
    """One paired comparison: stratified mean difference, its stderr and t-test; for
    ``metric`` one of :data:`LOSSES`, of the rows' loss ``loss`` (``kl``, or ``nll`` on
    real data), which names the difference's column; ``where``: the setting's columns
    (an entry of :func:`_where`).

    Degrees of freedom: pairs minus strata (each setting's mean is estimated).
    """
    mean, se, strata = stratified(pairs)
    df = len(pairs) - strata
    p_value = _p_value(mean, se, df)
    verdict = _verdict(mean, p_value, COMPARE_METRICS[metric])
    if metric in LOSSES:
        return {
            "scope": scope, "agent": agent, "baseline": baseline, "metric": loss, **where,
            "tau": tau, f"{loss}_diff": mean, "stderr": se, "p_value": p_value, "df": df,
            "pairs": len(pairs), "verdict": verdict, "clipped": clipped,
            "flag": _flag(of - len(pairs), of, clipped), "selection": selection,
        }
    return {
        "scope": scope, "agent": agent, "baseline": baseline, "metric": metric, **where,
        f"{metric}_diff": mean, "stderr": se, "p_value": p_value, "df": df,
        "pairs": len(pairs), "verdict": verdict, "flag": _flag(of - len(pairs), of, 0),
        "selection": selection,
    }


def compare_agents(
    rows: Iterable[StoredRow],
    problems: Mapping[str, Any],
    agent: str,
    baselines: Sequence[str],
    selection: str = "same",
    metric: str = "loss",
    per_problem: PerProblem | None = None,
) -> list[dict[str, Any]]:
    """Paired differences (agent - baseline) of KL or another per-problem metric,
    pooled over the sweep, then per setting.

    Each agent uses its globally tuned config; differences are paired by
    problem. The ``scope="pooled"`` records come first, one per (baseline, tau):
    the stratified mean difference over every reported problem, its stratified
    ``stderr`` and a two-sided t-test with ``df = pairs - settings``. Then
    ``scope="setting"`` records per (baseline, temperature, T, tau), each a
    paired t-test (df = pairs - 1). ``verdict`` is ``better`` (lower KL) or
    ``worse`` where ``p_value < 0.05``, else ``n.s.``, or ``n/a`` when there is
    no variance estimate (a setting with one pair). ``clipped`` counts both
    agents' rows in the comparison that clipped infinite KL terms; ``source``
    says where the baseline's paired rows came from (see :func:`score_agents`).

    With ``metric`` another of :data:`COMPARE_METRICS` (a row's diagnostics
    scalar, or a name of ``per_problem``, see :func:`score_agents`), the pairs
    are the problems where both agents have a value, the difference is in
    ``<metric>_diff``, records have ``metric`` and no ``tau`` or ``clipped``, and
    ``better`` follows the metric's direction (higher for metacorrelation, xll
    and tal, lower for kl and self_certainty).

    Args:
      rows: stored rows.
      problems: the sweep, problem id -> Problem.
      agent: the agent compared.
      baselines: the agents it is compared with.
      selection: ``"same"`` or ``"held-out"``, as in :func:`score_agents`.
      metric: a name of :data:`COMPARE_METRICS` (default ``"loss"``: the rows' loss,
        d_KL on the testbed, the NLL on real data; ``kl`` or ``nll`` must match it).
      per_problem: more per-problem values, as in :func:`score_agents`.

    Raises:
      ValueError: if the agent or a baseline has no results for the sweep, or the
        metric is unknown or names a loss the rows do not carry.
    """
    if metric not in COMPARE_METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(COMPARE_METRICS)}")
    scores, configs, loss = collect_scores(rows, problems, per_problem)
    if metric in LOSSES and metric not in ("loss", loss):
        raise ValueError(f"metric {metric!r}: the rows of this sweep carry {loss}, not "
                         f"{metric}; use {loss} (or loss)")
    halves = _halves(problems, selection)
    present = {c[0] for c in scores}
    for name in (agent, *baselines):
        if name not in present:
            raise ValueError(f"no results for agent {name!r} on this sweep; agents with "
                             f"results: {', '.join(sorted(present)) or 'none'}")
    mine = _tuned(agent, scores, configs, problems, "global", halves)[0]
    where = _where(problems)
    report = sorted(halves[1])
    settings = sorted({_setting(problems[pid]) for pid in report})
    pooled, per_setting = [], []
    for name in baselines:
        theirs = _tuned(name, scores, configs, problems, "global", halves)[0]
        for setting in (None, *settings):
            scope = [pid for pid in report
                     if setting is None or _setting(problems[pid]) == setting]
            pids = [pid for pid in scope if pid in mine and pid in theirs]
            kind = "pooled" if setting is None else "setting"
            if metric not in LOSSES:
                values = [(pid, mine[pid].diagnostics.get(metric, math.nan),
                           theirs[pid].diagnostics.get(metric, math.nan)) for pid in pids]
                pairs = [(_setting(problems[pid]), a - b) for pid, a, b in values
                         if not (math.isnan(a) or math.isnan(b))]
                record = _comparison(kind, agent, name, where[setting], None, pairs,
                                     len(scope), 0, selection, metric)
                record["source"] = _source({pid: theirs[pid] for pid in pids})
                (pooled if setting is None else per_setting).append(record)
                continue
            for tau in _taus(problems):
                pairs = [(_setting(problems[pid]),
                          mine[pid].loss[tau] - theirs[pid].loss[tau])
                         for pid in pids]
                clipped = sum((tau in mine[pid].clipped) + (tau in theirs[pid].clipped)
                              for pid in pids)
                record = _comparison(kind, agent, name, where[setting], tau, pairs,
                                     len(scope), clipped, selection, loss=loss)
                record["source"] = _source({pid: theirs[pid] for pid in pids})
                (pooled if setting is None else per_setting).append(record)
    return pooled + per_setting


def significance_groups(rows: Iterable[StoredRow], problems: Mapping[str, Any],
                        selection: str = "same") -> dict[str, dict[int, int]]:
    """Each agent's significance group at each tau: 1 for the agents that the paired
    test of :func:`compare_agents` does not find worse than the best (lowest d_KL^tau)
    agent, 2 for those not worse than the best of the rest, and so on.

    Ranks alone overstate small differences; a group says which agents the sweep cannot
    tell apart from the leader. Each agent is scored with its globally tuned config, as
    in ``compare``, and a comparison with no variance estimate (``n/a``) is not a
    difference. Returns ``{agent: {tau: group}}``.
    """
    scores, configs, _ = collect_scores(rows, problems)
    halves = _halves(problems, selection)
    report = sorted(halves[1])
    tuned = {agent: _tuned(agent, scores, configs, problems, "global", halves)[0]
             for agent in sorted({c[0] for c in scores})}
    groups: dict[str, dict[int, int]] = {agent: {} for agent in tuned}
    for tau in _taus(problems):
        left = sorted((stratified((_setting(problems[pid]), s.loss[tau])  # the column's
                                  for pid, s in by_pid.items())[0], agent)
                      for agent, by_pid in tuned.items() if by_pid)
        group = 0
        while left:
            group += 1
            _, leader = left[0]
            theirs = tuned[leader]
            same = []
            for mean, agent in left:
                mine = tuned[agent]
                pairs = [(_setting(problems[pid]), mine[pid].loss[tau] - theirs[pid].loss[tau])
                         for pid in report if pid in mine and pid in theirs]
                verdict = _comparison("pooled", agent, leader, {}, tau, pairs, len(report),
                                      0, selection)["verdict"]
                if agent == leader or verdict != "worse":
                    same.append((mean, agent))
                    groups[agent][tau] = group
            left = [entry for entry in left if entry not in same]
    return groups


def plus_minus(value: Any, stderr: Any) -> str:
    """``0.1194±0.0071``: the error to two significant digits, the value to the same
    decimal place (four significant digits where there is no error)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if stderr is None or not math.isfinite(stderr) or stderr <= 0:
        return f"{value:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(stderr)))
    return f"{value:.{decimals}f}±{stderr:.{decimals}f}"


def format_cell(value: Any) -> str:
    """A value as a table shows it: floats to four significant digits, NaN as n/a."""
    if value is None:
        return ""
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
    cells = [[format_cell(r.get(c, "")) for c in columns] for r in records]
    if fmt == "markdown":
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def tuned_candidates(rows: Iterable[StoredRow],
                     problems: Mapping[str, Any]) -> dict[str, Candidate]:
    """Each agent's globally tuned (agent, config hash, estimator, agent seed): the
    candidate the default leaderboard reports (``tuning="global"``, ``selection="same"``)."""
    scores, _, _ = collect_scores(rows, problems)
    return {agent: _best([c for c in scores if c[0] == agent], scores, set(problems),
                         _taus(problems))
            for agent in sorted({c[0] for c in scores})}


def score_candidates(
    rows: Iterable[StoredRow], problems: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One record per (agent, config, estimator, agent seed), untuned.

    Each has ``agent``, ``config_hash``, ``config``, ``estimator``, ``agent_seed``,
    ``metric``, ``<metric>_<tau>`` (mean over the problems it covers), ``<metric>_agg``,
    ``seconds_per_problem``, ``problems`` and ``source`` (see :func:`score_agents`).
    """
    scores, configs, metric = collect_scores(rows, problems)
    taus = _taus(problems)
    records = []
    for cand, by_pid in sorted(scores.items()):
        record: dict[str, Any] = {"agent": cand[0], "config_hash": cand[1], "config": configs[cand],
                                  "estimator": cand[2], "agent_seed": cand[3], "metric": metric}
        for tau in taus:
            record[f"{metric}_{tau}"] = _mean([s.loss[tau] for s in by_pid.values()])
        record[f"{metric}_agg"] = _agg(by_pid, taus)
        record["seconds_per_problem"] = _mean([s.seconds for s in by_pid.values()])
        record["problems"] = len(by_pid)
        record["source"] = _source(by_pid)
        records.append(record)
    return records


def kl_by_setting(
    rows: Iterable[StoredRow], problems: Mapping[str, Any], tuning: str = "global",
    selection: str = "same",
) -> list[dict[str, Any]]:
    """Each agent's mean KL (and its stderr over seeds) per setting and tau, tuned:
    ``kl`` and ``kl_stderr``, or ``nll`` and ``nll_stderr`` where the metric is the NLL.

    With ``selection="held-out"`` the means are over each setting's reported half.
    """
    scores, configs, metric = collect_scores(rows, problems)
    halves = _halves(problems, selection)
    records, where = [], _where(problems)
    for agent in sorted({c[0] for c in scores}):
        by_pid = _tuned(agent, scores, configs, problems, tuning, halves)[0]
        for setting in sorted({_setting(p) for p in problems.values()}):
            pids = [pid for pid in by_pid if _setting(problems[pid]) == setting]
            for tau in _taus(problems):
                mean, se, _ = stratified((setting, by_pid[pid].loss[tau]) for pid in pids)
                records.append({"agent": agent, **where[setting], "tau": tau,
                                "metric": metric, metric: mean, f"{metric}_stderr": se,
                                "problems": len(pids),
                                "source": _source({pid: by_pid[pid] for pid in pids}),
                                "selection": selection})
    return records
