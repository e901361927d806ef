"""Per-problem results of the studies that are not rows: `tal`, `probe`, `bandit` and
`active`.

The commands train an agent per problem (for ``bandit`` and ``active``, per seed: its
"problem" is ``bandit/SEED`` or ``active/SEED``) and compute numbers no row holds
(:mod:`neural_testbed.active.tal`, :mod:`neural_testbed.leaderboard.probing`,
:mod:`neural_testbed.bandit`, :mod:`neural_testbed.active.classification`).
Each problem's result is written to the store's ``studies`` table as soon as it
is done, one record per (agent, config hash, problem, study, settings hash),
so an interrupted run resumes where it stopped and the leaderboard, ``compare``
and the DataFrames can use them. The settings are those that change the
numbers (TAL: rounds, batch, samples, agent seed, methods; probes: the k lists,
bins, samples, agent seed; bandit and active: their whole setting, the priority among
it), as canonical JSON beside their hash.

A record's ``data`` is JSON that gives back the result exactly (float32 values
as the float64 numbers they are, so a report from the store equals the report
of the run that computed it):

- ``tal``: ``log_likelihood`` (method -> the mean test log-likelihood before
  and after each round), ``selected`` (method -> candidate indices per round),
  ``num_queried`` and the agent's ``metacorrelation`` (null: not applicable);
- ``probe``: a list of ``{"probe", "at", "value"}``, as ``probe --per-problem``
  prints them, and in ``detail`` the per-input distance and predictive variance
  (float32, zlib) that the variance-by-distance figure draws. A record that lacks a
  probe of :data:`~neural_testbed.leaderboard.probing.PROBES` (stored before the MSE
  probe was added) is not reused: `probe` computes that problem again and replaces it;
- ``bandit``: the ``seed``, ``total_regret``, ``best_action_share`` and the
  ``cumulative_regret`` at up to 100 ``steps``, and in ``detail`` the regret of
  every step (float32, zlib);
- ``active``: the ``seed``, ``priority``, ``num_labels`` and ``kl`` (d_KL at tau = 1)
  after each training, and the pool input ``chosen`` for every label.

Per-problem scalars for ``leaderboard --metrics`` and ``compare --metric``
(:data:`METRICS`):

- ``tal``: Wang et al.'s TAL score, BatchMIG's mean test log-likelihood after
  the first round minus random selection's on the same problem (their Figure 4
  scores one round, the round whose score they correlate with the
  metacorrelation). Random selection does not use the agent, so subtracting it
  moves every agent by the same amount on a problem: the order of agents is the
  paper's, 0 is "no better than random", and the problem's difficulty cancels
  from the spread. Needs a record whose methods include batchmig and random.
- ``self_certainty``: Grover et al.'s self-certainty, the mean over the
  training inputs of (s - sigma)^2 (0 is best).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from neural_testbed import bandit, outputs
from neural_testbed.active import classification, selection, tal
from neural_testbed.leaderboard import probing, scoring
from neural_testbed.leaderboard.configs import config_hash, config_json

__all__ = [
    "LONG_COLUMNS",
    "METRICS",
    "STUDIES",
    "bandit_record",
    "bandit_regret",
    "bandit_settings_json",
    "bandit_summary",
    "long_records",
    "per_problem_metrics",
    "probe_record",
    "probe_record_is_complete",
    "probe_result",
    "probe_settings_json",
    "settings_hash",
    "stored_by_problem",
    "tal_record",
    "tal_result",
    "tal_score",
    "tal_settings_json",
    "write_long_csv",
]

STUDIES = ("tal", "probe", "bandit", "active")
# Columns of the long form (one value per record): `export --table studies`, studies_frame.
LONG_COLUMNS = ("agent", "config_hash", "problem_id", "study", "settings_hash", "name", "at",
                "value")


def settings_hash(study: str, settings: str) -> str:
    """A stable 12-hex-digit id of a study's settings (canonical JSON)."""
    return hashlib.sha256(f"{study}:{settings}".encode()).hexdigest()[:12]


def _canonical(settings: Any) -> str:
    return json.dumps(dataclasses.asdict(settings), sort_keys=True, separators=(",", ":"))


def tal_settings_json(settings: tal.TALSettings) -> str:
    """The settings of a TAL record: all of :class:`~neural_testbed.active.TALSettings`,
    the methods in one order (each method's queries and keys do not depend on the others,
    so ``--method random,batchmig`` is the record of ``batchmig,random``)."""
    methods = tuple(m for m in selection.METHODS if m in settings.methods)
    return _canonical(dataclasses.replace(settings, methods=methods))


def probe_settings_json(settings: probing.ProbeSettings) -> str:
    """The settings of a probe record: all of :class:`~neural_testbed.leaderboard.ProbeSettings`."""
    return _canonical(settings)


