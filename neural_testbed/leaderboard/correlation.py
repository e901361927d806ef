"""Does the testbed predict real data? Correlation across an agent's configs (paper Figure 6).

The paper (section 5.2, appendix D.2) scores every config of an agent on the
synthetic testbed and on real datasets and reports the Pearson correlation of
the two across configs, per data regime, with bootstrap 5th/95th percentiles.
It does not say how a config is scored; these are our definitions:

* Value. Per problem and tau, a config's stored d_KL on the testbed (``kl``), its
  NLL on real data (``nll``), divided by the baseline's default config's on the same
  problem and tau. The ratio puts problems with different class counts and label
  entropies on one scale: a raw NLL mean would be dominated by the hardest
  dataset. A config's value is averaged over the agent seeds and estimators the
  store holds for it.
* Score. Per problem, the mean of the values over its taus (tau 1 and 100
  weighted equally); per regime and side, the mean over the regime's problems on
  which the baseline has a positive value (a ratio to zero or less means
  nothing). Only configs with rows on every such problem, on both sides, are
  used; the others are counted as ``dropped``.
* Regimes. ``low data``: T in {1, 10}. ``high data``: the largest T, i.e. the
  synthetic sweep's largest T and each dataset's full training split
  (``num_train == num_train_split``).
* Bootstrap. Each draw resamples problems with replacement within each stratum
  (``problem.stratum``: (temperature, T) or (dataset, T)), separately on each
  side, recomputes every config's two scores and their correlation; p5 and p95
  are percentiles over the draws, from a fixed NumPy seed per (agent, regime).
  Configs are not resampled: the question is about these configs.
* Fewer than 3 configs, or scores equal for every config on a side: the
  correlation is n/a, with the reason in ``note``.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from neural_testbed.agents import registry
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import scoring
from neural_testbed.leaderboard.store import StoredRow

__all__ = ["COLUMNS", "REGIMES", "config_losses", "correlate", "describe", "pearson_rows",
           "regime_problems", "resampled_means"]

REGIMES: Mapping[str, str] = types.MappingProxyType({
    "low data": "T in {1, 10}",
    "high data": "the largest T: the synthetic sweep's, and each dataset's full training split",
})

# What the command's table shows; records also carry the points of Figure 6b.
COLUMNS = ("agent", "regime", "configs", "correlation", "p5", "p95", "dropped",
           "synthetic_problems", "real_problems", "note")

_LOW_DATA = (1, 10)
_PERCENTILES = (5, 95)
_MIN_CONFIGS = 3  # two points always lie on a line

Config = tuple[str, str]  # agent, config_hash
Values = dict[Config, dict[str, dict[int, float]]]  # config -> problem id -> tau -> d_KL/NLL


class _Side(NamedTuple):
    """One side (synthetic or real) of one regime: per-problem scores of the configs."""

    strata: tuple[Any, ...]  # problem.stratum of each scored problem
    scores: dict[Config, np.ndarray]  # [problems], for configs covering every problem
    seen: set[Config]  # configs with a row on at least one of the regime's problems
    of: int  # the regime's problems, including those the baseline lacks


def regime_problems(problems: Mapping[str, Any], regime: str) -> dict[str, Any]:
    """The problems of one sweep (all synthetic or all real) that belong to ``regime``."""
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; allowed: {', '.join(REGIMES)}")
    if regime == "low data":
        return {pid: p for pid, p in problems.items() if p.num_train in _LOW_DATA}
    largest = max((p.num_train for p in problems.values()), default=0)
    return {pid: p for pid, p in problems.items()
            if p.num_train == getattr(p, "num_train_split", largest)}


def describe(baseline: str, num_bootstrap: int, seed: int) -> str:
    """The definitions behind a table of :func:`correlate`, in two lines."""
    return (f"score: a config's d_KL (synthetic) or NLL (real) / {baseline}'s default config's "
            "on the same problem and tau, averaged over taus, then over the regime's problems; "
            "correlation: Pearson across the agent's configs of (synthetic score, real score)\n"
            f"regimes: low data = {REGIMES['low data']}; high data = {REGIMES['high data']}; "
            f"p5, p95: percentiles of {num_bootstrap} bootstrap draws (seed {seed}) of problems "
            "resampled within each stratum, each side separately")


def _check_side(problems: Mapping[str, Any], metric: str, side: str) -> None:
    if not problems:
        raise ValueError(f"the {side} sweep has no problems")
    wrong = sorted({p.metric for p in problems.values()} - {metric})
    if wrong:
        kind = "synthetic (d_KL)" if metric == "kl" else "real-data (NLL)"
        raise ValueError(f"the {side} sweep must hold {kind} problems only; it has "
                         f"{', '.join(wrong)} problems")


def config_losses(rows: Sequence[StoredRow], problems: Mapping[str, Any]) -> Values:
    """Each config's d_KL or NLL (the sweep's metric) per problem and tau, over its complete
    (problem, candidate) results."""
    complete, _, _ = scoring.collect_scores(rows, problems)
    runs: dict[Config, dict[str, list[dict[int, float]]]] = {}
    for (agent, config_hash, _, _), by_pid in complete.items():
        for pid, score in by_pid.items():
            runs.setdefault((agent, config_hash), {}).setdefault(pid, []).append(score.loss)
    return {config: {pid: {tau: float(np.mean([loss[tau] for loss in losses]))
                           for tau in losses[0]}
                     for pid, losses in by_pid.items()}
            for config, by_pid in runs.items()}


def _side(values: Values, problems: Mapping[str, Any], regime: str, agent: str,
          baseline: Config) -> _Side:
    chosen = regime_problems(problems, regime)
    base = values.get(baseline, {})
    pids = sorted(pid for pid, p in chosen.items()
                  if pid in base and all(base[pid][tau] > 0 for tau in p.taus))
    mine = {config: by_pid for config, by_pid in values.items() if config[0] == agent}
    scores = {
        config: np.array([np.mean([by_pid[pid][tau] / base[pid][tau]
                                   for tau in problems[pid].taus]) for pid in pids])
        for config, by_pid in mine.items() if all(pid in by_pid for pid in pids)
    }
    seen = {config for config, by_pid in mine.items() if not by_pid.keys().isdisjoint(chosen)}
    return _Side(tuple(problems[pid].stratum for pid in pids), scores, seen, len(chosen))


def resampled_means(rng: np.random.Generator, scores: np.ndarray, strata: Sequence[Any],
                     num: int) -> np.ndarray:
    """[num, configs]: mean scores over problems resampled with replacement per stratum."""
    index = {stratum: i for i, stratum in enumerate(sorted(set(strata)))}
    labels = np.array([index[stratum] for stratum in strata])
    counts = np.zeros((num, len(strata)))
    for label in range(len(index)):
        members = np.flatnonzero(labels == label)
        draws = rng.integers(0, len(members), size=(num, len(members)))
        np.add.at(counts, (np.arange(num)[:, None], members[draws]), 1.0)
    return counts @ scores.T / len(strata)


def pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of x with the same row of y; NaN where one is constant."""
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=1) / np.sqrt((xc ** 2).sum(axis=1) * (yc ** 2).sum(axis=1))
    return np.clip(r, -1.0, 1.0)


