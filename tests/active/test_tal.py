"""The TAL loop: the oracle's BatchMIG beats random selection, the prediction model's
score and the selection covariance against direct computations, rounds that query
fresh candidates, one-line refusals."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, gaussian_process
from neural_testbed.active import tal
from neural_testbed.agents import mlp, oracle_gp
from neural_testbed.generative import gp_regression
from neural_testbed.leaderboard import problems as problems_lib

# Wang et al.'s synthetic setting scaled down for speed: d = 5, T = 5 d, 200 test
# inputs (the probes) and 100 pool inputs after them.
PROBLEMS = [gp_regression.GPRegressionProblem(f"tal/{seed}", input_dim=5, num_train=25,
                                              seed=seed, num_pool=300, num_probes=200,
                                              taus=(1,))
            for seed in range(8)]


@pytest.fixture(scope="module")
def oracle_results():
    settings = tal.TALSettings(num_rounds=1, batch_size=7)
    oracle = functools.partial(oracle_gp.make_oracle_gp_agent, oracle_gp.OracleGPConfig())
    return tal.run_tal(oracle, PROBLEMS, settings)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_batchmig_with_the_oracle_as_selection_model_beats_random_selection(oracle_results):
    # Paired by problem (same labels, same prediction model): the difference must exceed
    # 2 standard errors of its mean over the 8 problems (a one-sided 5% test, t with 7 df
    # needs 1.9). Measured: +0.10 +- 0.03 after one round of 7 queries.
    mean, stderr = tal.paired_difference(oracle_results, "batchmig", "random")
    assert mean > 2 * stderr, (mean, stderr)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_every_method_starts_from_the_same_score_and_queries_fresh_candidates(oracle_results):
    for result in oracle_results:
        starts = {float(lls[0]) for lls in result.log_likelihood.values()}
        assert len(starts) == 1
        for method, batches in result.selected.items():
            assert batches.shape == (1, 7), method
            assert len(set(batches.ravel().tolist())) == 7
            assert batches.min() >= 0 and batches.max() < 100
        np.testing.assert_array_equal(result.num_queried, [0, 7])


def test_the_oracles_metacorrelation_is_one(oracle_results):
    # Its selection covariance is the exact posterior, whose correlations are the
    # reference's up to float32 rounding.
    for result in oracle_results:
        assert abs(result.metacorrelation - 1) < 1e-4, result.metacorrelation


def test_the_score_is_the_exact_posteriors_mean_marginal_log_likelihood():
    data, prior, env = PROBLEMS[0].instance()
    x, f = np.asarray(env.pool_x, np.float64)[:40], np.asarray(env.pool_f, np.float64)[:40]
    y = f + 0.1 * np.sin(np.arange(40))  # any labels
    noise = float(prior.noise_variance)
    xt, yt = np.asarray(data.x, np.float64), np.asarray(data.y, np.float64)
    # The environment's prior covariance of the training and pool inputs together, in one
    # program, then float64: the pool inputs are not training inputs, so each block is the
    # covariance of its two input sets.
    z = np.concatenate([xt, x]).astype(np.float32)
    joint = np.asarray(jax.jit(gaussian_process.prior_covariance, static_argnums=0)(
        "relu_nngp", z, z), np.float64)
    t = len(xt)
    k_train, k_cross, k_pool = joint[:t, :t], joint[t:, :t], joint[t:, t:]
    gram_inverse = np.linalg.inv(k_train + noise * np.eye(t))
    mean = k_cross @ gram_inverse @ yt
    variance = np.diag(k_pool - k_cross @ gram_inverse @ k_cross.T) + noise
    expected = np.mean(-0.5 * ((y - mean) ** 2 / variance + np.log(2 * np.pi * variance)))
    score = tal.prediction_log_likelihood("relu_nngp", data, noise, x.astype(np.float32),
                                          y.astype(np.float32))
    np.testing.assert_allclose(float(score), expected, rtol=2e-3)


def _line_enn(slopes=None):
    """Belief samples f(x) = a x_0: members of slopes ``slopes``, or a ~ N(0, 1) from a key."""
    if slopes is not None:
        slopes = jnp.asarray(slopes)
        return base.ENN(lambda state, x, i: slopes[i] * x[:, :1], lambda key: jax.random.randint(
            key, (), 0, len(slopes)), num_indices=len(slopes))
    return base.ENN(lambda state, x, key: jax.random.normal(key) * x[:, :1], lambda key: key)


def test_the_selection_covariance_is_the_members_or_the_samples():
    x = np.array([[1.0, 0.0], [2.0, 5.0], [-1.0, 1.0]], np.float32)
    outer = np.outer(x[:, 0], x[:, 0])
    # An ensemble of 4 members: exactly its members' (population) covariance.
    members = tal._covariance_program(_line_enn([0.0, 1.0, 2.0, 5.0]), 1000)
    np.testing.assert_allclose(members(jax.random.key(0), None, x),
                               np.var([0.0, 1.0, 2.0, 5.0]) * outer, rtol=1e-5)
    # Random indices: M = 4000 samples of a ~ N(0, 1); the sample variance of a has
    # standard error sqrt(2 / M), tolerance 4 of them.
    sampled = np.asarray(tal._covariance_program(_line_enn(), 4000)(jax.random.key(1), None, x))
    scale = float(sampled[0, 0])
    assert abs(scale - 1) < 4 * math.sqrt(2 / 4000), scale
    np.testing.assert_allclose(sampled, scale * outer, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_single_model_takes_the_pool_in_order_and_has_no_metacorrelation():
    # Its covariance is 0: every criterion ties at 0 and takes the lowest free indices,
    # a uniformly random choice since the pool inputs are i.i.d.; it is retrained each round.
    problem = dataclasses.replace(PROBLEMS[0], num_pool=230)
    build = functools.partial(mlp.make_mlp_agent, mlp.MLPConfig(num_steps=5))
    settings = tal.TALSettings(num_rounds=3, batch_size=4, methods=("batchmig", "mig", "tig"))
    (result,) = tal.run_tal(build, [problem], settings)
    for method, batches in result.selected.items():
        np.testing.assert_array_equal(batches, np.arange(12).reshape(3, 4), err_msg=method)
    assert math.isnan(result.metacorrelation)
    assert math.isnan(tal.mean_metacorrelation([result])[0])


def test_summaries_are_means_and_standard_errors_over_problems(oracle_results):
    records = tal.summarise(oracle_results)
    final = [r.log_likelihood["mig"][1] for r in oracle_results]
    assert [r["queried"] for r in records] == [0, 7]
    np.testing.assert_allclose(records[1]["mig"], np.mean(final))
    np.testing.assert_allclose(records[1]["mig_se"], np.std(final, ddof=1) / np.sqrt(8))


@pytest.mark.parametrize("settings, message", [
    (dict(num_rounds=15, batch_size=7), "100 pool inputs after its 200 test inputs"),
])
def test_a_pool_too_small_for_the_rounds_is_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        tal.check_problems(PROBLEMS[:1], tal.TALSettings(**settings))


@pytest.mark.parametrize("fields, message", [
    (dict(methods=("batchmig", "bald")), "distinct names among batchmig, tig, mig, random"),
    (dict(methods=("tig", "tig")), "distinct names"),
    (dict(num_rounds=0), r"num_rounds \(--rounds\) must be an integer >= 1, got 0"),
])
def test_bad_settings_are_refused_in_one_line(fields, message):
    with pytest.raises(ValueError, match=message):
        tal.TALSettings(**fields)


def test_a_classification_problem_is_refused():
    problem = next(iter(problems_lib.get_sweep("smoke").values()))
    with pytest.raises(ValueError, match="tal needs regression problems"):
        tal.check_problems([problem], tal.TALSettings())


def test_problems_are_picked_in_seed_order_or_by_id():
    sweep = problems_lib.get_sweep("regression-wang")
    first = tal.pick_problems(sweep, "3")
    assert [(p.input_dim, p.seed) for p in first] == [(1, 0), (5, 0), (10, 0)]
    assert [p.problem_id for p in tal.pick_problems(sweep, "regression_wang/12")] == [
        "regression_wang/12"]
    with pytest.raises(ValueError, match="unknown: regression_wang/99"):
        tal.pick_problems(sweep, "regression_wang/99")
    with pytest.raises(ValueError, match="expected from 1 to 30"):
        tal.pick_problems(sweep, "31")


def test_regression_wang_has_500_test_and_200_pool_inputs():
    for problem in problems_lib.get_sweep("regression-wang").values():
        assert (problem.num_probes, problem.num_pool - problem.num_probes) == (500, 200)
        assert problem.num_train == 5 * problem.input_dim and problem.noise_variance == 0.01
