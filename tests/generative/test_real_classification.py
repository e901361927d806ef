"""Real-data problems: a known answer through the real-data path, splits, determinism, bad input."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, generative, leaderboard
from neural_testbed.generative import datasets

pytest.importorskip("sklearn")

SYNTHETIC = leaderboard.get_sweep("paper")["classification_2d/115"]  # temperature 0.1, T = 100


def _scaled_environment_agent(env):
    """Knows the environment: a uniform mixture of its logits scaled by 0.2, 1 and 5.

    Training ignores the data, so the real-data path (which trains on the same T pairs in
    another order) trains the same agent; the mixture makes joint predictions differ from
    products of marginals, so tau = 100 is a real check of Algorithm 4 on both paths."""
    scales = jnp.array([0.2, 1.0, 5.0])
    enn = base.ENN(apply=lambda state, x, i: generative.environment_logits(env, x) * scales[i],
                   sample_index=lambda key: jax.random.randint(key, (), 0, 3), num_indices=3)
    return base.Agent(train=lambda key, data, prior: jnp.zeros(()), enn=enn)


@pytest.mark.slow  # full-size evaluations (N = M = 1000) through both paths
def test_nll_minus_conditional_entropy_is_the_synthetic_kl(tmp_path):
    """A dataset drawn from a known random-MLP environment, evaluated through the real-data path
    with the synthetic path's settings (no feature scaling, the same prior knowledge, d = 7,
    the same T training pairs; test rows drawn from a 20,000-row test split of the same
    environment): NLL - tau * H equals the synthetic d_KL within the standard errors.

    H is the split's mean conditional entropy of the labels (exact per test input). The
    tolerance is 4 standard errors of the difference: both estimates' reported standard
    errors and H's, sqrt(var(entropy) / 20000) per input times tau, combined in quadrature.
    """
    data, _, env = SYNTHETIC.instance()
    test = generative.sample_test_data(jax.random.key(99), env, 20_000, 1)
    x_test, y_test = np.asarray(test.x[:, 0]), np.asarray(test.y[:, 0])
    path = tmp_path / "environment.npz"
    np.savez(path, x_train=np.asarray(data.x), y_train=np.asarray(data.y), x_test=x_test,
             y_test=y_test)
    real = generative.file_problems(path, num_trains=(SYNTHETIC.num_train,), seeds=(0,),
                                    standardise=False, temperature=SYNTHETIC.temperature,
                                    num_hyperplanes=SYNTHETIC.num_hyperplanes)
    (problem,) = real.values()
    assert problem.num_train == problem.num_train_split == SYNTHETIC.num_train
    np.testing.assert_array_equal(np.sort(problem.instance().data.x, axis=0),
                                  np.sort(np.asarray(data.x), axis=0))  # same pairs

    agent = _scaled_environment_agent(env)
    synthetic = {r.tau: r for r in leaderboard.run_agent(lambda shapes: agent, [SYNTHETIC],
                                                         progress=False)}
    nll = {r.tau: r for r in leaderboard.run_agent(lambda shapes: agent, [problem],
                                                   progress=False)}
    probs = jax.nn.softmax(generative.environment_logits(env, jnp.asarray(x_test)))
    entropy = np.asarray(-jnp.sum(probs * jnp.log(probs), axis=-1), np.float64)
    for tau in SYNTHETIC.taus:
        assert synthetic[tau].metric == "kl" and nll[tau].metric == "nll"
        assert nll[tau].kl is None and synthetic[tau].nll is None
        difference = nll[tau].nll - tau * entropy.mean() - synthetic[tau].kl
        stderr = np.sqrt(synthetic[tau].kl_stderr ** 2 + nll[tau].nll_stderr ** 2
                         + (tau * entropy.std() / np.sqrt(len(entropy))) ** 2)
        assert abs(difference) < 4 * stderr, (tau, difference, stderr)
        assert synthetic[tau].kl > 4 * synthetic[tau].kl_stderr  # not a trivial zero


def test_built_in_sweeps_have_the_stated_sizes_and_stable_ids():
    real = leaderboard.get_sweep("real")
    sizes = {"iris": (120, 30, 4, 3), "wine": (142, 36, 13, 3), "breast_cancer": (455, 114, 30, 2),
             "digits": (1438, 359, 64, 10)}
    for name, (train, test, dim, classes) in sizes.items():
        problems = [p for p in real.values() if p.dataset == name]
        assert {(p.num_train_split, p.num_test_split, p.input_dim, p.num_classes)
                for p in problems} == {(train, test, dim, classes)}
        grid = sorted({t for t in (1, 10, 100, 1000) if t < train} | {train})
        assert sorted({p.num_train for p in problems}) == grid
        assert len(problems) == 10 * len(grid)
    assert len(real) == 170
    assert real["iris/17"].num_train == 10 and real["iris/17"].seed == 7
    quick = leaderboard.get_sweep("real-quick")
    assert len(quick) == 16 and all(quick[pid] == real[pid] for pid in quick)
    assert {p.metric for p in real.values()} == {"nll"}
    assert {p.num_hyperplanes for p in real.values()} == {10}


def test_splits_are_disjoint_standardised_and_fixed():
    iris = datasets.load_dataset("iris")
    assert len(iris.y_train) + len(iris.y_test) == 150
    np.testing.assert_allclose(iris.x_train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(iris.x_train.std(axis=0), 1, atol=1e-5)
    assert set(np.unique(iris.y_train)) == {0, 1, 2}
    # The split is a fixed function of the dataset: the same when read again.
    datasets.load_dataset.cache_clear()
    np.testing.assert_array_equal(datasets.load_dataset("iris").x_test, iris.x_test)


def _unique_rows_dataset(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = (x[:, 0] > 0).astype(int)
    path = tmp_path / "unique.npz"
    np.savez(path, x_train=x[:300], y_train=y[:300], x_test=x[300:], y_test=y[300:])
    return path


def test_training_rows_come_from_the_training_split_and_test_rows_from_the_test_split(
        tmp_path):
    path = _unique_rows_dataset(tmp_path)
    problems = generative.file_problems(path, num_trains=(10, 100), seeds=(0, 1),
                                        num_test=50)
    split = datasets.load_file(path)
    train_rows = {tuple(r) for r in split.x_train}
    test_rows = {tuple(r) for r in split.x_test}
    chosen = []
    for problem in problems.values():
        data, _, env = problem.instance()
        rows = {tuple(r) for r in np.asarray(data.x)}
        assert len(rows) == problem.num_train and rows <= train_rows  # without replacement
        again = problem.instance().data
        np.testing.assert_array_equal(again.x, data.x)  # deterministic per problem
        test = problem.sample_test(jax.random.key(3), env, 100)
        assert test.x.shape == (50, 100, 3) and test.log_likelihood is None
        assert {tuple(r) for r in np.asarray(test.x).reshape(-1, 3)} <= test_rows
        chosen.append(rows)
    assert chosen[0] != chosen[1]  # seeds 0 and 1 at T = 10 train on different rows


def _cli(args, capsys):
    from neural_testbed import cli
    status = cli.main(args)
    return status, capsys.readouterr()


@pytest.mark.parametrize("arrays, message", [
    ({"x_train": [[np.nan, 1.0], [0.0, 1.0]], "y_train": [0, 1]},
     "x_train has a non-finite value (nan) at row 0, feature 0"),
    ({"x_test": [[np.inf, 1.0]], "y_test": [0]}, "x_test has a non-finite value (inf)"),
    ({"y_train": [0, 0]}, "the training split has a single class"),
    ({"x_test": np.zeros((0, 2)), "y_test": np.zeros(0)}, "the test split is empty"),
    ({"y_train": [0, 1, 1]}, "mismatched lengths: x_train 2 vs y_train 3"),
    ({"y_train": [0.5, 1.0]}, "y_train must be integer class labels, got 0.5"),
])
def test_bad_npz_files_are_one_line_and_nothing_is_stored(tmp_path, capsys, arrays, message):
    good = {"x_train": [[0.0, 1.0], [1.0, 0.0]], "y_train": [0, 1], "x_test": [[0.5, 0.5]],
            "y_test": [1]}
    path = tmp_path / "bad.npz"
    np.savez(path, **{**good, **arrays})
    db = tmp_path / "r.db"
    status, out = _cli(["run", "--agent", "mlp", "--dataset", str(path), "--db", str(db)],
                       capsys)
    assert status == 2 and message in out.err and len(out.err.strip().splitlines()) == 1
    assert not db.exists()


@pytest.mark.parametrize("args, message", [
    (["--dataset", "{csv}"], "a .csv needs --label-column NAME"),
    (["--dataset", "{csv}", "--label-column", "nope"], "no column 'nope'; columns: a, b, label"),
    (["--dataset", "{csv}", "--label-column", "b"], "label column 'b' must be integer class "
                                                     "labels, got 0.5"),
    (["--dataset", "{missing}"], "no dataset file at"),
    (["--sweep", "real", "--label-column", "label"], "--label-column goes with --dataset"),
])
def test_bad_csv_and_options_are_one_line(tmp_path, capsys, args, message):
    csv_path = tmp_path / "d.csv"
    csv_path.write_text("a,b,label\n0.1,0.5,0\n0.2,1.5,1\n0.3,2.5,0\n0.4,3.5,1\n0.5,4.5,1\n")
    args = [a.format(csv=csv_path, missing=tmp_path / "missing.npz") for a in args]
    status, out = _cli(["problems", *args], capsys)
    assert status == 2 and message in out.err, out.err


def test_unknown_built_in_dataset_names_the_allowed_ones():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'; built-in datasets: iris, wine"):
        datasets.load_dataset("mnist")


def test_a_csv_with_a_label_column_is_split_80_20_with_a_fixed_seed(tmp_path):
    rng = np.random.default_rng(1)
    rows = "\n".join(f"{a:.3f},{b:.3f},{int(a > 0)}" for a, b in rng.normal(size=(50, 2)))
    path = tmp_path / "d.csv"
    path.write_text("a,b,label\n" + rows + "\n")
    first, second = datasets.load_file(path, "label"), datasets.load_file(path, "label")
    assert (len(first.y_train), len(first.y_test)) == (40, 10)
    np.testing.assert_array_equal(first.x_test, second.x_test)
    problems = generative.file_problems(path, "label")
    assert sorted({p.num_train for p in problems.values()}) == [1, 10, 40]
    assert dataclasses.replace(problems["d.csv/0"]).stratum == ("d.csv", 1)


def test_results_on_stand_in_datasets_say_what_they_stand_in_for(tmp_path, capsys):
    """wine and digits stand in for the paper's wine quality and MNIST: commands showing
    their problems say so on stderr, and so do figure panels; other data gets no note."""
    status, out = _cli(["problems", "--sweep", "real-quick"], capsys)
    assert status == 0
    assert out.err.splitlines() == [
        "note: scikit-learn's 8x8 digits stands in for the paper's MNIST",
        "note: scikit-learn's wine (3 cultivars, 13 features) stands in for the paper's "
        "wine quality"]
    path = tmp_path / "digits.npz"  # a user's file is never taken for the built-in one
    np.savez(path, x_train=[[0.0], [1.0]], y_train=[0, 1], x_test=[[0.5]], y_test=[1])
    for args in (["--sweep", "quick"], ["--dataset", str(path)]):
        status, out = _cli(["problems", *args], capsys)
        assert status == 0 and out.err == "", out.err
    from neural_testbed.leaderboard import panels
    assert [panels.title((("dataset", name),)) for name in ("digits", "wine", "iris")] == [
        "digits (for MNIST)", "wine (for wine quality)", "iris"]


def test_rows_of_a_data_file_are_reused_only_for_the_same_contents(tmp_path, capsys):
    """Problem ids of a file are ``<name>/<i>``; the rows' key holds its contents' hash,
    so an edited file (or another file of that name) is computed anew, not served the
    old rows, and the original contents are reused again."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    path, db = tmp_path / "same.npz", str(tmp_path / "r.db")

    def write(labels):
        np.savez(path, x_train=x[:6], y_train=labels[:6], x_test=x[6:], y_test=labels[6:])
        os.utime(path, ns=(0, len(labels) + int(labels.sum())))  # a new mtime per content

    def run():
        status, out = _cli(["run", "--agent", "knn", "--dataset", str(path), "--taus", "1",
                            "--db", db, "--quiet"], capsys)
        assert status == 0, out.err
        line = next(line for line in out.out.splitlines() if line.startswith("time:"))
        return line.split("; ")[1], out.out

    write(y)
    assert run()[0].startswith("20 rows computed, 0 reused")
    write(1 - y)  # edited in place: other labels
    counts, out = run()
    assert counts.startswith("20 rows computed, 0 reused")
    assert "other data" not in out
    write(y)
    assert run()[0].startswith("0 rows computed, 20 reused")