def _bootstrap(used: Sequence[Config], synthetic: _Side, real: _Side, num: int,
               seed: int) -> np.ndarray:
    """[num] correlations, each of scores over problems resampled within strata."""
    rng = np.random.default_rng(seed)
    x = resampled_means(rng, np.stack([synthetic.scores[c] for c in used]), synthetic.strata,
                         num)
    y = resampled_means(rng, np.stack([real.scores[c] for c in used]), real.strata, num)
    return pearson_rows(x, y)


def _record(agent: str, regime: str, synthetic: _Side, real: _Side, num_bootstrap: int,
            seed: int) -> dict[str, Any]:
    sides = (("synthetic", synthetic), ("real", real))
    empty = [name for name, side in sides if not side.strata]
    used = [] if empty else sorted(synthetic.scores.keys() & real.scores.keys())
    x = np.array([synthetic.scores[c].mean() for c in used])
    y = np.array([real.scores[c].mean() for c in used])
    lacking = [f"{name} ({len(side.strata)} of {side.of})" for name, side in sides
               if len(side.strata) < side.of]
    notes = [f"baseline lacks problems: {', '.join(lacking)}"] if lacking else []
    correlation = p5 = p95 = math.nan
    if empty:
        notes.append(f"no baseline results on the {' or '.join(empty)} problems of this regime")
    elif len(used) < _MIN_CONFIGS:
        notes.append(f"{len(used)} config{'s' if len(used) != 1 else ''} with results on both "
                     f"sides; a correlation needs {_MIN_CONFIGS}")
    elif np.ptp(x) == 0 or np.ptp(y) == 0:
        notes.append("every config has the same score on one side: no correlation")
    else:
        from scipy import stats  # about half a second to import: only this needs it

        correlation = float(stats.pearsonr(x, y).statistic)
        r = _bootstrap(used, synthetic, real, num_bootstrap, seed)
        undefined = int(np.isnan(r).sum())
        if undefined:
            notes.append(f"{undefined} of {num_bootstrap} bootstrap draws gave every config "
                         "the same score on a side and were left out")
        if undefined < num_bootstrap:
            p5, p95 = (float(v) for v in np.nanpercentile(r, _PERCENTILES))
    return {
        "agent": agent, "regime": regime, "configs": len(used), "correlation": correlation,
        "p5": p5, "p95": p95, "dropped": len((synthetic.seen | real.seen) - set(used)),
        "synthetic_problems": len(synthetic.strata), "real_problems": len(real.strata),
        "note": "; ".join(notes), "config_hashes": tuple(c[1] for c in used),
        "synthetic_scores": tuple(map(float, x)), "real_scores": tuple(map(float, y)),
    }


