"""`neural-testbed xll` on a tiny store: two regression-quick problems, an agent with the
exact posterior's predictive and one with independent targets (a single model); the
table is Algorithm 2 over them, and bad requests are one clear line."""

import csv
import functools
import io

import jax
import numpy as np
import pytest

from neural_testbed import cli, leaderboard
from neural_testbed.diagnostics import xll
from neural_testbed.leaderboard import predictives, xll_scores
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

SWEEP = leaderboard.get_sweep("regression-quick")
PIDS = ("regression/0", "regression/1")  # d = 1, T = 1, seeds 0 and 1: one stratum
_xll_matrix = jax.jit(xll.xll_matrix)  # one program, not op by op


@functools.lru_cache(maxsize=None)
def _env(pid):
    return SWEEP[pid].instance().env


def _exact(env):
    """The exact posterior's predictive of f at the probes, as an agent would store it."""
    scale = np.sqrt(np.asarray(env.probe_variance, np.float64))
    values, vectors = np.linalg.eigh(np.asarray(env.probe_correlation, np.float64)
                                     * np.outer(scale, scale))
    spread = (vectors * np.sqrt(np.clip(values, 0, None))).T
    return predictives.encode(env.probe_mean, spread, env.noise_variance)


def _independent(env):
    """A single model with its own (shifted) means: no spread, so the noise alone."""
    q = env.probe_mean.shape[0]
    return predictives.encode(np.asarray(env.probe_mean) + 0.3, np.zeros((1, q)),
                              env.noise_variance)


def _rows(agent, encode):
    rows = []
    for pid in PIDS:
        problem = SWEEP[pid]
        blob = None if encode is None else encode(_env(pid))
        for tau in problem.taus:
            rows.append(run_rows.result_row(
                agent, store_lib.config_hash(agent, None), store_lib.config_json(None), problem,
                tau, "auto", 0, estimate=1.0, estimate_stderr=0.1, num_clipped=0, accuracy=np.nan,
                ece=np.nan, train_seconds=1.0, compile_seconds=0.0, eval_seconds=1.0,
                predictive=blob if tau == min(problem.taus) else None))
    return rows


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("xll") / "r.db"
    with leaderboard.ResultsStore(path) as store:
        store.write(_rows("exact", _exact) + _rows("independent", _independent)
                    + _rows("blind", None))
    return path


def _expected():
    """Algorithm 2 by hand: XLL and rank matrices per problem, averaged over references,
    then the mean over the two problems and its standard error (one stratum)."""
    per_problem = []
    for pid in PIDS:
        env = _env(pid)
        moments = [predictives.decode(encode(env)) for encode in (_exact, _independent)]
        matrix = np.asarray(_xll_matrix(env.probe_y, np.stack([m.mean for m in moments]),
                                        np.stack([m.covariance for m in moments])))
        ranks = (matrix < matrix[:, ::-1]).astype(float)  # of two: 1 for the lower
        per_problem.append((matrix.mean(0), ranks.mean(0), matrix))
    scores = np.array([p[0] for p in per_problem])
    ranks = np.array([p[1] for p in per_problem])
    return scores, ranks, [p[2] for p in per_problem]


def test_the_table_is_algorithm_2_averaged_over_the_problems(db, capsys):
    assert cli.main(["xll", "--agent", "independent", "--agent", "exact", "--sweep",
                     "regression-quick", "--db", str(db), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert "each of the 2 agents serves once as the reference" in err
    assert "6 of the sweep's 8 problems lack a stored predictive" in err
    table = {r["agent"]: r for r in csv.DictReader(io.StringIO(out))}
    scores, ranks, matrices = _expected()
    for i, agent in enumerate(("exact", "independent")):
        row = table[agent]
        assert row["problems"] == "2" and row["of"] == "8"
        assert float(row["xll"]) == pytest.approx(scores[:, i].mean(), rel=1e-5)
        assert float(row["xll_stderr"]) == pytest.approx(
            scores[:, i].std(ddof=1) / np.sqrt(2), rel=1e-4)
        assert float(row["xllr"]) == pytest.approx(ranks[:, i].mean())
    # With the exact posterior as the reference, its own correlations beat independence
    # (d = 1: near probes are strongly correlated), by far more than the noise of one draw.
    assert all(m[0, 0] > m[0, 1] + 1.0 for m in matrices)
    # Best XLLR first, then the higher XLL.
    order = sorted(table.values(), key=lambda r: (float(r["xllr"]), -float(r["xll"])))
    assert list(table) == [r["agent"] for r in order]


def test_bad_requests_are_one_clear_line(db, capsys):
    def error(*args):
        assert cli.main(["xll", *args, "--db", str(db)]) == 2
        return capsys.readouterr().err.strip()

    assert error("--agent", "exact") == (
        "neural-testbed: error: xll compares at least 2 agents (--agent A --agent B), "
        "got 1: 'exact'")
    assert error("--agent", "exact", "--agent", "blind").startswith(
        "neural-testbed: error: agent 'blind': its tuned config (")
    assert "no such agent" in error("--agent", "exact", "--agent", "ghost")
    assert "xll needs a regression sweep" in error("--agent", "exact", "--agent", "blind",
                                                  "--sweep", "quick")
    assert "--batch-size) must be an integer >= 2, got 1" in error(
        "--agent", "exact", "--agent", "independent", "--batch-size", "1")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["xll", "--agent", "exact", "--agent", "blind", "--sweep", "nope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_the_library_refuses_before_reading_the_store():
    with pytest.raises(ValueError, match="an agent is named twice"):
        xll_scores.check_options(SWEEP, ["a", "b", "a"], 5)


def test_merge_carries_the_predictives(db, tmp_path, capsys):
    merged = tmp_path / "merged.db"
    assert cli.main(["merge", str(db), "-o", str(merged)]) == 0
    key = ("exact", store_lib.config_hash("exact", None), "auto", 0)
    with leaderboard.ResultsStore(db, create=False) as a, \
            leaderboard.ResultsStore(merged, create=False) as b:
        assert len(b.predictives(*key)) == 2 and b.predictives(*key) == a.predictives(*key)
