"""Figures of the diagnostics: reliability diagram, UPDS, rejection curves, and the
d_KL^tau / tau curve.

Drawn from stored rows (their ``diagnostics`` JSON, see
:mod:`neural_testbed.diagnostics.report`) on canvases of
:mod:`neural_testbed.figures.canvas`, like the paper's figures in
:mod:`neural_testbed.figures.leaderboard`.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from neural_testbed import base
from neural_testbed.diagnostics import report
from neural_testbed.figures.canvas import new_figure, save_figure
from neural_testbed.likelihood import kl

__all__ = ["figure_kl_per_tau", "figure_rejection", "figure_reliability", "figure_upds",
           "record_of", "save_diagnostic_figures", "tau_curves"]

_CONDITION_STYLE = {"in": ("in distribution", "C0", "-"), "out": ("out of distribution", "C3", "-"),
                    "correct": ("right", "C2", "--"), "wrong": ("wrong", "C1", "--")}


def _centres(num_bins: int) -> np.ndarray:
    return (np.arange(num_bins) + 0.5) / num_bins


def _array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def figure_reliability(record: Mapping[str, Any], path, title: str = "") -> pathlib.Path:
    """Accuracy against confidence per bin (the diagonal is calibrated), with counts."""
    rel = record["reliability"]
    count, correct, confidence = (_array(rel[k]) for k in ("count", "correct", "confidence"))
    shown = count > 0
    figure = new_figure((5, 5))
    ax = figure.subplots()
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="calibrated")
    ax.bar(_centres(len(count))[shown], (correct / np.maximum(count, 1))[shown],
           width=1 / len(count), alpha=0.6, edgecolor="C0", label="accuracy")
    ax.plot((confidence / np.maximum(count, 1))[shown], (correct / np.maximum(count, 1))[shown],
            "o", color="C0", label="(mean confidence, accuracy)")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (top class probability)",
           ylabel="accuracy", title=title or "reliability diagram")
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(figure, path)


def figure_upds(record: Mapping[str, Any], path, title: str = "") -> pathlib.Path:
    """Mean aleatoric, epistemic and total uncertainty per rescaled-confidence bin,
    in and out of distribution and for right and wrong predictions (Li & Zhu 3.3.1)."""
    figure = new_figure((13, 4))
    axes = figure.subplots(1, len(report.UNCERTAINTIES))
    centres = _centres(record["bins"])
    for ax, kind in zip(axes, report.UNCERTAINTIES):
        for condition in report.CONDITIONS:
            counts = _array(record["upds_counts"][condition])
            sums = _array(record["upds_sums"][condition][kind])
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            label, colour, style = _CONDITION_STYLE[condition]
            ax.plot(centres, means, marker="o", markersize=3, color=colour, linestyle=style,
                    label=label)
        aud = record.get(f"aud_ood_{kind}")
        ax.set(xlabel="confidence, rescaled to [0, 1]", ylabel=f"mean {kind} uncertainty",
               title=f"{kind}" + (f" (AUD in/out {aud:.3g})" if aud is not None else ""))
    axes[0].legend(fontsize=8)
    if title:
        figure.suptitle(title)
    return save_figure(figure, path)


def figure_rejection(record: Mapping[str, Any], path, title: str = "") -> pathlib.Path:
    """Empirical CDFs of the rescaled confidence in and out of distribution (Li & Zhu
    3.1): the area between them is the rejection ability."""
    figure = new_figure((5, 5))
    ax = figure.subplots()
    edges = np.linspace(0, 1, record["bins"] + 1)
    for condition in ("in", "out"):
        counts = _array(record["confidence_counts"][condition])
        if counts.sum() == 0:
            continue
        cdf = np.concatenate([[0.0], np.cumsum(counts) / counts.sum()])
        label, colour, _ = _CONDITION_STYLE[condition]
        ax.step(edges, cdf, where="post", color=colour, label=label)
    ability = record.get("rejection_ability")
    summary = "rejection ability " + (f"{ability:.3f}" if ability is not None else "n/a")
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="confidence, rescaled to [0, 1]",
           ylabel="fraction of inputs at or below",
           title=f"{title}\n{summary}" if title else summary)
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(figure, path)


def save_diagnostic_figures(record: Mapping[str, Any], out_dir, prefix: str = "",
                            title: str = "") -> list[pathlib.Path]:
    """Writes reliability.png, upds.png and rejection.png (each name after ``prefix``)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [figure_reliability(record, out_dir / f"{prefix}reliability.png", title),
            figure_upds(record, out_dir / f"{prefix}upds.png", title),
            figure_rejection(record, out_dir / f"{prefix}rejection.png", title)]


