"""The canvas: every figure module needs matplotlib, and without it says so in one error."""

from __future__ import annotations

import subprocess
import sys

MODULES = ("canvas", "leaderboard", "diagnostics", "probes", "active")

# One interpreter without matplotlib (importing JAX costs seconds, so not one per module):
# the numeric layers and the command import; each figure module, asked for in turn, is
# one ImportError whose message is printed on a line of its own.
_WITHOUT_MATPLOTLIB = f"""
import importlib, sys
sys.modules["matplotlib"] = None
import neural_testbed, neural_testbed.cli
for module in {MODULES!r}:
    try:
        importlib.import_module("neural_testbed.figures." + module)
        print(module, "imported")
    except ImportError as error:
        print(module, error)
"""


def test_without_matplotlib_the_numeric_layers_import_and_each_figure_module_says_why_not():
    out = subprocess.run([sys.executable, "-c", _WITHOUT_MATPLOTLIB], capture_output=True,
                         text=True, check=True).stdout
    assert out.splitlines() == [
        f"{module} neural_testbed.figures needs matplotlib: pip install matplotlib"
        for module in MODULES]
