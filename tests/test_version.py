"""``__version__`` is pyproject.toml's version: from the installed distribution, or from
the source tree's pyproject.toml when run uninstalled; "0+unknown" with neither."""

import pathlib
import shutil
import subprocess
import sys

import pytest

import neural_testbed

tomllib = pytest.importorskip("tomllib")  # Python 3.11+: the fallback reads pyproject with it

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The package imported as if no distribution were installed.
_UNINSTALLED = ("import importlib.metadata as m\n"
                "def missing(name): raise m.PackageNotFoundError(name)\n"
                "m.version = missing\n"
                "import neural_testbed; print(neural_testbed.__version__)")


def _pyproject_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]["version"]


def _uninstalled_version(path: pathlib.Path) -> str:
    return subprocess.run([sys.executable, "-c", _UNINSTALLED], capture_output=True,
                          text=True, check=True, cwd=path,
                          env={"PYTHONPATH": str(path), "JAX_PLATFORMS": "cpu"}).stdout.strip()


def test_the_version_is_pyprojects():
    assert neural_testbed.__version__ == _pyproject_version()


def test_an_uninstalled_source_tree_reads_its_pyproject():
    assert _uninstalled_version(ROOT) == _pyproject_version()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_without_a_distribution_or_a_pyproject_the_version_is_unknown(tmp_path):
    shutil.copytree(ROOT / "neural_testbed", tmp_path / "neural_testbed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert _uninstalled_version(tmp_path) == "0+unknown"


def test_the_command_prints_its_version(capsys):
    from neural_testbed import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"neural-testbed {_pyproject_version()}\n"
