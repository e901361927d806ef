"""The decision tasks' figures: the bandit's cumulative regret against the step, and active
learning's d_KL against the labels, each the mean over seeds shaded +- one standard error;
and each decision against each d_KL across agents (`correlate-decisions`). Drawn on a
canvas of :mod:`neural_testbed.figures.canvas` like every figure of the package."""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from neural_testbed.figures.canvas import (
    legend_handles,
    line_with_band,
    loss_label,
    new_figure,
    save_figure,
)
from neural_testbed.figures.leaderboard import agent_colours

__all__ = ["figure_active", "figure_decision_correlation", "figure_regret"]

_SIZE = (7, 5)  # inches; 700 x 500 pixels


def figure_regret(summary: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                  title: str = "") -> pathlib.Path:
    """Writes the figure of :func:`neural_testbed.leaderboard.studies.bandit_summary`'s
    records to ``path`` (PNG, and a PDF beside it)."""
    figure = new_figure(_SIZE)
    axes = figure.add_subplot()
    colours = agent_colours(r["agent"] for r in summary)  # each agent's, as in every figure
    names = [r["agent"] for r in summary]
    for record in summary:
        label = record["agent"] if names.count(record["agent"]) == 1 else (
            f"{record['agent']} {record['config_hash'][:6]}")  # configs of one agent apart
        line_with_band(axes, record["steps"], record["curve"], record["curve_se"],
                       color=colours[record["agent"]],
                       label=f"{label} ({record['seeds']} seeds)")
    axes.set_xlabel("step")
    axes.set_ylabel("cumulative regret")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    return save_figure(figure, path)


def figure_active(summary: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                  title: str = "") -> pathlib.Path:
    """Writes the figure of :func:`neural_testbed.leaderboard.studies.active_summary`'s
    records to ``path`` (PNG, and a PDF beside it): a line per agent config and priority."""
    figure = new_figure(_SIZE)
    axes = figure.add_subplot()
    names = [(r["agent"], r["priority"]) for r in summary]
    for record in sorted(summary, key=lambda r: (r["agent"], r["priority"])):
        name = f"{record['agent']} {record['priority']}"
        if names.count((record["agent"], record["priority"])) > 1:
            name += f" {record['config_hash'][:6]}"  # configs of one agent apart
        line_with_band(axes, record["num_labels"], record["curve"], record["curve_se"],
                       marker="o", markersize=3, label=f"{name} ({record['seeds']} seeds)")
    axes.set_xlabel("labels")
    axes.set_ylabel(r"$d_{KL}^{1}$")
    axes.set_yscale("log")
    axes.set_title(title)
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    return save_figure(figure, path)


_MARKERS = "osD^vP*Xhp<>"  # one per agent, beside its colour, in the correlation figure

_DECISION_LABELS = {"bandit": "bandit: total regret",
                    "active": "active learning: gain over uniform"}


def figure_decision_correlation(records: Sequence[Mapping[str, Any]],
                                path: str | os.PathLike) -> pathlib.Path:
    """Writes the figure of
    :func:`neural_testbed.leaderboard.decision_correlation.correlate_decisions`'s records
    to ``path`` (PNG, and a PDF beside it): a panel per decision (row) and sweep and tau
    (column), a point per agent, and Spearman's rho with its bootstrap interval in the
    title. Agents are told apart by colour and marker in one legend, not by names beside
    the points: the points of agents with like scores sit on each other and their names
    would overlap. No error bars: the agents meet the same seeds and problems, so a
    standard error over them would mostly show how seeds and problems differ, not how
    sure the agents' order is; the interval is that."""
    decisions = list(dict.fromkeys(r["decision"] for r in records))
    columns = list(dict.fromkeys((r["sweep"], r["tau"]) for r in records))
    figure = new_figure((3.2 * len(columns), 3.0 * len(decisions) + 0.6))
    grid = figure.subplots(len(decisions), len(columns), squeeze=False)
    agents = sorted({a for r in records for a in r["agent_names"]})
    colours = agent_colours(agents)
    markers = {a: _MARKERS[i % len(_MARKERS)] for i, a in enumerate(agents)}
    for record in records:
        axes = grid[decisions.index(record["decision"]),
                    columns.index((record["sweep"], record["tau"]))]
        for agent, kl, value in zip(record["agent_names"], record["kl"], record["value"]):
            axes.plot(kl, value, markers[agent], color=colours[agent], markersize=6,
                      alpha=0.85, label=agent)
        rho = ("n/a" if math.isnan(record["spearman"]) else
               f"{record['spearman']:.2f} [{record['p5']:.2f}, {record['p95']:.2f}]")
        axes.set_title(f"{record['sweep']}: $\\rho$ = {rho}", fontsize="small")
        axes.set_xlabel(loss_label(record["tau"]))
        axes.margins(x=0.1, y=0.1)
        axes.grid(alpha=0.3)
    for row, decision in enumerate(decisions):
        grid[row, 0].set_ylabel(_DECISION_LABELS[decision])
    handles = legend_handles(grid.flat)
    figure.legend([handles[a] for a in agents], agents, loc="outside lower center",
                  ncols=min(len(agents), 11), fontsize="small", frameon=False)
    return save_figure(figure, path)