def _record(agent: str, config: Any, problem_id: str, study: str, settings: str,
            data: Any, detail: bytes | None, seconds: float | None) -> dict[str, Any]:
    return {"agent": agent, "config_hash": config_hash(agent, config),
            "config": config_json(config), "problem_id": problem_id, "study": study,
            "settings_hash": settings_hash(study, settings), "settings": settings,
            "data": json.dumps(data, sort_keys=True, separators=(",", ":")),
            "detail": detail, "seconds": seconds}


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def tal_record(agent: str, config: Any, result: tal.TALResult,
               settings: tal.TALSettings) -> dict[str, Any]:
    """The store record of one problem's TAL result."""
    data = {"num_queried": [int(n) for n in result.num_queried],
            "log_likelihood": {m: [float(v) for v in values]
                               for m, values in result.log_likelihood.items()},
            "selected": {m: np.asarray(batches).tolist() for m, batches in result.selected.items()},
            "metacorrelation": _finite_or_none(result.metacorrelation)}
    return _record(agent, config, result.problem_id, "tal", tal_settings_json(settings), data,
                   None, result.seconds)


def tal_result(record: Mapping[str, Any]) -> tal.TALResult:
    """The :class:`~neural_testbed.active.TALResult` a record holds."""
    data = json.loads(record["data"])
    metacorrelation = data["metacorrelation"]
    return tal.TALResult(
        record["problem_id"], np.asarray(data["num_queried"]),
        {m: np.asarray(v, float) for m, v in data["log_likelihood"].items()},
        {m: np.asarray(v, int) for m, v in data["selected"].items()},
        math.nan if metacorrelation is None else metacorrelation, record["seconds"])


_ARRAYS = ("distance", "variance")  # the per-input arrays kept in ``detail``


def probe_record(agent: str, config: Any, problem_id: str, result: probing.ProblemProbes,
                 settings: probing.ProbeSettings, seconds: float | None = None
                 ) -> dict[str, Any]:
    """The store record of one problem's probes."""
    labels = probing.parameter_labels(settings)
    data = [{"probe": name, "at": at, "value": float(value)}
            for name in probing.PROBES
            for at, value in zip(labels[name], np.atleast_1d(getattr(result, name)))]
    arrays = np.stack([np.asarray(getattr(result, name), "<f4") for name in _ARRAYS])
    return _record(agent, config, problem_id, "probe", probe_settings_json(settings), data,
                   zlib.compress(arrays.tobytes(), 6), seconds)


def probe_record_is_complete(record: Mapping[str, Any]) -> bool:
    """Whether a probe record holds every probe of :data:`probing.PROBES` (one stored
    before a probe was added does not)."""
    return set(probing.PROBES) <= {entry["probe"] for entry in json.loads(record["data"])}


def probe_result(record: Mapping[str, Any]) -> probing.ProblemProbes:
    """The :class:`~neural_testbed.leaderboard.probing.ProblemProbes` a complete record
    holds (float32, as computed)."""
    values: dict[str, list[float]] = {}
    for entry in json.loads(record["data"]):
        values.setdefault(entry["probe"], []).append(entry["value"])
    arrays = np.frombuffer(zlib.decompress(record["detail"]), "<f4").reshape(len(_ARRAYS), -1)
    scalars = {name for name, labels in probing.parameter_labels(
        probing.ProbeSettings()).items() if labels == [""]}  # self-certainty and the MSE
    fields = {name: np.asarray(v[0] if name in scalars else v, np.float32)
              for name, v in values.items()}
    fields.update(zip(_ARRAYS, (np.array(a) for a in arrays)))
    return probing.ProblemProbes(**fields)


_CHECKPOINTS = 100  # steps at which a bandit record's data holds the cumulative regret


def bandit_settings_json(setting: bandit.BanditSetting) -> str:
    """The settings of a bandit record: all of :class:`~neural_testbed.bandit.BanditSetting`,
    the number of actions given as a number (the default's 50 x d, written out)."""
    return _canonical(dataclasses.replace(setting, num_actions=setting.actions))


def bandit_record(agent: str, config: Any, seed: int, run: bandit.BanditRun,
                  setting: bandit.BanditSetting, seconds: float | None = None) -> dict[str, Any]:
    """The store record of one seed's bandit ``run``: in ``data`` the seed, the total
    regret, the share of steps that took the best action and the cumulative regret at up
    to 100 evenly spaced steps; in ``detail`` the regret of every step (float32, zlib)."""
    regret = np.asarray(run.regret, "<f4")
    cumulative = np.cumsum(regret, dtype=np.float64)
    steps = np.unique(np.linspace(1, len(regret), min(_CHECKPOINTS, len(regret))).astype(int))
    data = {"seed": int(seed), "total_regret": float(cumulative[-1]),
            "best_action_share": float(np.mean(regret == 0)),
            "steps": steps.tolist(), "cumulative_regret": cumulative[steps - 1].tolist()}
    return _record(agent, config, f"bandit/{seed}", "bandit", bandit_settings_json(setting),
                   data, zlib.compress(regret.tobytes(), 6), seconds)


