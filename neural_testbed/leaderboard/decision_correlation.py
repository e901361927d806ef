"""Do joint predictions drive decisions? Across agents, how well d_KL at tau = 1 and at a
larger tau predict bandit regret and active-learning gain.

The Neural Testbed papers claim that an agent's joint predictions (d_KL^tau, tau > 1),
not its marginal ones (d_KL^1), tell how well it makes sequential decisions. The papers
in ../shared/papers do not give a recipe for testing that across agents, so these are
our definitions:

* Decision value, per agent (its default config) and seed, from the stored records of
  one setting of each task: ``bandit``, the total regret after the last step;
  ``active``, the gain of a priority over uniform labelling on the same seed (the same
  environment, pool and test inputs): the mean over the trainings of d_KL^1 with
  uniform picks minus that with the priority (the two learning curves' areas, per
  training).
* KL value, per agent and problem of a sweep: the stored d_KL^tau of its default config
  (averaged over its agent seeds and estimators where there are several). The agent's
  value is the mean over the sweep's problems: its leaderboard's ``kl_<tau>``. The
  leaderboard's normalised column divides that by one baseline mean for every agent,
  so the correlation would be the same. An agent without every problem of the sweep
  is left out of that sweep's correlations, and ``note`` says so.
* Correlation: Spearman's rank correlation across the agents of (KL value, decision
  value). Ranks, because a few seeds dominate mean regret (it is heavy-tailed) and
  the claim is about the agents' order.
* The claim's direction: regret should rise with KL (sign +1), gain should fall
  (sign -1). ``advantage`` = sign * (rho at the larger tau - rho at tau = 1) is
  positive where the joint d_KL predicts the decision better, as claimed.
* Bootstrap: each draw resamples the seeds (one draw for every agent: seed s is the
  same bandit or pool for all of them) and each sweep's problems within their strata
  (one draw for every agent and tau). It then recomputes every agent's values and the
  correlations; p5 and p95 are percentiles over the draws, from a fixed NumPy seed.
  Agents are not resampled: the question is about these agents, as in
  :mod:`neural_testbed.leaderboard.correlation`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from neural_testbed.leaderboard import correlation
from neural_testbed.leaderboard.store import StoredRow

__all__ = ["COLUMNS", "DECISIONS", "active_gains", "bandit_regrets", "correlate_decisions",
           "describe", "kl_values"]

# Each decision: what its value is, and the sign of its correlation with KL that the
# claim expects (regret rises with KL, gain falls).
DECISIONS: Mapping[str, tuple[str, int]] = {
    "bandit": ("total regret", +1),
    "active": ("gain over uniform labelling", -1),
}

# What the command's table shows; records also carry the points of the figure.
COLUMNS = ("decision", "sweep", "tau", "agents", "spearman", "p5", "p95", "advantage",
           "advantage_p5", "advantage_p95", "seeds", "problems", "note")

_PERCENTILES = (5, 95)
_MIN_AGENTS = 3  # two points always have rank correlation +-1

PerSeed = dict[str, dict[int, float]]  # agent -> seed -> decision value
PerProblem = dict[str, dict[str, dict[int, float]]]  # agent -> problem id -> tau -> d_KL


def _seed(record: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    data = json.loads(record["data"])
    return data, int(data["seed"])


def bandit_regrets(records: Iterable[Mapping[str, Any]], hashes: Mapping[str, str],
                   seeds: Collection[int]) -> PerSeed:
    """Each agent's total regret per seed of ``seeds``, from bandit records of one setting;
    only the config whose hash ``hashes`` gives for the agent. (A store may hold more
    seeds, from a longer run: the study is of the seeds it is asked for.)"""
    out: PerSeed = {}
    for r in records:
        if hashes.get(r["agent"]) == r["config_hash"]:
            data, seed = _seed(r)
            if seed in seeds:
                out.setdefault(r["agent"], {})[seed] = float(data["total_regret"])
    return out


def active_gains(records: Iterable[Mapping[str, Any]], hashes: Mapping[str, str],
                 priority: str, seeds: Collection[int]) -> PerSeed:
    """Each agent's gain of ``priority`` over ``uniform`` per seed of ``seeds``: the mean
    d_KL over the trainings with uniform picks minus with the priority, from
    active-learning records of one setting but the priority; seeds without both are left
    out."""
    curves: dict[tuple[str, str], dict[int, float]] = {}
    for r in records:
        if hashes.get(r["agent"]) == r["config_hash"]:
            data, seed = _seed(r)
            if seed not in seeds:
                continue
            curves.setdefault((r["agent"], data["priority"]), {})[seed] = float(
                np.mean(data["kl"]))
    out: PerSeed = {}
    for agent in sorted({agent for agent, _ in curves}):
        uniform, chosen = curves.get((agent, "uniform"), {}), curves.get((agent, priority), {})
        gains = {s: uniform[s] - chosen[s] for s in sorted(uniform.keys() & chosen.keys())}
        if gains:
            out[agent] = gains
    return out


def kl_values(rows: Iterable[StoredRow], problems: Mapping[str, Any],
              hashes: Mapping[str, str]) -> PerProblem:
    """Each agent's d_KL per problem and tau of its default config (the config whose hash
    ``hashes`` gives), from the rows that count on ``problems``."""
    losses = correlation.config_losses(list(rows), problems)
    return {agent: losses[(agent, hash_)] for agent, hash_ in hashes.items()
            if (agent, hash_) in losses}


def _ranks(values: np.ndarray) -> np.ndarray:
    from scipy import stats  # about half a second to import: only this needs it

    return stats.rankdata(values, axis=-1)


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rank correlation of each row of x with the same row of y (NaN where a row
    is constant)."""
    return correlation.pearson_rows(_ranks(np.atleast_2d(x)), _ranks(np.atleast_2d(y)))