def correlate(
    rows: Iterable[StoredRow],
    synthetic_problems: Mapping[str, Any],
    real_problems: Mapping[str, Any],
    agents: Sequence[str],
    baseline: str = "mlp",
    regimes: Sequence[str] = tuple(REGIMES),
    num_bootstrap: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One record per (agent, regime): the correlation of its configs' testbed and real scores.

    See the module docstring for the definitions. Each record has ``agent``,
    ``regime``, ``configs`` (how many were correlated), ``correlation``, ``p5``,
    ``p95``, ``dropped`` (configs with some rows in the regime but not on every
    scored problem of both sides), ``synthetic_problems`` and ``real_problems``
    (how many were scored), ``note`` (why a value is n/a, what the baseline
    lacks), and the points: ``config_hashes``, ``synthetic_scores``,
    ``real_scores``.

    Args:
      rows: stored rows (``ResultsStore.rows()``).
      synthetic_problems: a testbed sweep (metric ``kl``), problem id -> problem.
      real_problems: a real-data sweep (metric ``nll``), problem id -> problem.
      agents: the agents to correlate.
      baseline: a registered agent; its default config normalises every value.
      regimes: names from :data:`REGIMES`.
      num_bootstrap: bootstrap draws.
      seed: NumPy seed of the bootstrap (the same for every record).

    Raises:
      ValueError: if a sweep holds the wrong kind of problems, the baseline is not
        registered or has no results, an agent has no results on either sweep, or
        ``num_bootstrap`` is not a positive integer.
    """
    _check_side(synthetic_problems, "kl", "synthetic")
    _check_side(real_problems, "nll", "real")
    for regime in regimes:
        regime_problems({}, regime)  # an unknown regime's error, before any work
    if not isinstance(num_bootstrap, int) or num_bootstrap < 1:
        raise ValueError(f"num_bootstrap must be an integer >= 1, got {num_bootstrap!r}")
    default = registry.get_agent(baseline).default
    base: Config = (baseline, configs_lib.config_hash(baseline, default))
    rows = list(rows)
    synthetic = config_losses(rows, synthetic_problems)
    real = config_losses(rows, real_problems)
    if base not in synthetic and base not in real:
        raise ValueError(f"no results for {baseline}'s default config on these sweeps; run "
                         f"`neural-testbed run --agent {baseline}` on both")
    present = sorted({config[0] for config in (*synthetic, *real)})
    for agent in agents:
        if agent not in present:
            raise ValueError(f"no results for agent {agent!r} on these sweeps; agents with "
                             f"results: {', '.join(present)}")
    return [_record(agent, regime,
                    _side(synthetic, synthetic_problems, regime, agent, base),
                    _side(real, real_problems, regime, agent, base), num_bootstrap, seed)
            for agent in agents for regime in regimes]
