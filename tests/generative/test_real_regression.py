"""Real-data regression: deterministic splits, a user's file, one-line refusals, a known
NLL through the whole run path, the fitted noise, XLL and TAL on real data."""

import csv
import dataclasses
import io
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, cli, leaderboard
from neural_testbed.active import tal
from neural_testbed.generative import real_regression
from neural_testbed.leaderboard import problems
from neural_testbed.leaderboard import store as store_lib

pytest.importorskip("sklearn")

QUICK = leaderboard.get_sweep("real-regression-quick")


def _rows_of(split):
    return {tuple(r) for part in (split.x, split.test_x, split.pool_x) for r in np.asarray(part)}


def test_the_sweeps_have_stable_ids_and_each_seed_its_own_split():
    full = leaderboard.get_sweep("real-regression")
    assert list(full) == [f"diabetes/{s}" for s in range(10)]
    assert all(full[pid] == p for pid, p in QUICK.items()) and list(QUICK) == [
        "diabetes/0", "diabetes/1"]
    p = full["diabetes/0"]
    assert (p.num_rows, p.input_dim, p.num_train, p.num_test_split, p.num_pool_split,
            p.taus, p.metric, p.target) == (442, 10, 88, 88, 266, (1, 5), "nll", "regression")
    assert len({q.key_seed for q in full.values()}) == 10
    assert problems.find_problems(["diabetes/3"])["diabetes/3"] == full["diabetes/3"]