def _interval(draws: np.ndarray) -> tuple[float, float]:
    if np.isnan(draws).all():
        return math.nan, math.nan
    return tuple(float(v) for v in np.nanpercentile(draws, _PERCENTILES))


def _record(decision: str, sweep: str, tau: int, **fields) -> dict[str, Any]:
    record = {"decision": decision, "sweep": sweep, "tau": tau, "agents": 0,
              "spearman": math.nan, "p5": math.nan, "p95": math.nan,
              "advantage": math.nan, "advantage_p5": math.nan, "advantage_p95": math.nan,
              "seeds": 0, "problems": 0, "note": "", "agent_names": (), "kl": (), "value": ()}
    record.update(fields)
    return record


def _pair(decision: str, per_seed: PerSeed, sweep: str, problems: Mapping[str, Any],
          per_problem: PerProblem, taus: Sequence[int], num_bootstrap: int,
          seed: int) -> list[dict[str, Any]]:
    """The records of one decision against one sweep, a record per tau, all from one set
    of agents, seeds and bootstrap draws (so that the taus compare draw by draw)."""
    complete = {agent for agent, by_pid in per_problem.items() if by_pid.keys() >= problems.keys()}
    agents = sorted(per_seed.keys() & complete)
    notes = []
    lacking = sorted(per_seed.keys() - complete)
    if lacking:
        notes.append(f"without every {sweep} problem: {', '.join(lacking)}")
    seeds = sorted(set.intersection(*(set(per_seed[a]) for a in agents))) if agents else []
    if any(len(per_seed[a]) > len(seeds) for a in agents):
        notes.append(f"only the {len(seeds)} seeds every agent has are used")
    fields: dict[str, Any] = {"agents": len(agents), "seeds": len(seeds),
                              "problems": len(problems), "agent_names": tuple(agents)}
    if len(agents) < _MIN_AGENTS or len(seeds) < 2:
        why = (f"{len(agents)} agents with both; a correlation needs {_MIN_AGENTS}"
               if len(agents) < _MIN_AGENTS else
               f"{len(seeds)} seed shared by the agents; the bootstrap needs 2")
        return [_record(decision, sweep, tau, note="; ".join([*notes, why]), **fields)
                for tau in taus]
    values = np.array([[per_seed[a][s] for s in seeds] for a in agents])  # [agents, seeds]
    pids = sorted(problems)
    strata = [problems[pid].stratum for pid in pids]
    kl = np.array([[[per_problem[a][pid][tau] for pid in pids] for a in agents]
                   for tau in taus])  # [taus, agents, problems]
    rng = np.random.default_rng(seed)
    value_draws = correlation.resampled_means(rng, values, [0] * len(seeds), num_bootstrap)
    kl_draws = correlation.resampled_means(
        rng, kl.reshape(-1, len(pids)), strata, num_bootstrap).reshape(
        num_bootstrap, len(taus), len(agents))
    sign = DECISIONS[decision][1]
    rho = [float(_spearman(kl[i].mean(1), values.mean(1))[0]) for i in range(len(taus))]
    rho_draws = [_spearman(kl_draws[:, i], value_draws) for i in range(len(taus))]
    undefined = int(sum(np.isnan(d).sum() for d in rho_draws))
    if undefined:
        notes.append(f"{undefined} bootstrap correlations had a constant side and were left out")
    records = []
    for i, tau in enumerate(taus):
        advantage = {}
        if i:  # against the first (smallest) tau
            lo, hi = _interval(sign * (rho_draws[i] - rho_draws[0]))
            advantage = {"advantage": sign * (rho[i] - rho[0]) + 0.0,  # + 0.0: never -0
                         "advantage_p5": lo + 0.0, "advantage_p95": hi + 0.0}
        p5, p95 = _interval(rho_draws[i])
        records.append(_record(
            decision, sweep, tau, spearman=rho[i], p5=p5, p95=p95, note="; ".join(notes),
            kl=tuple(map(float, kl[i].mean(1))), value=tuple(map(float, values.mean(1))),
            **advantage, **fields))
    return records