def bandit_regret(record: Mapping[str, Any]) -> np.ndarray:
    """The regret of every step of a bandit record (float32, as computed)."""
    return np.frombuffer(zlib.decompress(record["detail"]), "<f4").copy()


def active_settings_json(setting: classification.ActiveSetting) -> str:
    """The settings of an active-learning record: all of
    :class:`~neural_testbed.active.classification.ActiveSetting`, the pool's size written
    out."""
    return _canonical(dataclasses.replace(setting, pool_size=setting.pool))


def active_record(agent: str, config: Any, seed: int, run: classification.ActiveRun,
                  setting: classification.ActiveSetting,
                  seconds: float | None = None) -> dict[str, Any]:
    """The store record of one seed's active-learning ``run``: in ``data`` the seed, the
    priority, the labels and d_KL at tau = 1 after each training, and the pool input of
    every label in order."""
    data = {"seed": int(seed), "priority": setting.priority,
            "num_labels": np.asarray(run.num_labels).tolist(),
            "kl": np.asarray(run.kl, np.float64).tolist(),
            "chosen": np.asarray(run.chosen).tolist()}
    return _record(agent, config, f"active/{seed}", "active", active_settings_json(setting),
                   data, None, seconds)


def _stderr(values: np.ndarray) -> float:
    """The standard error of the mean of ``values`` (NaN for one value)."""
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else math.nan


def active_summary(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (agent config, priority), over its seeds' active-learning records (of one
    setting but the priority): the final d_KL at tau = 1 and the mean over trainings (the
    area under the curve, per training), each with its standard error, and the mean d_KL
    with its standard error after each training; the lowest final d_KL first."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        data = json.loads(r["data"])
        groups.setdefault((r["agent"], r["config_hash"], data["priority"]), []).append(data)
    out = []
    for (agent, hash_, priority), data in groups.items():
        curves = np.array([d["kl"] for d in data])
        n = len(data)
        out.append({"agent": agent, "config_hash": hash_, "priority": priority, "seeds": n,
                    "final_kl": float(curves[:, -1].mean()),
                    "final_kl_se": _stderr(curves[:, -1]),
                    "mean_kl": float(curves.mean()), "mean_kl_se": _stderr(curves.mean(1)),
                    "num_labels": data[0]["num_labels"], "curve": curves.mean(0).tolist(),
                    "curve_se": ((curves.std(0, ddof=1) / np.sqrt(n)).tolist() if n > 1
                                 else [math.nan] * curves.shape[1])})
    return sorted(out, key=lambda r: r["final_kl"])


