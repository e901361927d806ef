"""TAL's figure: the prediction model's test log-likelihood against the number of
labels queried, one line per selection method (Wang et al.'s Figure 3), drawn on a
canvas of :mod:`neural_testbed.figures.canvas` like every figure of the package."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from neural_testbed.figures.canvas import line_with_band, new_figure, save_figure

__all__ = ["figure_tal"]

_SIZE = (7, 5)  # inches; 700 x 500 pixels


def figure_tal(records: Sequence[Mapping[str, Any]], path: str | os.PathLike,
               title: str = "") -> pathlib.Path:
    """Writes the figure of :func:`neural_testbed.active.tal.summarise`'s records to
    ``path`` (PNG): per method the mean over problems, shaded +- one standard error."""
    figure = new_figure(_SIZE)
    axes = figure.add_subplot()
    queried = [r["queried"] for r in records]
    methods = [k for k in records[0] if k not in ("round", "queried") and not k.endswith("_se")]
    for method in methods:
        line_with_band(axes, queried, [r[method] for r in records],
                       [r[f"{method}_se"] for r in records], marker="o", markersize=3,
                       label=method)
    axes.set_xlabel("labels queried")
    axes.set_ylabel("test log-likelihood (exact posterior)")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    return save_figure(figure, path)
