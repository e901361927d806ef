"""The decision tasks' figures: the bandit's cumulative regret against the step, and active
learning's d_KL against the labels, each the mean over seeds shaded +- one standard error,
drawn on a canvas of :mod:`neural_testbed.figures.canvas` like every figure of the package."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from neural_testbed.figures.canvas import new_figure, save_figure
from neural_testbed.figures.leaderboard import agent_colours

__all__ = ["figure_active", "figure_regret"]

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
        steps = np.asarray(record["steps"])
        mean = np.asarray(record["curve"], float)
        stderr = np.nan_to_num(np.asarray(record["curve_se"], float))
        colour = colours[record["agent"]]
        axes.plot(steps, mean, color=colour, label=f"{label} ({record['seeds']} seeds)")
        axes.fill_between(steps, mean - stderr, mean + stderr, alpha=0.2, color=colour,
                          linewidth=0)
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
        labels = np.asarray(record["num_labels"])
        mean = np.asarray(record["curve"], float)
        stderr = np.nan_to_num(np.asarray(record["curve_se"], float))
        name = f"{record['agent']} {record['priority']}"
        if names.count((record["agent"], record["priority"])) > 1:
            name += f" {record['config_hash'][:6]}"  # configs of one agent apart
        (line,) = axes.plot(labels, mean, marker="o", markersize=3,
                            label=f"{name} ({record['seeds']} seeds)")
        axes.fill_between(labels, mean - stderr, mean + stderr, alpha=0.2,
                          color=line.get_color(), linewidth=0)
    axes.set_xlabel("labels")
    axes.set_ylabel(r"$d_{KL}^{1}$")
    axes.set_yscale("log")
    axes.set_title(title)
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    return save_figure(figure, path)
