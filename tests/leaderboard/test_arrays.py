"""Scoring from arrays: what a model must predict, and the rows its predictions get, the
same as the run path gives a JAX agent."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.leaderboard import arrays

# Small N and M: the paths are compared, not the agents.
PROBLEM = dataclasses.replace(leaderboard.get_sweep("classification-quick")["classification/65"],
                              num_test=50, num_samples=20)
PAPER = dataclasses.replace(leaderboard.get_sweep("smoke")["classification_2d/90"],
                            num_test=20, num_samples=10)


def _mlp_predictions(problem, spec, config):
    """Train the mlp as the run path does (its agent key, seed 0) and predict at the
    problem's arrays: one network, so M copies of its probabilities."""
    agent = spec.make(config, base.Shapes.of(problem))
    data, prior, _ = problem.instance()
    key = jax.random.fold_in(base.problem_keys(problem.key_seed).agent, 0)
    state = jax.jit(agent.train)(key, data, prior)
    given = arrays.problem_arrays(problem)
    out = {}
    for tau, test in given.tests.items():
        n, width, d = test.x.shape
        logits = agent.enn.apply(state, test.x.reshape(-1, d), 0).reshape(n, 1, width, -1)
        out[tau] = np.repeat(np.asarray(jax.nn.softmax(logits)), problem.num_samples, axis=1)
    return out


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.parametrize("problem", [PROBLEM, PAPER], ids=["dyadic", "iid"])
def test_the_array_path_gives_the_run_paths_rows(problem):
    """The same trained network scored both ways: the same estimate, standard error,
    accuracy and ECE (float32 rounding of two programs), and every key column equal."""
    spec = agents.get_agent("mlp")
    config = dataclasses.replace(spec.default, num_steps=50)
    jax_rows = leaderboard.run_agent(functools.partial(spec.make, config), [problem], "mlp",
                                     config=config, progress=False)
    array_rows = arrays.score_predictions(problem, _mlp_predictions(problem, spec, config),
                                          "mlp", config)
    assert len(jax_rows) == len(array_rows) == 2
    for ours, theirs in zip(sorted(array_rows, key=lambda r: r.tau),
                            sorted(jax_rows, key=lambda r: r.tau)):
        assert ours.status == theirs.status == "ok", ours.error
        for name in ("agent", "config_hash", "problem_id", "problem_hash", "tau", "num_test",
                     "num_samples", "estimator", "agent_seed", "metric"):
            assert getattr(ours, name) == getattr(theirs, name), name
        for name in ("kl", "kl_stderr", "accuracy", "ece"):
            assert getattr(ours, name) == pytest.approx(getattr(theirs, name), rel=1e-4,
                                                        abs=1e-6), name


def test_dyadic_inputs_are_few_and_index_the_tau_inputs():
    """kappa = 2: at most 2 distinct inputs per tau-sample, then the out-of-distribution
    one; the index rebuilds the tau inputs the evaluator scores."""
    given = arrays.problem_arrays(PROBLEM)
    test = given.tests[10]
    assert test.x.shape == (50, 3, PROBLEM.input_dim) and test.index.shape == (50, 10)
    assert test.index.min() >= 0 and test.index.max() <= 1
    assert given.x_train.shape == (PROBLEM.num_train, PROBLEM.input_dim)
    assert given.tests[1].x.shape == (50, 2, PROBLEM.input_dim)


def test_member_draws_pick_one_member_per_sample_afresh_per_tau_sample():
    members = np.arange(3 * 4 * 2 * 2, dtype=np.float32).reshape(3, 4, 2, 2)
    drawn = arrays.member_draws(members, num_samples=50, seed=1)
    assert drawn.shape == (4, 50, 2, 2)
    for n in range(4):
        for m in range(50):
            assert any(np.array_equal(drawn[n, m], members[e, n]) for e in range(3))
    assert len({tuple(drawn[n, :, 0, 0]) for n in range(4)}) > 1  # not the same draws


@pytest.mark.parametrize("bad, message", [
    ({10: np.ones((50, 20, 3, 2)) / 2}, r"no predictions at tau \[1\]"),
    ({1: np.ones((50, 20, 3, 2)) / 2, 10: np.ones((50, 20, 3, 2)) / 2},
     r"predictions of shape \(50, 20, 3, 2\); expected \(50, 20, 2, 2\)"),
    ({1: np.ones((50, 20, 2, 2)), 10: np.ones((50, 20, 3, 2)) / 2}, "must sum to 1"),
])
def test_bad_predictions_are_one_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        arrays.score_predictions(PROBLEM, bad, "mine")


def test_arrays_go_through_files(tmp_path):
    """write_problem_arrays -> a model's predictions saved beside -> read_predictions."""
    (path,) = arrays.write_problem_arrays([PROBLEM], tmp_path / "in")
    with np.load(path) as saved:
        assert saved["x_tau10"].shape == (50, 3, PROBLEM.input_dim)
        uniform = {f"probs_tau{tau}": np.full((50, 20, saved[f"x_tau{tau}"].shape[1], 2), 0.5)
                   for tau in (1, 10)}
    (tmp_path / "out").mkdir()
    np.savez(tmp_path / "out" / "classification_65.npz", **uniform)
    predictions, kind = arrays.read_predictions(PROBLEM, tmp_path / "out")
    assert kind == "probs" and sorted(predictions) == [1, 10]
    rows = arrays.score_predictions(PROBLEM, predictions, "uniform_by_hand", kind=kind)
    # Uniform: tau times (log 2 - the environment's entropy), positive; ten times at tau 10
    # up to the estimates' noise (4 standard errors).
    one, ten = sorted(rows, key=lambda r: r.tau)
    assert one.kl > 0 and abs(ten.kl - 10 * one.kl) < 4 * (ten.kl_stderr + 10 * one.kl_stderr)