def correlate_decisions(decisions: Mapping[str, PerSeed],
                        sweeps: Mapping[str, tuple[Mapping[str, Any], PerProblem]],
                        num_bootstrap: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """One record per (decision, sweep, tau): the rank correlation across agents of their
    d_KL^tau and their decision values, with bootstrap percentiles; see the module
    docstring for the definitions.

    Each record has the columns of :data:`COLUMNS` (``advantage`` against the sweep's
    smallest tau, NaN on that tau's own record) and the figure's points:
    ``agent_names`` with each agent's ``kl`` and ``value``.

    Args:
      decisions: ``"bandit"`` and/or ``"active"`` -> agent -> seed -> value
        (:func:`bandit_regrets`, :func:`active_gains`).
      sweeps: sweep name -> (its problems, :func:`kl_values` on them).
      num_bootstrap: bootstrap draws.
      seed: NumPy seed of the bootstrap (the same for every record).

    Raises:
      ValueError: for an unknown decision or a ``num_bootstrap`` below 1.
    """
    unknown = sorted(set(decisions) - set(DECISIONS))
    if unknown:
        raise ValueError(f"unknown decision {unknown[0]!r}; allowed: {', '.join(DECISIONS)}")
    if isinstance(num_bootstrap, bool) or not isinstance(num_bootstrap, int) or num_bootstrap < 1:
        raise ValueError(f"num_bootstrap must be an integer >= 1, got {num_bootstrap!r}")
    records = []
    for decision, per_seed in decisions.items():
        for sweep, (problems, per_problem) in sweeps.items():
            taus = sorted({tau for p in problems.values() for tau in p.taus})
            records += _pair(decision, per_seed, sweep, problems, per_problem, taus,
                             num_bootstrap, seed)
    return records


def describe(priority: str, num_bootstrap: int, seed: int) -> str:
    """The definitions behind a table of :func:`correlate_decisions`, in three lines."""
    return ("values: bandit = total regret per seed; active = mean d_KL^1 over the trainings "
            f"with uniform labelling minus with {priority} (the gain), per seed; d_KL^tau = "
            "the default config's mean over the sweep's problems\n"
            "spearman: rank correlation across agents of (d_KL^tau, value); the claim expects "
            "+ for regret, - for gain; advantage = that sign x (rho at tau - rho at the "
            "smallest tau), > 0 where the joint d_KL predicts better\n"
            f"p5, p95: percentiles of {num_bootstrap} bootstrap draws (seed {seed}) of seeds "
            "and of problems within strata, one draw for every agent")
