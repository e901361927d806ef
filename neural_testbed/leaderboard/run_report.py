"""The report of one agent config's run on a sweep: a line per problem and an
aggregate line (what `neural-testbed run` prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neural_testbed.leaderboard import scoring
from neural_testbed.leaderboard.store import StoredRow

__all__ = ["aggregate_line", "number", "problem_table"]


def number(value, spec: str) -> str:
    """``value`` formatted with ``spec``, or n/a where it is undefined (None or NaN),
    as accuracy and ECE are on regression problems."""
    return "n/a" if value is None or value != value else format(value, spec)


def _problem_line(pid: str, by_tau: Mapping[int, StoredRow], taus: Sequence[int]) -> list[str]:
    """A problem's cells: its setting, each tau's value (failed, or !k where k infinite
    terms were clipped), then accuracy, ECE and seconds where every tau is ok."""
    first = next(iter(by_tau.values()))
    setting = first.noise_variance if first.target == "regression" else first.temperature
    line = [pid, f"{setting:g}", str(first.num_train), str(first.seed)]
    for tau in taus:
        r = by_tau.get(tau)
        ok = r is not None and r.status == "ok"
        cell = "{:.4f} ± {:.4f}".format(*r.estimate(r.metric)) if ok else "failed"
        if ok and r.num_clipped:
            cell += f" !{r.num_clipped}"  # infinite terms clipped
        line.append(cell)
    marginal = by_tau.get(taus[0])
    if marginal is not None and all(r.status == "ok" for r in by_tau.values()):
        secs = marginal.train_seconds + sum(r.eval_seconds for r in by_tau.values())
        line += [number(marginal.accuracy, ".3f"), number(marginal.ece, ".3f"), f"{secs:.2f}"]
    return line


def problem_table(rows: Sequence[StoredRow], taus: Sequence[int]) -> str:
    """One line per problem; each column as wide as its widest value (T = 10^6 is 7
    digits) plus a space, and at least as wide as it is for the paper's problems."""
    by_problem: dict[str, dict[int, StoredRow]] = {}
    for row in rows:
        by_problem.setdefault(row.problem_id, {})[row.tau] = row
    metric = rows[0].metric if rows else "kl"
    regression = bool(rows) and rows[0].target == "regression"
    table = [["problem_id", "noise" if regression else "temp", "T", "seed",
              *(f"{metric}(tau={tau}) ± se" for tau in taus), "acc", "ece", "secs"]]
    table += [_problem_line(pid, by_tau, taus) for pid, by_tau in by_problem.items()]
    least = [24, 6, 6, 5, *([24] * len(taus)), 7, 7, 7]
    widths = [max(least[i], 1 + max(len(line[i]) for line in table if i < len(line)))
              for i in range(len(least))]
    return "\n".join(
        "".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(line)).rstrip()
        for line in table)


def _counts(rows: Sequence[StoredRow], problems: Sequence[Any], scored: int) -> str:
    """How many problems the aggregate covers, failed, and left to other shards (a
    problem of the sweep with no rows at all)."""
    num_failed = len({row.problem_id for row in rows if row.status != "ok"})
    num_missing = len(problems) - scored - num_failed
    counts = (f"{scored} of {len(problems)} problems" if num_missing
              else f"{len(problems)} problems")
    if num_failed:
        counts += f", {num_failed} FAILED"
    if num_missing:
        counts += f", {num_missing} not computed here (other shards)"
    return counts


def aggregate_line(rows: Sequence[StoredRow], problems: Sequence[Any]) -> str:
    """The run's stratified means with standard errors at each tau, d_KL^agg, accuracy
    and ECE, the problems counted, and a warning where infinite terms were clipped."""
    records, _ = scoring.score_agents(rows, {p.problem_id: p for p in problems}, baseline="")
    if not records:
        return "aggregate: no successful problems"
    r = records[0]
    taus = sorted({t for p in problems for t in p.taus})
    metric = r["metric"]
    name = "d_KL" if metric == "kl" else "NLL"
    parts = [f"{name}^{tau} = {r[f'{metric}_{tau}']:.4f} ± {r[f'{metric}_{tau}_stderr']:.4f}"
             for tau in taus]
    parts.append(f"{name}^agg = {r[f'{metric}_agg']:.4f}")
    parts.append(f"accuracy = {number(r['accuracy'], '.3f')}, "
                 f"ECE = {number(r['ece'], '.3f')}")
    parts.append(_counts(rows, problems, r["problems"]))
    line = "aggregate (stratified ± se): " + ", ".join(parts)
    clipped = [row for row in rows if row.status == "ok" and row.num_clipped]
    if clipped:
        line += (f"\nCLIPPED: {len(clipped)} rows (marked !k) had k test samples whose labels "
                 "the agent gave probability 0; those infinite terms were clipped to the largest "
                 "finite one, as the reference does, which flatters an overconfident agent")
    return line
