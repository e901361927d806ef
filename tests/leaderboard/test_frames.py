"""The DataFrame views of the store."""

import pytest

from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import baselines, configs
from neural_testbed.run import rows as run_rows

pd = pytest.importorskip("pandas")


def test_frames_match_the_scoring_functions(tmp_path):
    problems = leaderboard.get_sweep("smoke")
    path = str(tmp_path / "r.db")
    with leaderboard.ResultsStore(path) as store:
        for name, kl in (("mlp", 0.4), ("other", 0.2)):
            config = agents.MLPConfig()
            rows = [run_rows.result_row(
                name, configs.config_hash(name, config), configs.config_json(config), p, tau,
                "auto", 0, estimate=kl * tau + 0.01 * p.seed, estimate_stderr=0.01, num_clipped=0,
                accuracy=0.9, ece=0.05, train_seconds=1.0, compile_seconds=0.0,
                eval_seconds=0.5) for p in problems.values() for tau in p.taus]
            store.write(rows)
    results = leaderboard.results_frame(path)
    assert len(results) == 16 and set(results["agent"]) == {"mlp", "other"}
    board = leaderboard.leaderboard_frame(path, sweep="smoke")
    assert list(board["agent"]) == ["other", "mlp"]
    assert board.set_index("agent").loc["other", "kl_1_norm"] == pytest.approx(0.205 / 0.405)
    held = leaderboard.leaderboard_frame(path, sweep="smoke", selection="held-out")
    assert set(held["selection"]) == {"held-out"} and list(held["of"]) == [2, 2]
    diffs = leaderboard.compare_frame("other", ["mlp"], db=path, sweep="smoke")
    assert list(diffs["scope"]) == ["pooled"] * 2 + ["setting"] * 4
    assert (diffs["kl_diff"] < 0).all()
    held = leaderboard.compare_frame("other", ["mlp"], db=path, sweep="smoke",
                                     selection="held-out")
    assert list(held["pairs"]) == [2, 2, 1, 1, 1, 1]


def test_the_results_frame_can_hold_the_published_rows_marked_as_such(tmp_path, smoke_rows):
    """As `--with-baselines` does: without a store, the published rows alone; with one,
    its rows first and then every published row, each marked by ``source``."""
    published = baselines.load().rows
    alone = leaderboard.results_frame(str(tmp_path / "none.db"), with_baselines=True)
    assert len(alone) == len(published) and set(alone["source"]) == {"published"}
    assert not (tmp_path / "none.db").exists()  # nothing is created
    path = str(tmp_path / "r.db")
    with leaderboard.ResultsStore(path) as store:
        store.write(smoke_rows("mine", agents.MLPConfig(), 0.2))
    both = leaderboard.results_frame(path, with_baselines=True)
    assert list(both["source"][:8]) == ["local"] * 8 and (both["agent"][:8] == "mine").all()
    assert len(both) == 8 + len(published)
    mlp = both[(both.source == "published") & (both.agent == "mlp")
               & (both.problem_id == "classification_2d/90") & (both.tau == 1)]
    [row] = [r for r in published if (r.agent, r.problem_id, r.tau) == (
        "mlp", "classification_2d/90", 1) and r.config_hash == mlp.config_hash.iloc[0]]
    assert mlp.kl.iloc[0] == row.kl  # the published number, unchanged
    assert set(leaderboard.results_frame(path)["source"]) == {"local"}


def test_export_writes_parquet_with_the_csv_columns_and_numbers(tmp_path, capsys, smoke_rows):
    pytest.importorskip("pyarrow")
    from neural_testbed import cli

    path, csv_out, parquet_out = tmp_path / "r.db", tmp_path / "r.csv", tmp_path / "r.parquet"
    with leaderboard.ResultsStore(path) as store:
        store.write(smoke_rows("mine", agents.MLPConfig(), 0.2))
    assert cli.main(["export", "--db", str(path), "-o", str(csv_out)]) == 0
    assert cli.main(["export", "--db", str(path), "-o", str(parquet_out),
                     "--format", "parquet"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 8 rows to {parquet_out}"
    parquet, csv = pd.read_parquet(parquet_out), pd.read_csv(csv_out)
    assert list(parquet.columns) == list(csv.columns)
    assert parquet["kl"].tolist() == csv["kl"].tolist()  # CSV keeps repr-exact floats
    assert parquet["tau"].dtype.kind == "i" and parquet["agent"].tolist() == ["mine"] * 8
    assert cli.main(["export", "--db", str(path), "-o", str(tmp_path / "s.parquet"),
                     "--format", "parquet", "--table", "studies"]) == 0
    assert pd.read_parquet(tmp_path / "s.parquet").empty


def test_export_to_parquet_without_pyarrow_is_one_line_before_any_work(
        tmp_path, monkeypatch, one_error_line, smoke_rows):
    import builtins

    from neural_testbed import cli

    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write(smoke_rows("mine", agents.MLPConfig(), 0.2))
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name == "pyarrow":
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    assert cli.main(["export", "--db", str(path), "-o", str(tmp_path / "r.parquet"),
                     "--format", "parquet"]) == 2
    one_error_line("--format parquet: Parquet files are written with pyarrow",
                   "pip install 'neural-testbed[analysis]'")
    assert not (tmp_path / "r.parquet").exists()