def test_a_split_is_the_same_in_every_process_and_disjoint(monkeypatch):
    """The split is drawn from the problem's key seed (numpy's generator: the same on every
    machine) and the fit is rounded, so a fresh computation gives the same arrays; the
    three parts are disjoint and hold every row; training rows are standardised."""
    first = QUICK["diabetes/0"].split()
    real_regression._split.cache_clear()
    again = QUICK["diabetes/0"].split()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert first.noise_variance == 0.48  # pinned: a changed split or fit changes it
    other = QUICK["diabetes/1"].split()
    assert not np.array_equal(first.x, other.x)
    assert len(_rows_of(first)) == 442 == sum(len(a) for a in (first.x, first.test_x,
                                                                 first.pool_x))
    np.testing.assert_allclose(first.x.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(first.y.std(), 1, atol=1e-5)


def test_the_noise_fit_finds_a_known_noise_variance():
    """Data of known noise variance 0.01: the maximum-likelihood estimate from n points has
    a relative standard error of about sqrt(2 / n); the tolerance is 4 of them. And the
    evidence's gradient matches finite differences."""
    rng = np.random.default_rng(3)
    n = 300
    x = rng.normal(size=(n, 2))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.normal(size=n)
    _, _, noise = real_regression.fit_gaussian_process(x, y)
    assert abs(noise / 0.01 - 1) < 4 * math.sqrt(2 / n), noise
    params = np.log([0.7, 1.3, 2.0, 0.05])
    value, grad = real_regression._negative_evidence(params, x[:50], y[:50])
    step = 1e-6
    numeric = [(real_regression._negative_evidence(params + step * e, x[:50], y[:50])[0]
                - value) / step for e in np.eye(4)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4)


def _csv(path, rows, header="a,b,y"):
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def test_a_users_csv_round_trips_into_problems(tmp_path, capsys):
    rng = np.random.default_rng(0)
    values = np.round(rng.normal(size=(30, 3)), 4)
    path = _csv(tmp_path / "d.csv", values)
    data = real_regression.load_file(path, "y")
    np.testing.assert_array_equal(data.x, values[:, :2])
    np.testing.assert_array_equal(data.y, values[:, 2])
    made = real_regression.file_problems(path, "y")
    assert list(made) == [f"d.csv/{s}" for s in range(10)]
    p = made["d.csv/4"]
    assert (p.num_train, p.num_test_split, p.num_pool_split, p.stratum) == (6, 6, 18,
                                                                           ("d.csv", 6))
    npz = tmp_path / "d.npz"  # the same rows as arrays: the same problems' draws
    np.savez(npz, x=values[:, :2], y=values[:, 2])
    assert real_regression.file_problems(npz, "y")["d.npz/4"].key_seed == p.key_seed
    assert cli.main(["problems", "--dataset", str(path), "--target-column", "y"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == ["d.csv/0", "d.csv", "6", "0"]


@pytest.mark.parametrize("make, args, fragment", [
    (lambda p: _csv(p / "d.csv", np.ones((30, 3)) * [1, 2, 3] + np.arange(30)[:, None]),
     ["--target-column", "z"], "dataset 'd.csv': no column 'z'; columns: a, b, y"),
    (lambda p: _csv(p / "d.csv", [[1, "x", 2]] * 30), ["--target-column", "y"],
     "dataset 'd.csv': column 'b' row 2 is not a number: 'x'"),
    (lambda p: _csv(p / "d.csv", [[1, 2, i] for i in range(24)]), ["--target-column", "y"],
     "dataset 'd.csv': 24 rows; the 20/20/60 train/test/pool split needs at least 25"),
    (lambda p: _csv(p / "d.csv", [[i, 2, 7] for i in range(30)]), ["--target-column", "y"],
     "dataset 'd.csv': target column 'y' is constant (7)"),
    (lambda p: _csv(p / "d.csv", [[i, "nan", i] for i in range(30)]), ["--target-column", "y"],
     "dataset 'd.csv': a feature is not a finite number at row 0"),
    (lambda p: np.savez(p / "d.npz", x=np.ones((30, 2)), target=np.arange(30.0)) or p / "d.npz",
     ["--target-column", "y"], "dataset 'd.npz': missing array(s) y; a regression .npz needs"),
    (lambda p: _csv(p / "d.csv", [[i, 2, i] for i in range(30)]),
     ["--target-column", "y", "--label-column", "y"], "both name the target; give one of them"),
    (None, ["--target-column", "y"], "--target-column goes with --dataset FILE"),
])
def test_bad_regression_data_is_one_line_before_any_work(tmp_path, capsys, make, args, fragment):
    dataset = [] if make is None else ["--dataset", str(make(tmp_path))]
    assert cli.main(["problems", *dataset, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neural-testbed: error: "), err
    assert fragment in err, err


def _zero_agent():
    """A single model predicting f = 0: its joint NLL is known exactly."""
    enn = base.ENN(apply=lambda state, x, index: jnp.zeros((x.shape[0], 1)),
                   sample_index=lambda key: jnp.zeros((), jnp.int32), num_indices=1)
    return base.Agent(train=lambda key, data, prior: jnp.zeros(()), enn=enn)


def _two_slopes_agent():
    """Two members, f = +-x_0 / 2: correlated predictions, no training."""
    signs = jnp.array([0.5, -0.5])
    enn = base.ENN(apply=lambda state, x, index: signs[index] * x[:, :1],
                   sample_index=lambda key: jax.random.randint(key, (), 0, 2), num_indices=2)
    return base.Agent(train=lambda key, data, prior: jnp.zeros(()), enn=enn)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Both agents' rows on the quick sweep, in a store."""
    db = str(tmp_path_factory.mktemp("real_regression") / "r.db")
    rows = {}
    with store_lib.ResultsStore(db) as store:
        for name, agent in (("zero", _zero_agent()), ("slopes", _two_slopes_agent())):
            rows[name] = leaderboard.run_agent(lambda shapes, a=agent: a, QUICK.values(), name,
                                               progress=False)
            store.write(rows[name])
    return db, rows


def test_a_known_nll_through_the_run_path(stored):
    """f = 0 with the problem's noise variance s^2: each test row's NLL is
    y^2 / (2 s^2) + log(2 pi s^2) / 2, and a tau-sample's is the sum over tau distinct rows,
    each uniform over the test split, so its mean is tau times the mean over the split. The
    tolerance is 4 of the row's standard errors (over its N i.i.d. test tau-samples)."""
    _, rows = stored
    for row in rows["zero"]:
        problem = QUICK[row.problem_id]
        split = problem.split()
        s2 = np.float64(np.float32(split.noise_variance))
        per_row = np.asarray(split.test_y, np.float64) ** 2 / (2 * s2) + 0.5 * np.log(
            2 * np.pi * s2)
        assert (row.status, row.metric, row.kl, row.noise_variance) == (
            "ok", "nll", None, problem.noise_variance)
        assert abs(row.nll - row.tau * per_row.mean()) < 4 * row.nll_stderr, row
        assert json.loads(row.diagnostics)["metacorrelation"] is None  # no exact posterior
        assert (row.predictive is not None) == (row.tau == 1)  # kept for xll
    assert all(math.isfinite(r.nll) and r.status == "ok" for r in rows["slopes"])


def test_xll_and_the_leaderboard_run_on_real_regression(stored, capsys):
    db, _ = stored
    assert cli.main(["xll", "--agent", "zero", "--agent", "slopes", "--sweep",
                     "real-regression-quick", "--db", db, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    table = {r["agent"]: r for r in csv.DictReader(io.StringIO(out))}
    assert "sweep: real-regression-quick; XLL, XLLR" in err
    # Two agents: under each reference one ranks 0 and the other 1 (or both 0.5).
    assert float(table["zero"]["xllr"]) + float(table["slopes"]["xllr"]) == pytest.approx(1)
    assert all(math.isfinite(float(r["xll"])) and r["problems"] == "2" for r in table.values())
    assert cli.main(["leaderboard", "--sweep", "real-regression-quick", "--db", db,
                     "--format", "csv"]) == 0
    records = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["agent"] for r in records} == {"zero", "slopes"}
    assert all(float(r["health"]) == 1 for r in records)


def test_refusals_that_real_data_needs(capsys):
    for args, fragment in (
            (["run", "--agent", "oracle_gp", "--sweep", "real-regression-quick"],
             ("agent 'oracle_gp' is the exact posterior of a known Gaussian process; "
              "diabetes/0 is real data")),
            (["probe", "--agent", "mlp", "--sweep", "real-regression-quick"],
             "real-regression-quick is real data"),
            (["run", "--agent", "mlp", "--sweep", "real-regression-quick", "--taus", "1,100"],
             "tau 100 exceeds the 88 test rows")):
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


def test_tal_on_real_data_scores_with_the_fitted_process():
    """One round of TAL with f = 0 as the selection model: the prediction model's score
    before any query is the fitted ARD process's mean marginal log-likelihood of the test
    targets, computed here in float64 numpy; no metacorrelation on real data."""
    problem = QUICK["diabetes/0"]
    settings = tal.TALSettings(num_rounds=1, batch_size=problem.tal_batch_size,
                               num_samples=2, methods=("batchmig", "random"))
    (result,) = tal.run_tal(lambda shapes: _zero_agent(), [problem], settings)
    split = problem.split()
    scale = lambda x: np.asarray(x, np.float64) / split.lengthscales

    def kernel(a, b):
        sq = ((scale(a)[:, None, :] - scale(b)[None, :, :]) ** 2).sum(-1)
        return split.signal_variance * np.exp(-0.5 * sq)

    ridge = 1e-4  # gaussian_process.RIDGE, on identical inputs
    x, y, tx = split.x, np.asarray(split.y, np.float64), split.test_x
    cov = kernel(x, x) + (ridge + split.noise_variance) * np.eye(len(x))
    cross = kernel(tx, x)
    mean = cross @ np.linalg.solve(cov, y)
    var = split.signal_variance + ridge - np.einsum("ij,ji->i", cross,
                                                     np.linalg.solve(cov, cross.T))
    var = var + split.noise_variance
    expected = np.mean(-0.5 * ((split.test_y - mean) ** 2 / var + np.log(2 * np.pi * var)))
    assert result.log_likelihood["batchmig"][0] == pytest.approx(expected, abs=2e-3)
    assert result.log_likelihood["random"][0] == result.log_likelihood["batchmig"][0]
    assert result.selected["batchmig"].shape == (1, problem.tal_batch_size)
    assert all(np.isfinite(v).all() for v in result.log_likelihood.values())
    assert math.isnan(result.metacorrelation)


def test_rows_of_existing_sweeps_are_untouched():
    """The new sweeps add ids and leave every other sweep's ids and definitions alone."""
    assert not set(leaderboard.get_sweep("real-regression")) & {
        pid for name in ("regression", "regression-wang") for pid in
        leaderboard.get_sweep(name)}
    p = dataclasses.replace(QUICK["diabetes/0"], taus=(1,))
    assert base.definition_hash(p) == base.definition_hash(QUICK["diabetes/0"])
