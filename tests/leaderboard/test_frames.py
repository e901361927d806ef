"""The DataFrame views of the store."""

import pytest

from neural_testbed import agents, leaderboard
from neural_testbed.leaderboard import configs
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
