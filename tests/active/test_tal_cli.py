"""`neural-testbed tal`: a table per round and method, a figure, one-line refusals
before any work."""

import csv
import io

import pytest

from neural_testbed import cli
from neural_testbed.active import tal


@pytest.fixture
def no_work(monkeypatch):
    def iter_tal(*args, **kwargs):
        raise AssertionError("no TAL may run after a refused setting")
    monkeypatch.setattr(tal, "iter_tal", iter_tal)


@pytest.mark.parametrize("args, fragment", [
    (["--agent", "oracle_gp", "--sweep", "quick"], "tal needs a regression sweep; quick"),
    (["--agent", "knn"], "agent 'knn' is not built for regression problems"),
    (["--agent", "oracle_gp", "--method", "batchmig,bald"],
     "methods (--method) batchmig,bald: expected distinct names among batchmig, tig, mig, random"),
    (["--agent", "oracle_gp", "--problems", "31"], "--problems 31: expected from 1 to 30"),
    (["--agent", "oracle_gp", "--problems", "regression/3"], "unknown: regression/3"),
    (["--agent", "oracle_gp", "--rounds", "0"],
     "num_rounds (--rounds) must be an integer >= 1, got 0"),
    (["--agent", "oracle_gp", "--rounds", "30"], "30 rounds x 7 queries need 210"),
    (["--agent", "mlp", "--set", "num_steps=0"], "num_steps"),
    (["--agent", "oracle_gp", "--seed", "-1"], "agent seed (--seed) must be an integer from 0"),
])
def test_bad_settings_are_one_line_and_status_2_before_any_work(capsys, no_work, args,
                                                               fragment):
    assert cli.main(["tal", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neural-testbed: error: "), err
    assert fragment in err, err


def test_an_unwritable_figure_path_is_refused_before_any_work(tmp_path, capsys, no_work):
    assert cli.main(["tal", "--agent", "oracle_gp", "--out", str(tmp_path / "no" / "t.png")]) == 2
    assert "there is no directory" in capsys.readouterr().err


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_tal_prints_each_round_per_method_and_draws_the_figure(tmp_path, capsys):
    figure = tmp_path / "tal.png"
    status = cli.main(["tal", "--agent", "oracle_gp", "--problems", "regression_wang/0",
                       "--rounds", "2", "--batch", "3", "--method", "batchmig,random",
                       "--format", "csv", "--quiet", "--out", str(figure),
                       "--db", str(tmp_path / "r.db")])
    assert status == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["round"], r["queried"]) for r in rows] == [("0", "0"), ("1", "3"), ("2", "6")]
    assert list(rows[0]) == ["round", "queried", "batchmig", "batchmig_se", "random",
                             "random_se"]
    assert rows[0]["batchmig"] == rows[0]["random"]  # before any query
    assert "batchmig - random: " in err and " after 3, " in err and " after 6 queries" in err
    assert "metacorrelation of oracle_gp at the test inputs before any query: 1.0000" in err
    assert figure.stat().st_size > 0 and f"wrote {figure}" in err
