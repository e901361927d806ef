"""Metacorrelation known answers: the exact posterior scores 1, a data-blind agent that
samples the prior scores the prior's metacorrelation, a single model is not applicable.
The row's XLL (the oracle the reference): the oracle's is its own joint log-likelihood, a
single model's that of independent targets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from neural_testbed import base, diagnostics, gaussian_process
from neural_testbed.agents import oracle_gp
from neural_testbed.evaluation import regression
from neural_testbed.generative import gp_regression

PROBLEM = gp_regression.GPRegressionProblem(
    "regression/0", input_dim=2, num_train=10, seed=3, num_pool=60, num_probes=30,
    num_test=20, num_samples=1000, taus=(1,))
ORACLE = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(), base.Shapes.of(PROBLEM))


def _diagnostics(agent, seeds):
    """The agent's diagnostics from the evaluation key of each seed, and the environment.

    Training (key 0) and the test draw (key 1) do not depend on the seed: done once, jitted."""
    data, prior, env = PROBLEM.instance()
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    test = PROBLEM.sample_test(jax.random.key(1), env, 1)
    evaluate = jax.jit(regression.make_regression_evaluator(agent.enn, 1, 20, 1000))
    return [evaluate(jax.random.key(seed), state, test).diagnostics for seed in seeds], env


def _prior_agent():
    """Samples f from the environment's prior at the inputs of each call: ignores the data."""
    def apply(state, x, key):
        del state
        cov = gaussian_process.prior_covariance("relu_nngp", x, x)
        values, vectors = jnp.linalg.eigh(cov)
        return (vectors * jnp.sqrt(jnp.clip(values, 0.0)) @ jax.random.normal(
            key, (x.shape[0],)))[:, None]
    return base.Agent(lambda key, data, prior: (), base.ENN(apply, lambda key: key))


def _spread(agent):
    """Metacorrelations of 8 independent sets of belief samples: their mean and its SE."""
    values = np.array([float(d.metacorrelation) for d in _diagnostics(agent, range(10, 18))[0]])
    return values.mean(), values.std(ddof=1) / np.sqrt(len(values))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_exact_posterior_has_metacorrelation_one():
    # Sample correlations from M = 1000 draws are off by about 1 / sqrt(M) per pair,
    # so the metacorrelation is just under 1; the bound is 4 SE of the 8 repeats below 1,
    # allowing the estimate's O(1/M) downward bias.
    mean, stderr = _spread(ORACLE)
    assert 1 - mean < 4 * stderr + 0.005, (mean, stderr)


def test_a_data_blind_agent_scores_the_priors_metacorrelation():
    data, prior, env = PROBLEM.instance()
    probes = np.asarray(env.pool_x)[:PROBLEM.num_probes]
    prior_correlation = jax.jit(lambda x: gaussian_process.correlation(
        gaussian_process.prior_covariance("relu_nngp", x, x)))(probes)
    rows, cols = np.triu_indices(PROBLEM.num_probes, k=1)
    exact = np.corrcoef(np.asarray(prior_correlation)[rows, cols],
                        np.asarray(env.probe_correlation)[rows, cols])[0, 1]
    mean, stderr = _spread(_prior_agent())
    assert abs(mean - exact) < 4 * stderr + 0.005, (mean, exact, stderr)
    assert exact < 0.99  # the check can fail: the data change the correlations


def _oracle_reference(env):
    """The exact posterior's mean and covariance of the probes' targets."""
    scale = np.sqrt(np.asarray(env.probe_variance, np.float64))
    covariance = (np.asarray(env.probe_correlation, np.float64) * np.outer(scale, scale)
                  + float(env.noise_variance) * np.eye(len(scale)))
    return np.asarray(env.probe_mean, np.float64), covariance


def _oracle_batches(covariance, size=5):
    scale = np.sqrt(np.diag(covariance))
    strength = np.abs(covariance / np.outer(scale, scale))
    np.fill_diagonal(strength, np.inf)
    return np.argsort(-strength, axis=1, kind="stable")[:, :size]


def test_a_single_model_has_no_metacorrelation_and_the_xll_of_independent_targets():
    """Its targets' correlation matrix is the identity (noise only): its XLL is the mean over
    the oracle's batches of the targets' log-densities under the oracle's marginals."""
    single = base.Agent(lambda key, data, prior: (),
                        base.ENN(lambda s, x, i: jnp.sin(x[:, :1]), lambda key: key))
    (d,), env = _diagnostics(single, [0])
    assert np.isnan(float(d.metacorrelation))
    mean, covariance = _oracle_reference(env)
    y = np.asarray(env.probe_y, np.float64)
    marginal = stats.norm(mean, np.sqrt(np.diag(covariance))).logpdf(y)
    expected = np.mean([marginal[b].sum() for b in _oracle_batches(covariance)])
    record = diagnostics.as_regression_record(d)
    assert record["metacorrelation"] is None and record["predictive_variance"] == 0.0
    assert record["xll"] == pytest.approx(expected, rel=1e-5)


def test_the_exact_posteriors_xll_is_its_own_joint_log_likelihood():
    """With the agent's correlations the oracle's, XLL is the oracle's joint log-likelihood
    of the batches. From M = 1000 samples: 8 independent repeats, 4 standard errors of their
    mean, plus 0.01 for the sample correlations' O(1/M) bias."""
    mean, covariance = _oracle_reference(PROBLEM.instance().env)
    y = np.asarray(PROBLEM.instance().env.probe_y, np.float64)
    exact = np.mean([stats.multivariate_normal(mean[b], covariance[np.ix_(b, b)]).logpdf(y[b])
                     for b in _oracle_batches(covariance)])
    agent = ORACLE
    values = np.array([float(d.xll) for d in _diagnostics(agent, range(20, 28))[0]])
    stderr = values.std(ddof=1) / np.sqrt(len(values))
    assert abs(values.mean() - exact) < 4 * stderr + 0.01, (values.mean(), exact, stderr)
