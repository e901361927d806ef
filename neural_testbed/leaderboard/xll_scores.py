"""XLL and XLLR across agents from their stored predictives: ``neural-testbed xll``.

For every problem of a regression sweep on which each named agent has a
stored predictive at the probes (the row of the problem's smallest tau, see
:mod:`leaderboard.predictives`), Wang et al.'s Algorithm 2 runs over those
agents (:func:`diagnostics.xll_and_xllr`): each serves once as the reference,
whose means, variances and top-correlated batches of b test points normalise
every agent's correlations; an agent's XLL and XLLR (0-based rank, 0 = best)
are means over the references. The targets are the problem's own noisy targets
at the probes, rebuilt from its definition: no agent is retrained.

Each agent is represented by its globally tuned config, the leaderboard's
default choice (lowest d_KL^agg). Per agent, the table gives the means over
the problems covered by every agent, with standard errors stratified by the
problems' strata ((d, noise variance), T; on real data (dataset, T)), as every
leaderboard number. On real data (``real-regression``, a user's file) the probes
are a split's test rows and the targets their observed values. XLL
values of problems with different d or T are on different scales, which is why
the paper averages ranks (XLLR) across datasets; the mean XLL is shown beside.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from neural_testbed import base
from neural_testbed.diagnostics import xll
from neural_testbed.leaderboard import predictives, scoring
from neural_testbed.leaderboard import store as store_lib

__all__ = ["COLUMNS", "check_options", "describe", "xll_scores"]

COLUMNS = ("agent", "xll", "xll_stderr", "xllr", "xllr_stderr", "problems", "of",
           "config_hash")


def describe(num_agents: int, batch_size: int) -> str:
    """What a table of :func:`xll_scores` holds, in one line."""
    return (f"XLL, XLLR (Wang et al., Algorithm 2): batches of b = {batch_size} top-correlated "
            f"probes; each of the {num_agents} agents serves once as the reference; XLLR is "
            f"the rank under a reference (0 = best of {num_agents}); means over the "
            "references, then over the problems (± stratified standard errors); XLL of "
            "different problems is on different scales: compare agents by XLLR")


def check_options(problems: Mapping[str, Any], agents: Sequence[str], batch_size: int) -> None:
    """Refuses, before any work, settings :func:`xll_scores` cannot use (one clear line)."""
    if len(set(agents)) < 2:
        raise ValueError(f"xll compares at least 2 agents (--agent A --agent B), got "
                         f"{len(set(agents))}: {', '.join(map(repr, dict.fromkeys(agents)))}")
    if len(set(agents)) < len(agents):
        raise ValueError(f"an agent is named twice: {', '.join(agents)}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 2:
        raise ValueError(f"batch size (--batch-size) must be an integer >= 2, "
                         f"got {batch_size!r}")
    other = sorted({p.target for p in problems.values()} - {"regression"})
    if not problems or other:
        raise ValueError("xll needs a regression sweep (regression, regression-quick, "
                         "regression-wang, real-regression) or --dataset FILE --target-column "
                         f"NAME; this one has {', '.join(other) or 'no'} problems")


def xll_scores(store: store_lib.ResultsStore, problems: Mapping[str, Any],
               agents: Sequence[str], batch_size: int = xll.BATCH_SIZE,
               progress: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per agent (see :data:`COLUMNS`), best XLLR first, and notes.

    Args:
      store: the results store (read-only is enough).
      problems: a regression sweep, problem id -> problem.
      agents: two or more agents with rows on the sweep.
      batch_size: b, test points per batch (the paper's 5).
      progress: show a progress bar over the problems on stderr.

    Raises:
      ValueError: fewer than 2 agents, a sweep that is not regression, an agent
        without rows on the sweep or without stored predictives, or no problem
        that every agent has a predictive for.
    """
    check_options(problems, agents, batch_size)
    chosen = scoring.tuned_candidates(store.rows(), problems)
    stored = {}
    for agent in agents:
        if agent not in chosen:
            raise ValueError(f"agent {agent!r} has no complete results on this sweep; agents "
                             f"with results: {', '.join(chosen) or 'none'}")
        by_key = store.predictives(*chosen[agent])
        stored[agent] = {pid: by_key[key] for pid, p in problems.items()
                         if (key := (pid, base.definition_hash(p), min(p.taus), p.num_test,
                                     p.num_samples)) in by_key}
        if not stored[agent]:
            raise ValueError(
                f"agent {agent!r}: its tuned config ({chosen[agent][1]}) has no stored "
                "predictive means and covariances on this sweep (rows written before they "
                f"were kept); recompute them: neural-testbed run --agent {agent} --recompute "
                "with the same --sweep and --db")
    common = [pid for pid in problems if all(pid in stored[a] for a in agents)]
    if not common:
        raise ValueError("no problem of this sweep has stored predictives for every agent "
                         f"named ({', '.join(agents)})")
    values: dict[str, list] = {agent: [] for agent in agents}
    for pid in tqdm(common, desc="xll", unit="problem", file=sys.stderr,
                    disable=not progress, dynamic_ncols=True):
        problem = problems[pid]
        instance = problem.instance()
        targets = problem.sample_test(jax.random.key(0), instance.env, 1).probe_y
        moments = [predictives.decode(stored[agent][pid]) for agent in agents]
        if not batch_size <= targets.shape[0]:
            raise ValueError(f"batch size (--batch-size) {batch_size} exceeds the "
                             f"{targets.shape[0]} probes of {pid}")
        if any(m.mean.shape != targets.shape for m in moments):
            raise ValueError(f"{pid}: a stored predictive does not match the problem's "
                             f"{targets.shape[0]} probes (rows of another problem definition)")
        scores, ranks = xll.xll_and_xllr(targets, np.stack([m.mean for m in moments]),
                                         np.stack([m.covariance for m in moments]),
                                         batch_size=batch_size)
        for agent, score, rank in zip(agents, np.asarray(scores), np.asarray(ranks)):
            values[agent].append((problem.stratum, float(score), float(rank)))
    records = []
    for agent in agents:
        xll_mean, xll_se, _ = scoring.stratified((s, v) for s, v, _ in values[agent])
        rank_mean, rank_se, _ = scoring.stratified((s, r) for s, _, r in values[agent])
        records.append({"agent": agent, "xll": xll_mean, "xll_stderr": xll_se,
                        "xllr": rank_mean, "xllr_stderr": rank_se, "problems": len(common),
                        "of": len(problems), "config_hash": chosen[agent][1]})
    records.sort(key=lambda r: (r["xllr"], -r["xll"], r["agent"]))
    notes = []
    if len(common) < len(problems):
        notes.append(f"{len(problems) - len(common)} of the sweep's {len(problems)} problems "
                     "lack a stored predictive for some agent and are left out")
    if any(np.isnan(r["xll_stderr"]) for r in records):
        notes.append("standard errors are n/a: some stratum has a single problem")
    return records, notes
