"""The reference's current protocol: dyadic (polyadic) test inputs, tau in {1, 10}, input
dims up to 100, and its rule for which estimator runs at which tau."""

import dataclasses
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, generative, leaderboard
from neural_testbed.likelihood import kl


@functools.cache
def _env():
    """A 3-d environment, drawn on first use (every test process collects every file)."""
    with jax.ensure_compile_time_eval():  # concrete, even if first asked for inside a trace
        return generative.sample_environment(jax.random.key(0), temperature=0.1, input_dim=3)


@pytest.mark.parametrize("kappa", [1, 2, 3])
def test_a_tau_sample_holds_kappa_distinct_inputs(kappa):
    """Each tau-sample's inputs are drawn from its own kappa anchors, so it holds at most
    kappa distinct inputs, and exactly kappa unless the tau draws missed an anchor: with
    tau = 10 that has probability p = 1 - sum_j (-1)^j C(kappa, j) (1 - j/kappa)^tau
    (inclusion-exclusion); the share over N = 2000 tau-samples is within 5 binomial
    standard errors of 1 - p."""
    num_test, tau = 2000, 10
    test = generative.sample_test_data(jax.random.key(1), _env(), num_test, tau, kappa)
    x = np.asarray(test.x)
    assert x.shape == (num_test, tau, 3)
    distinct = np.array([len(np.unique(sample, axis=0)) for sample in x])
    assert distinct.max() <= kappa
    exact = sum((-1) ** j * math.comb(kappa, j) * (1 - j / kappa) ** tau
                for j in range(kappa + 1))
    se = np.sqrt(exact * (1 - exact) / num_test) or 1 / num_test
    assert abs((distinct == kappa).mean() - exact) <= 5 * se + 1e-12


def test_anchors_are_standard_normal_and_labels_independent_at_repeated_inputs():
    """The anchors are N(0, I) (mean within 5 standard errors of 0, variance within 5 of
    1, over 2000 x 2 x 3 values); a tau-sample's log-likelihood is the sum of its
    labels' log-probabilities, each label drawn on its own even where inputs repeat."""
    test = generative.sample_test_data(jax.random.key(2), _env(), 2000, 10, 2)
    anchors = np.unique(np.asarray(test.x).reshape(-1, 3), axis=0)
    n = anchors.size
    assert abs(anchors.mean()) < 5 / np.sqrt(n) and abs(anchors.var() - 1) < 5 * np.sqrt(2 / n)
    log_probs = jax.nn.log_softmax(generative.environment_logits(_env(), test.x))
    own = jnp.take_along_axis(log_probs, test.y[..., None], axis=-1)[..., 0].sum(-1)
    np.testing.assert_allclose(test.log_likelihood, own, rtol=1e-5)
    # At a repeated input both labels occur: the labels are not copied with the inputs.
    x, y = np.asarray(test.x), np.asarray(test.y)
    same_input = np.all(x[:, :, None] == x[:, None, :], axis=-1)
    differ = (y[:, :, None] != y[:, None, :]) & same_input
    assert differ.any()


def test_the_estimator_at_each_tau_follows_each_protocol():
    """The reference the paper ran: Monte Carlo for tau < 10; its current version: tau <= 10."""
    assert [kl.choose_estimator(t) for t in (1, 9, 10, 100)] == [
        "monte_carlo", "monte_carlo", "partition", "partition"]
    assert [kl.choose_estimator(t, "auto", 10) for t in (1, 10, 11)] == [
        "monte_carlo", "monte_carlo", "partition"]
    assert kl.choose_estimator(10, "partition", 10) == "partition"  # asked for: as asked


def test_the_classification_sweep_is_the_references_in_its_order():
    """f2090d1's `classification_sweep`: for d in (2, 10, 100), data ratio in (1, 10, 100,
    1000), temperature in (0.01, 0.1, 0.5), 5 seeds; T = ratio x d; N = M = 1000; dyadic
    test inputs; tau in {1, 10}; Monte Carlo at tau = 10."""
    sweep = leaderboard.get_sweep("classification")
    grid = list(itertools.product((2, 10, 100), (1, 10, 100, 1000), (0.01, 0.1, 0.5),
                                  range(5)))
    assert list(sweep) == [f"classification/{i}" for i in range(180)]
    for problem, (d, ratio, temperature, seed) in zip(sweep.values(), grid):
        assert (problem.input_dim, problem.num_train, problem.temperature, problem.seed) == (
            d, ratio * d, temperature, seed)
        assert (problem.taus, problem.kappa, problem.max_monte_carlo_tau) == ((1, 10), 2, 10)
        assert (problem.num_test, problem.num_samples, problem.num_classes) == (1000, 1000, 2)
        assert problem.env_hidden == (50, 50)
    quick = leaderboard.get_sweep("classification-quick")
    assert set(quick) <= set(sweep) and len(quick) == 12
    assert {p.input_dim for p in quick.values()} == {2, 10, 100}


def test_the_new_fields_leave_every_earlier_problem_as_it_was():
    """kappa and max_monte_carlo_tau at their earlier values hash as before (the published
    rows' hashes are checked in test_baselines.py); other values are other problems."""
    problem = leaderboard.get_sweep("paper")["classification_2d/97"]
    same = dataclasses.replace(problem, kappa=None, max_monte_carlo_tau=9)
    assert base.definition_hash(same) == base.definition_hash(problem)
    assert base.definition_hash(dataclasses.replace(problem, kappa=2)) != base.definition_hash(
        problem)
    assert base.definition_hash(
        dataclasses.replace(problem, max_monte_carlo_tau=10)) != base.definition_hash(problem)
    # The environment and training data do not depend on how the test inputs are drawn.
    assert dataclasses.replace(problem, kappa=2).key_seed == problem.key_seed


@pytest.mark.parametrize("kappa", [0, 1.5, "2"])
def test_a_bad_kappa_is_one_clear_error(kappa):
    problem = leaderboard.get_sweep("paper")["classification_2d/97"]
    with pytest.raises(ValueError, match=r"kappa must be None .* got"):
        dataclasses.replace(problem, kappa=kappa)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_environment_scores_zero_on_the_new_sweep(environment_agent):
    """An agent that is the environment scores d_KL 0 (to float32 rounding) at tau = 1 and
    10 on a problem of each input dimension, through the run path (N = M = 100 here to
    keep the test short: the estimate is exact at any N, M for a one-member agent)."""
    quick = leaderboard.get_sweep("classification-quick")
    problems = [dataclasses.replace(next(p for p in quick.values() if p.input_dim == d),
                                    num_test=100, num_samples=100) for d in (2, 10, 100)]
    for problem in problems:
        agent = environment_agent(problem)
        rows = leaderboard.run_agent(lambda shapes: agent, [problem], "oracle", progress=False)
        assert sorted(r.tau for r in rows) == [1, 10]
        assert all(r.status == "ok" and abs(r.kl) < 1e-5 for r in rows), [
            (r.tau, r.kl, r.error) for r in rows]