def bandit_summary(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per agent config, over its seeds' bandit records (of one setting): the mean total
    regret and its standard error, the mean share of steps that took the best action,
    and the mean cumulative regret with its standard error at each stored step; the
    lowest total regret first."""
    by_config: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        by_config.setdefault((r["agent"], r["config_hash"]), []).append(r)
    out = []
    for (agent, hash_), group in by_config.items():
        data = [json.loads(r["data"]) for r in group]
        totals = np.array([d["total_regret"] for d in data])
        curves = np.array([d["cumulative_regret"] for d in data])
        n = len(data)
        out.append({"agent": agent, "config_hash": hash_, "seeds": n,
                    "regret": float(totals.mean()),
                    "regret_se": _stderr(totals),
                    "best_action_share": float(np.mean([d["best_action_share"] for d in data])),
                    "steps": data[0]["steps"], "curve": curves.mean(0).tolist(),
                    "curve_se": (curves.std(0, ddof=1) / np.sqrt(n)).tolist() if n > 1
                    else [math.nan] * curves.shape[1]})
    return sorted(out, key=lambda r: r["regret"])


def stored_by_problem(store, agent: str, config: Any, study: str,
                      settings: str) -> dict[str, dict[str, Any]]:
    """The records of an agent config's study with these settings, by problem id."""
    return {r["problem_id"]: r for r in store.studies(
        agent=agent, study=study, config_hash=config_hash(agent, config),
        settings_hash=settings_hash(study, settings))}


def tal_score(data: Mapping[str, Any]) -> float:
    """Wang et al.'s TAL score of one problem (module docstring): BatchMIG's test
    log-likelihood after round 1 minus random's; NaN without both or without a round."""
    curves = data["log_likelihood"]
    if "batchmig" not in curves or "random" not in curves or len(curves["batchmig"]) < 2:
        return math.nan
    return curves["batchmig"][1] - curves["random"][1]


def _self_certainty(data: Sequence[Mapping[str, Any]]) -> float:
    return next(e["value"] for e in data if e["probe"] == "self_certainty")


# name -> (study, the per-problem value from a record's data, higher is better)
METRICS: Mapping[str, tuple[str, Callable[[Any], float], bool]] = {
    "tal": ("tal", tal_score, True),
    "self_certainty": ("probe", _self_certainty, False),
}


def per_problem_metrics(records: Iterable[Mapping[str, Any]], problem_ids: Iterable[str]
                        ) -> tuple[dict[tuple[str, str, int, str], dict[str, float]], list[str]]:
    """The :data:`METRICS` of each (agent, config hash, agent seed, problem id), for
    :func:`~neural_testbed.leaderboard.scoring.score_agents`, and notes.

    An agent config may hold records of a study under several settings: each metric
    then comes from the settings that give it on the most of ``problem_ids`` (ties:
    the smallest settings hash), and a note says so. Settings are never mixed
    within a metric of one config.
    """
    wanted = set(problem_ids)
    # (agent, config, seed, metric) -> settings hash -> problem -> value
    found: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in records:
        if r["problem_id"] not in wanted:
            continue
        seed = json.loads(r["settings"])["agent_seed"]
        data = json.loads(r["data"])
        for name, (study, value_of, _) in METRICS.items():
            if r["study"] != study:
                continue
            value = value_of(data)
            if not math.isnan(value):
                found.setdefault((r["agent"], r["config_hash"], seed, name), {}).setdefault(
                    r["settings_hash"], {})[r["problem_id"]] = value
    values: dict[tuple[str, str, int, str], dict[str, float]] = {}
    notes = []
    for (agent, chash, seed, name), by_settings in sorted(found.items()):
        chosen = min(by_settings, key=lambda h: (-len(by_settings[h]), h))
        if len(by_settings) > 1:
            notes.append(f"{name} of {agent} (config {chash}, seed {seed}): records under "
                         f"{len(by_settings)} settings; used settings {chosen}, stored for "
                         f"{len(by_settings[chosen])} problems of the sweep")
        for pid, value in by_settings[chosen].items():
            values.setdefault((agent, chash, seed, pid), {})[name] = value
    return values, notes


def long_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Study records in long form, one value per record (:data:`LONG_COLUMNS`).

    TAL: ``name`` a method and ``at`` ``round=R`` (the test log-likelihood after R
    rounds; 0: before any query), then ``name="metacorrelation"``; probes: ``name``
    a probe and ``at`` its parameter, as ``probe --per-problem`` prints them; bandit:
    ``name="cumulative_regret"`` and ``at`` ``step=S``; active: ``name`` ``kl_1
    PRIORITY`` and ``at`` ``labels=N``. The selected indices, the
    per-input arrays and the per-step regret stay in the store.
    """
    out = []
    for r in records:
        where = {c: r[c] for c in LONG_COLUMNS[:5]}
        data = json.loads(r["data"])
        if r["study"] == "tal":
            for method, curve in data["log_likelihood"].items():
                out.extend({**where, "name": method, "at": f"round={i}", "value": v}
                           for i, v in enumerate(curve))
            meta = data["metacorrelation"]
            out.append({**where, "name": "metacorrelation", "at": "",
                        "value": math.nan if meta is None else meta})
        elif r["study"] == "active":
            out.extend({**where, "name": f"kl_1 {data['priority']}", "at": f"labels={n}",
                        "value": v} for n, v in zip(data["num_labels"], data["kl"]))
        elif r["study"] == "bandit":
            out.extend({**where, "name": "cumulative_regret", "at": f"step={t}", "value": v}
                       for t, v in zip(data["steps"], data["cumulative_regret"]))
        else:
            out.extend({**where, "name": e["probe"], "at": e["at"], "value": e["value"]}
                       for e in data)
    return out


def write_long_csv(records: Iterable[Mapping[str, Any]], path: str) -> int:
    """Writes study records in long form (:func:`long_records`) to a CSV file, each text
    cell made :func:`outputs.spreadsheet_safe`, whole or not at all; returns the count
    of values written (a header alone where there are none)."""
    values = [outputs.spreadsheet_safe(r) for r in long_records(records)]
    with outputs.written_whole(path, newline="") as f:
        f.write(scoring.format_records(values, "csv", LONG_COLUMNS)
                or ",".join(LONG_COLUMNS) + "\n")
    return len(values)