def tau_curves(rows: Iterable[base.ProblemResult],
               problems: Mapping[str, Any]) -> dict[str, dict[tuple[int, str], tuple]]:
    """Per agent (and config, where an agent has several), ``(tau, estimator) -> (mean of
    d_KL^tau / tau over problems, its standard error, number of problems)`` for agent
    configs stored at three or more taus (the NLL where the problems' metric is NLL)."""
    by_key: dict[tuple[str, str], dict[tuple[int, str], dict[str, tuple[float, float]]]] = {}
    for r in rows:
        if r.problem_id not in problems or r.status != "ok":
            continue
        curve = by_key.setdefault((r.agent, r.config_hash), {})
        curve.setdefault((r.tau, r.estimator), {})[r.problem_id] = r.estimate(
            problems[r.problem_id].metric)
    by_key = {k: c for k, c in by_key.items() if len({tau for tau, _ in c}) >= 3}
    configs_of = collections.Counter(agent for agent, _ in by_key)
    curves = {}
    for (agent, config_hash), curve in sorted(by_key.items()):
        name = agent if configs_of[agent] == 1 else f"{agent} [{config_hash[:6]}]"
        curves[name] = {}
        for (tau, estimator), per_problem in sorted(curve.items()):
            kls = np.array([v[0] for v in per_problem.values()]) / tau
            ses = np.array([v[1] for v in per_problem.values()]) / tau
            n = len(kls)
            # The problems' estimates are independent: the mean's SE from theirs.
            curves[name][tau, estimator] = (float(kls.mean()),
                                            float(math.sqrt(np.sum(ses**2)) / n), n)
    return curves


def figure_kl_per_tau(rows: Iterable[base.ProblemResult], problems: Mapping[str, Any],
                      path) -> pathlib.Path:
    """d_KL^tau / tau against tau per agent (mean over problems, +- SE). Flat for an
    agent whose joint prediction is the product of its marginals; below flat where
    the agent's belief samples carry correlations across inputs. Hollow markers: the
    Monte Carlo estimate at the first tau where ``auto`` switches to Algorithm 4."""
    curves = tau_curves(rows, problems)
    if not curves:
        raise ValueError("no agent config has rows at three or more taus; run with "
                         "--taus 1,2,5,10,20,50,100 first")
    figure = new_figure((7, 5))
    ax = figure.subplots()
    for i, (name, curve) in enumerate(curves.items()):
        colour = f"C{i % 10}"
        main = sorted((tau, v) for (tau, est), v in curve.items() if est != "monte_carlo"
                      or all(e == "monte_carlo" for _, e in curve))
        taus = [t for t, _ in main]
        means = np.array([v[0] for _, v in main])
        ses = np.array([v[1] for _, v in main])
        ax.errorbar(taus, means, yerr=ses, marker="o", color=colour, capsize=2, label=name)
        extra = [(tau, v) for (tau, est), v in curve.items()
                 if est == "monte_carlo" and any(e != "monte_carlo" for _, e in curve)]
        for tau, v in extra:
            ax.errorbar([tau], [v[0]], yerr=[v[1]], marker="o", markerfacecolor="none",
                        color=colour, capsize=2, linestyle="none")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    switch = min(t for t in range(1, 1000) if kl.choose_estimator(t) == "partition")
    ax.set(xlabel="tau (inputs per joint prediction)", ylabel="d_KL^tau / tau (nats per input)",
           title=f"Monte Carlo below tau = {switch}, random partitioning from {switch} on "
                 "(hollow: Monte Carlo there)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    return save_figure(figure, path)


def record_of(row: base.ProblemResult) -> dict[str, Any] | None:
    """A stored row's diagnostics dict, or None (rows written before schema 3)."""
    return json.loads(row.diagnostics) if row.diagnostics else None
