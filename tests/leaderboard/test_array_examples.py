"""The examples of scoring from arrays (examples/*_arrays.py), run as a user runs them on
the first problems of the quick subset: no callback into JAX, rows in the store."""

import importlib.util
import math
import pathlib

import pytest

from neural_testbed import leaderboard

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stored(db):
    with leaderboard.ResultsStore(db, create=False) as store:
        return store.rows()


@pytest.mark.slow  # fits and scores two problems (d = 2, then d = 10 would follow)
def test_the_scikit_learn_forest_is_scored_from_arrays(tmp_path):
    pytest.importorskip("sklearn")
    db = str(tmp_path / "results.db")
    _example("sklearn_forest_arrays").main(["--problems", "2", "--db", db])
    rows = _stored(db)
    assert {(r.problem_id, r.tau) for r in rows} == {
        (pid, tau) for pid in ("classification/5", "classification/6") for tau in (1, 10)}
    assert all(r.agent == "sklearn_forest" and r.status == "ok" and math.isfinite(r.kl)
               and r.kl > -4 * r.kl_stderr for r in rows)


@pytest.mark.slow
def test_the_pytorch_ensemble_is_scored_from_arrays(tmp_path):
    pytest.importorskip("torch", reason="the PyTorch example needs torch")
    db = str(tmp_path / "results.db")
    _example("torch_ensemble_arrays").main(["--problems", "1", "--db", db])
    rows = _stored(db)
    assert sorted(r.tau for r in rows) == [1, 10]
    assert all(r.agent == "torch_ensemble" and r.status == "ok" and math.isfinite(r.kl)
               for r in rows)
