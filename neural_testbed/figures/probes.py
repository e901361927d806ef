"""Figures of Grover et al.'s probes for one agent over regression problems.

Drawn from :func:`neural_testbed.leaderboard.probing.probe_problems`'s
results and :func:`~neural_testbed.leaderboard.probing.summarise`'s records,
on canvases of :mod:`neural_testbed.figures.canvas`, like every figure of the package.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from neural_testbed.figures.canvas import new_figure, save_figure

__all__ = ["figure_inclusion", "figure_mse", "figure_self_certainty",
           "figure_uncertainty_reduction", "figure_variance_by_distance", "save_probe_figures"]

Stratum = tuple[int, float, int]  # d, noise variance, T


def _series(records: Sequence[Mapping[str, Any]], probe: str
            ) -> dict[Stratum, tuple[list[str], np.ndarray, np.ndarray]]:
    """Per stratum, a probe's parameter labels, means and standard errors."""
    series: dict[Stratum, tuple[list[str], list[float], list[float]]] = {}
    for r in records:
        if r["probe"] == probe:
            labels, means, ses = series.setdefault((r["d"], r["noise"], r["T"]), ([], [], []))
            labels.append(r["at"])
            means.append(r["mean"])
            ses.append(0.0 if math.isnan(r["se"]) else r["se"])
    return {k: (labels, np.array(m), np.array(s)) for k, (labels, m, s) in series.items()}


def _label(stratum: Stratum) -> str:
    d, noise, num_train = stratum
    return f"d = {d}, noise {noise:g}, T = {num_train}"


def _number(label: str) -> float:
    """``"k=2"`` -> 2.0."""
    return float(label.split("=")[1])


def figure_variance_by_distance(results: Sequence[tuple[Any, Any]],
                                records: Sequence[Mapping[str, Any]], path,
                                title: str = "") -> pathlib.Path:
    """Per stratum, each pool input's predictive variance s^2 against its distance to the
    nearest training input (all of the stratum's problems), the noise variance (the
    floor of s^2), and on the right axis uncertainty-increase per bin at its delta."""
    points: dict[Stratum, list[tuple[np.ndarray, np.ndarray]]] = {}
    for problem, result in results:
        key = (problem.input_dim, problem.noise_variance, problem.num_train)
        points.setdefault(key, []).append((result.distance, result.variance))
    deltas, increases = _series(records, "delta"), _series(records, "uncertainty_increase")
    strata = sorted(points)
    columns = min(3, len(strata))
    rows = math.ceil(len(strata) / columns)
    figure = new_figure((4.5 * columns, 3.5 * rows))
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False).ravel())
    for ax, stratum in zip(axes, strata):
        distance = np.concatenate([p[0] for p in points[stratum]])
        variance = np.concatenate([p[1] for p in points[stratum]])
        ax.scatter(distance, variance, s=3, alpha=0.3, color="C0", label="pool inputs")
        ax.axhline(stratum[1], color="grey", linestyle=":", label="noise variance")
        ax.set_yscale("log")
        ax.set(xlabel="distance to the nearest training input", ylabel="predictive variance s^2",
               title=_label(stratum))
        ax.title.set_fontsize(9)
        if stratum in deltas:
            twin = ax.twinx()
            _, delta, _ = deltas[stratum]
            _, ui, se = increases[stratum]
            twin.errorbar(delta, ui, yerr=se, color="C3", marker="o", capsize=2,
                          label="uncertainty-increase")
            twin.set_ylim(-0.02, 1.02)
            twin.set_ylabel("uncertainty-increase (per bin)", color="C3")
    for ax in axes[len(strata):]:
        ax.set_visible(False)
    axes[0].legend(loc="lower right", fontsize=7)
    if title:
        figure.suptitle(title)
    return save_figure(figure, path)


