"""The canvas every figure is drawn on: a :class:`matplotlib.figure.Figure` on its own
Agg canvas, not through ``pyplot``, saved as a PNG at one fixed DPI with a PDF beside it
(vector, for a paper), and the labels' mathematics in mathtext (:func:`loss_label`,
:func:`tau_label`).

No figure changes the process-wide backend or pyplot state, so figures work
headless (no display) and leave a user's interactive session alone; with one DPI
and fixed sizes (figsize x dpi) the files are the same size whatever the data.
Importing this module without matplotlib (the ``analysis`` extra) is one clear
error.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError as error:  # matplotlib is only needed for figures
    raise ImportError(
        "neural_testbed.figures needs matplotlib: pip install matplotlib"
    ) from error

from neural_testbed import outputs

__all__ = ["DPI", "PNG_DPI", "legend_handles", "line_with_band", "loss_label", "new_figure",
           "save_figure", "tau_label"]

DPI = 100  # the layout's dots per inch (fonts and lines are in points whatever it is)
PNG_DPI = 200  # the PNG's pixels per inch: sharp on a screen and in slides


def loss_label(tau: int | str, loss: str = "kl") -> str:
    """``d_KL^tau`` (or ``NLL^tau``) in mathtext."""
    name = r"d_{\mathrm{KL}}" if loss == "kl" else r"\mathrm{NLL}"
    return f"${name}^{{{tau}}}$"


def tau_label(tau: int) -> str:
    r"""``$\tau = 10$``."""
    return f"$\\tau = {tau}$"


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure on its own Agg canvas (never pyplot's), laid out to fit."""
    figure = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def legend_handles(axes) -> dict[str, object]:
    """Each label's handle over every panel in ``axes``, for one legend of the figure: a
    label (an agent) may be missing from some panels."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    return handles


def line_with_band(axes, x, mean, stderr, **line) -> None:
    """A mean over seeds or problems against ``x``, shaded +- one standard error in the
    line's colour (an unknown standard error, NaN, as none); ``line``: ``axes.plot``'s
    keywords (label, colour, marker...)."""
    mean = np.asarray(mean, float)
    stderr = np.nan_to_num(np.asarray(stderr, float))
    (drawn,) = axes.plot(x, mean, **line)
    axes.fill_between(x, mean - stderr, mean + stderr, alpha=0.2, color=drawn.get_color(),
                      linewidth=0)


def save_figure(figure: Figure, path: str | os.PathLike) -> pathlib.Path:
    """Writes ``figure`` as a PNG at :data:`PNG_DPI` to ``path`` and as a PDF beside it
    (the same name, ``.pdf``), its folder made if missing, each whole or not at all (see
    :func:`outputs.written_whole`); returns the PNG's path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with outputs.written_whole(path, "wb") as file:
        figure.savefig(file, dpi=PNG_DPI, format="png")
    with outputs.written_whole(path.with_suffix(".pdf"), "wb") as file:
        figure.savefig(file, format="pdf")
    return path
