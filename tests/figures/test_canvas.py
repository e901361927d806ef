"""The canvas: every figure module needs matplotlib, and without it says so in one error."""

from __future__ import annotations

import subprocess
import sys

import pytest

_WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; "


@pytest.mark.parametrize("module", ["canvas", "leaderboard", "diagnostics", "probes", "active"])
def test_without_matplotlib_each_figure_module_is_one_clear_import_error(module):
    code = (_WITHOUT_MATPLOTLIB + "import importlib\ntry:\n"
            f"    importlib.import_module('neural_testbed.figures.{module}')\n"
            "except ImportError as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "neural_testbed.figures needs matplotlib: pip install matplotlib"


def test_the_numeric_layers_import_without_matplotlib():
    code = _WITHOUT_MATPLOTLIB + "import neural_testbed, neural_testbed.cli"
    subprocess.run([sys.executable, "-c", code], check=True)

