"""The regression evaluator: the exact posterior (the oracle agent) scores its closed-form
expected KL, a whole problem runs with an honest standard error, and chunks bound the
distinct networks held at once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base
from neural_testbed.agents import oracle_gp
from neural_testbed.evaluation import regression
from neural_testbed.generative import gp_regression


def _closed_form_kl(state, x, f, noise_variance):
    """KL(N(f, s^2 I) || N(mu, Sigma + s^2 I)) at one test sample's inputs."""
    mean, cov = oracle_gp.posterior(state, x)
    n = x.shape[0]
    total = cov + noise_variance * jnp.eye(n)
    inverse = jnp.linalg.inv(total)
    d = f - mean
    return 0.5 * (noise_variance * jnp.trace(inverse) + d @ inverse @ d - n
                  + jnp.linalg.slogdet(total)[1] - n * jnp.log(noise_variance))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.parametrize("tau, estimator", [(1, "monte_carlo"), (10, "gaussian")])
def test_the_oracle_scores_its_closed_form_kl(tau, estimator):
    """Per test sample, the estimate's term minus the closed-form KL at its inputs has mean 0;
    tolerance: 4 standard errors of that difference over the N samples (seeds fixed)."""
    problem = gp_regression.GPRegressionProblem(
        "regression/0", input_dim=2, num_train=20, seed=1, num_pool=200, num_test=800,
        num_samples=2000, taus=(tau,))
    data, prior, env = problem.instance()
    agent = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(), base.Shapes.of(problem))
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    test = problem.sample_test(jax.random.key(5), env, tau)
    evaluate = regression.make_regression_evaluator(agent.enn, tau, 1, problem.num_samples,
                                                    estimator)

    def term(key, x, y, log_lik):  # one test sample at a time: its own term
        one = test._replace(x=x[None], y=y[None], log_likelihood=log_lik[None])
        return evaluate(key, state, one).kl

    def closed_form(x):
        on_pool = jnp.all(x[:, None, :] == env.pool_x[None], -1)
        f = (on_pool * env.pool_f).sum(-1) / on_pool.sum(-1)
        return _closed_form_kl(state, x, f, env.noise_variance)

    terms = jax.jit(jax.vmap(term))(jax.random.split(jax.random.key(9), problem.num_test),
                                    test.x, test.y, test.log_likelihood)
    expected = jax.jit(jax.vmap(closed_form))(test.x)
    difference = np.asarray(terms, np.float64) - np.asarray(expected, np.float64)
    stderr = difference.std(ddof=1) / np.sqrt(len(difference))
    assert abs(difference.mean()) < 4 * stderr, (difference.mean(), stderr)
    assert np.asarray(expected).mean() > 0.05 * tau  # T = 20 points leave the oracle uncertain


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_evaluator_runs_the_whole_problem_and_its_stderr_covers_the_spread():
    problem = gp_regression.GPRegressionProblem(
        "regression/0", input_dim=2, num_train=20, seed=2, num_pool=200, num_test=200,
        num_samples=200, taus=(10,))
    data, prior, env = problem.instance()
    agent = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(), base.Shapes.of(problem))
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    test = problem.sample_test(jax.random.key(5), env, 10)
    evaluate = jax.jit(regression.make_regression_evaluator(agent.enn, 10, 200, 200))
    result = evaluate(jax.random.key(1), state, test)
    assert bool(result.logits_valid) and int(result.num_clipped) == 0
    assert np.isfinite(float(result.kl)) and float(result.kl_stderr) > 0
    # A mistaken agent (the posterior mean shifted by 0.3) scores worse.
    shifted = base.ENN(lambda s, x, k: agent.enn.apply(s, x, k) + 0.3, agent.enn.sample_index)
    worse = jax.jit(regression.make_regression_evaluator(shifted, 10, 200, 200))(
        jax.random.key(1), state, test)
    assert float(worse.kl) > float(result.kl) + 4 * float(worse.kl_stderr)


def test_chunks_bound_the_distinct_networks_of_a_continuous_index():
    """bbb or a hypermodel holds one set of weights per belief sample: at most 2^13 networks
    per chunk (the classification evaluator's bound); an ensemble's members are evaluated
    once per test sample, so only the function values bound its chunks."""
    for tau in (1, 100):
        chunk = regression._test_samples_per_chunk(1000, 1000, tau, None)
        assert 1000 % chunk == 0 and chunk * 1000 <= 2**13, (tau, chunk)
    assert regression._test_samples_per_chunk(1000, 1000, 1, 100) == 1000  # 10^5 values
    assert regression._test_samples_per_chunk(1000, 1000, 100, 100) == 100  # 10^6 values
