"""The canvas every figure is drawn on: a :class:`matplotlib.figure.Figure` on its own
Agg canvas, not through ``pyplot``, saved as a PNG at one fixed DPI.

No figure changes the process-wide backend or pyplot state, so figures work
headless (no display) and leave a user's interactive session alone; with one DPI
and fixed sizes (figsize x dpi) the files are the same size whatever the data.
Importing this module without matplotlib (the ``analysis`` extra) is one clear
error.
"""

from __future__ import annotations

import os
import pathlib

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError as error:  # matplotlib is only needed for figures
    raise ImportError(
        "neural_testbed.figures needs matplotlib: pip install matplotlib"
    ) from error

from neural_testbed import outputs

__all__ = ["DPI", "new_figure", "save_figure"]

DPI = 100


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure on its own Agg canvas (never pyplot's), laid out to fit."""
    figure = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: str | os.PathLike) -> pathlib.Path:
    """Writes ``figure`` as a PNG at the fixed DPI (its folder made if missing), whole or
    not at all (see :func:`outputs.written_whole`)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with outputs.written_whole(path, "wb") as file:
        figure.savefig(file, dpi=DPI, format="png")
    return path