def _against_t(records, probe, ylabel, path, title) -> pathlib.Path:
    """A probe of one value per problem against T, a line per (d, noise)."""
    lines: dict[tuple[int, float], list[tuple[int, float, float]]] = {}
    for (d, noise, num_train), (_, mean, se) in sorted(_series(records, probe).items()):
        lines.setdefault((d, noise), []).append((num_train, mean[0], se[0]))
    figure = new_figure((6, 4.5))
    ax = figure.subplots()
    positive = True
    for (d, noise), line in lines.items():
        num_train, mean, se = (np.array(v) for v in zip(*line))
        positive = positive and bool(np.all(mean > 0))
        ax.errorbar(num_train, mean, yerr=se, marker="o", capsize=2,
                    label=f"d = {d}, noise {noise:g}")
    ax.set_xscale("log")
    if positive:  # a 0 (a single model's self-certainty) needs a linear axis
        ax.set_yscale("log")
    ax.set(xlabel="T (training pairs)", ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    return save_figure(figure, path)


def figure_self_certainty(records: Sequence[Mapping[str, Any]], path,
                          title: str = "") -> pathlib.Path:
    """Self-certainty (mean over training inputs) against T, a line per (d, noise)."""
    return _against_t(records, "self_certainty", "self-certainty: mean (s - sigma)^2", path,
                      title or "self-certainty")


def figure_mse(records: Sequence[Mapping[str, Any]], path, title: str = "") -> pathlib.Path:
    """The MSE of the predictive mean (mean over the pool of (f - m)^2) against T, a line
    per (d, noise)."""
    return _against_t(records, "mse", "MSE: mean (f - mean)^2 over the pool", path,
                      title or "MSE of the predictive mean")


def _per_stratum(records, probe, dashed_probe, ylabel, path, title) -> pathlib.Path:
    figure = new_figure((6, 4.5))
    ax = figure.subplots()
    dashed = _series(records, dashed_probe)
    for i, (stratum, (labels, mean, se)) in enumerate(sorted(_series(records, probe).items())):
        colour = f"C{i % 10}"
        at = [_number(label) for label in labels]
        ax.errorbar(at, mean, yerr=se, marker="o", capsize=2, color=colour,
                    label=_label(stratum))
        if stratum in dashed:
            ax.plot(at, dashed[stratum][1], linestyle="--", color=colour)
    ax.set(xlabel="k", ylabel=ylabel, title=title)
    ax.legend(fontsize=7)
    return save_figure(figure, path)


def figure_inclusion(records: Sequence[Mapping[str, Any]], path,
                     title: str = "") -> pathlib.Path:
    """Inclusion@k against k per stratum; dashed: what the agent's own belief expects."""
    return _per_stratum(records, "inclusion", "inclusion_expected",
                        "inclusion@k (dashed: expected by the agent)", path,
                        title or "inclusion@k")


def figure_uncertainty_reduction(records: Sequence[Mapping[str, Any]], path,
                                 title: str = "") -> pathlib.Path:
    """Uncertainty-reduction@k against k per stratum; dashed: the signed mean."""
    return _per_stratum(records, "uncertainty_reduction", "uncertainty_reduction_signed",
                        "mean |s(D + k) - s(D)| (dashed: mean s(D) - s(D + k))", path,
                        title or "uncertainty-reduction@k")


def save_probe_figures(results: Sequence[tuple[Any, Any]], records: Sequence[Mapping[str, Any]],
                       out_dir, agent: str = "") -> list[pathlib.Path]:
    """Writes variance_by_distance.png, self_certainty.png, mse.png, inclusion.png and
    uncertainty_reduction.png into ``out_dir`` (made if missing)."""
    out_dir = pathlib.Path(out_dir)
    prefix = f"{agent}: " if agent else ""
    return [
        figure_variance_by_distance(results, records, out_dir / "variance_by_distance.png",
                                    f"{prefix}predictive variance by distance"),
        figure_self_certainty(records, out_dir / "self_certainty.png", f"{prefix}self-certainty"),
        figure_mse(records, out_dir / "mse.png", f"{prefix}MSE of the predictive mean"),
        figure_inclusion(records, out_dir / "inclusion.png", f"{prefix}inclusion@k"),
        figure_uncertainty_reduction(records, out_dir / "uncertainty_reduction.png",
                                     f"{prefix}uncertainty-reduction@k"),
    ]
