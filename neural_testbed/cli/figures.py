"""The modules that draw figures, loaded only by the commands that draw.

They need matplotlib, an optional dependency; every command reaches them
through :func:`load`, so where they live is named here alone.
"""

from __future__ import annotations

import importlib

# What a command draws -> the module that draws it.
MODULES = {
    "leaderboard": "neural_testbed.figures.leaderboard",
    "diagnostics": "neural_testbed.figures.diagnostics",
    "probes": "neural_testbed.figures.probes",
    "tal": "neural_testbed.figures.active",
    "bandit": "neural_testbed.figures.decisions",
    "active": "neural_testbed.figures.decisions",
    "correlate-decisions": "neural_testbed.figures.decisions",
}


def load(kind: str):
    """The module that draws ``kind``'s figures (:data:`MODULES`), or one clear error
    where matplotlib is missing."""
    try:
        return importlib.import_module(MODULES[kind])
    except ImportError as error:
        raise ValueError(f"figures need matplotlib ({error}); install it with "
                         "pip install 'neural-testbed[analysis]'") from None
