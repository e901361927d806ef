"""Figures as PNG files, drawn from what the numeric layers compute and store: the
paper's leaderboard figures, the diagnostics', the probes' and active learning's.

The package sits above every numeric layer (it imports them, none imports it), so
that matplotlib, an optional extra (``analysis``), is needed only to draw; without
it, importing any module of the package is one clear ``ImportError``.
"""

from neural_testbed.figures.canvas import new_figure, save_figure

__all__ = ["new_figure", "save_figure"]
