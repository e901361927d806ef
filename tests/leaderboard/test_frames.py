"""The DataFrame views of the store."""

import pytest

from neural_testbed import agents, base, leaderboard

pd = pytest.importorskip("pandas")


def test_frames_match_the_scoring_functions(tmp_path):
    problems = leaderboard.get_sweep("smoke")
    path = str(tmp_path / "r.db")
    with leaderboard.ResultsStore(path) as store:
        for name, kl in (("mlp", 0.4), ("other", 0.2)):
            rows = [base.ProblemResult(name, pid, p.temperature, p.num_train, p.seed, tau,
                                       kl * tau + 0.01 * p.seed, 0.01, 0.9, 0.05, 1.0, 0.5)
                    for pid, p in problems.items() for tau in p.taus]
            store.write(rows, agents.MLPConfig(), problems, "auto", 0)
    results = leaderboard.results_frame(path)
    assert len(results) == 16 and set(results["agent"]) == {"mlp", "other"}
    board = leaderboard.leaderboard_frame(path, sweep="smoke")
    assert list(board["agent"]) == ["other", "mlp"]
    assert board.set_index("agent").loc["other", "kl_1_norm"] == pytest.approx(0.205 / 0.405)
    diffs = leaderboard.compare_frame("other", ["mlp"], db=path, sweep="smoke")
    assert len(diffs) == 4 and (diffs["kl_diff"] < 0).all()
