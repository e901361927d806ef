"""Regression problems through the runner and the command: rows, diagnostics, and which
agents may run on them; no agent beats the exact posterior."""

import dataclasses
import functools
import json

import numpy as np
import pytest

from neural_testbed import agents, cli, leaderboard
from neural_testbed.leaderboard import predictives
from neural_testbed.leaderboard import store as store_lib

# regression-quick's d = 1 problems at a test size that runs in seconds: T = 1 and 10.
PROBLEMS = [dataclasses.replace(p, num_test=200, num_samples=200, num_pool=200, num_probes=50,
                                taus=(1, 10))
            for p in leaderboard.get_sweep("regression-quick").values() if p.input_dim == 1]


def _rows(name, config=None):
    spec = agents.get_agent(name)
    build = functools.partial(spec.make, spec.default if config is None else config)
    return leaderboard.run_agent(build, PROBLEMS, name, progress=False)


@pytest.fixture(scope="module")
def oracle_rows():
    return _rows("oracle_gp")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_rows_carry_the_kl_and_the_metacorrelation_and_no_classification_metrics(oracle_rows):
    assert len(oracle_rows) == 2 * len(PROBLEMS) == 8
    for r in oracle_rows:
        assert r.status == "ok" and r.metric == "kl" and r.target == "regression", r.error
        assert np.isfinite(r.kl) and r.kl > 0 and r.kl_stderr > 0 and r.nll is None
        assert (r.num_classes, r.accuracy, r.ece) == (None, None, None)  # not defined here
        record = json.loads(r.diagnostics)
        assert 0.9 < record["metacorrelation"] <= 1.0  # the exact posterior's own correlations
        assert isinstance(record["xll"], float)
        assert r.noise_variance == 0.01 and r.temperature is None


@pytest.mark.slow  # the oracle's run (oracle_rows), among the costliest (benchmarks/suite_cpu.py)
def test_the_smallest_taus_row_keeps_the_agents_predictive_at_the_probes(oracle_rows):
    """The stored mean is the M = 200 samples' mean: within 5 of its standard errors of the
    exact posterior's; the stored covariance's diagonal is the sampled variance plus noise."""
    assert all((r.predictive is not None) == (r.tau == 1) for r in oracle_rows)
    for r in oracle_rows[::2]:
        env = next(p for p in PROBLEMS if p.problem_id == r.problem_id).instance().env
        moments = predictives.decode(r.predictive)
        assert moments.mean.shape == (50,) and moments.covariance.shape == (50, 50)
        stderr = np.sqrt(np.asarray(env.probe_variance) / 200)
        assert np.all(np.abs(moments.mean - np.asarray(env.probe_mean)) < 5 * stderr + 1e-4)
        sampled = np.diag(moments.covariance) - 0.01
        np.testing.assert_allclose(sampled.mean(), json.loads(r.diagnostics)[
            "predictive_variance"], rtol=1e-3)


# 20 problems (d = 1, T in {3, 10}, 10 seeds each) at tau = 1, small N and M.
MANY = [dataclasses.replace(p, num_test=100, num_samples=100, num_pool=100, num_probes=20,
                            taus=(1,))
        for p in leaderboard.get_sweep("regression").values()
        if p.input_dim == 1 and p.noise_variance == 0.01 and p.num_train in (3, 10)]


@pytest.fixture(scope="module")
def many_oracle_kls():
    return {r.problem_id: r.kl for r in leaderboard.run_agent(
        functools.partial(agents.make_oracle_gp_agent, agents.OracleGPConfig()), MANY,
        "oracle_gp", progress=False)}


@pytest.mark.parametrize("name", ["mlp", "gp", *(pytest.param(n, marks=pytest.mark.slow)
                                   for n in ("ensemble", "ensemble+", "epinet", "dropout"))])
def test_no_agent_scores_significantly_below_the_exact_posterior(name, many_oracle_kls):
    """The oracle is best in expectation over the functions f, not on every f (an agent that
    happens to be confident and right on a flat f beats it there): over 20 problems, the mean
    of agent minus oracle KL is above -4 standard errors of that mean (seeds fixed).
    Minibatches of 10 (T is 3 or 10, so 100 only repeats points) keep training short."""
    spec = agents.get_agent(name)
    config = dataclasses.replace(spec.default, num_steps=300)
    if hasattr(config, "batch_size"):
        config = dataclasses.replace(config, batch_size=10)
    if name in ("ensemble", "ensemble+"):
        config = dataclasses.replace(config, num_ensemble=10)
    rows = leaderboard.run_agent(functools.partial(spec.make, config), MANY, name,
                                 progress=False)
    assert all(r.status == "ok" for r in rows), [r.error for r in rows]
    differences = np.array([r.kl - many_oracle_kls[r.problem_id] for r in rows])
    stderr = differences.std(ddof=1) / np.sqrt(len(differences))
    assert differences.mean() > -4 * stderr, (differences.mean(), stderr)
    metacorrelations = [json.loads(r.diagnostics)["metacorrelation"] for r in rows]
    if name == "mlp":  # a single model has no predictive correlations
        assert all(m is None for m in metacorrelations)
        assert all(len(r.predictive) < 200 for r in rows)  # one member: a factor of zeros
    else:
        assert all(isinstance(m, float) for m in metacorrelations)
    # XLL is of the targets, whose correlations the noise defines for a single model too.
    assert all(isinstance(json.loads(r.diagnostics)["xll"], float) for r in rows)


def test_agents_are_refused_on_problems_they_are_not_built_for(tmp_path, capsys):
    db = tmp_path / "r.db"
    assert cli.main(["run", "--agent", "knn", "--sweep", "regression-quick",
                     "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    # From the registry, which other agents join: the message names every regression agent.
    able = sorted(name for name, spec in agents.AGENTS.items() if "regression" in spec.targets)
    assert {"anp", "bbb", "cnp", "mlp", "np", "oracle_gp", "sgmcmc"} <= set(able)
    assert err == ("neural-testbed: error: agent 'knn' is not built for regression problems "
                   f"(it handles classification); agents for regression: {', '.join(able)}")
    assert cli.main(["run", "--agent", "oracle_gp", "--sweep", "smoke", "--db", str(db)]) == 2
    assert "agent 'oracle_gp' is not built for classification problems" in capsys.readouterr().err
    assert cli.main(["run", "--agent", "mlp", "--sweep", "regression-quick", "--estimator",
                     "partition", "--db", str(db)]) == 2
    assert "unknown estimator 'partition'" in capsys.readouterr().err
    assert not db.exists()  # refused before the store was made


def test_problems_lists_the_regression_sweeps_settings(capsys):
    assert cli.main(["problems", "--sweep", "regression-quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "d, noise" in lines[0] and len(lines) == 9
    assert lines[1].split()[:4] == ["regression/0", "1,", "0.01", "1"]
    assert len(leaderboard.get_sweep("regression")) == 180
    assert len(leaderboard.get_sweep("regression-wang")) == 30


@pytest.mark.slow  # the oracle's run (oracle_rows), among the costliest (benchmarks/suite_cpu.py)
def test_the_leaderboard_averages_the_metacorrelation(oracle_rows):
    problems = {p.problem_id: p for p in PROBLEMS}
    stored = [store_lib.StoredRow(**r.as_dict(), version="0", timestamp="t")
              for r in oracle_rows]
    records, _ = leaderboard.score_agents(stored, problems, baseline="")
    expected = np.mean([json.loads(r.diagnostics)["metacorrelation"] for r in oracle_rows
                        if r.tau == 1])
    assert records[0]["metacorrelation"] == pytest.approx(expected, rel=1e-6)


def test_plot_titles_regression_panels_and_diagnose_refuses_regression(tmp_path, capsys):
    from neural_testbed.leaderboard import panels
    problem = leaderboard.get_sweep("regression-quick")["regression/0"]
    assert panels.title(panels.panel(problem.stratum_columns)) == (
        f"d = {problem.input_dim}, noise variance {problem.noise_variance:g}")
    db = tmp_path / "d.db"
    assert cli.main(["diagnose", "--agent", "mlp", "--sweep", "regression-quick",
                     "--problem", "regression/0", "--db", str(db), "--out",
                     str(tmp_path / "d")]) == 2
    assert "diagnose covers classification problems" in capsys.readouterr().err
    assert not db.exists()
