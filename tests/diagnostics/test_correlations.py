"""Metacorrelation known answers: the exact posterior scores 1, a data-blind agent that
samples the prior scores the prior's metacorrelation, a single model is not applicable."""

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base, diagnostics
from neural_testbed.agents import oracle_gp
from neural_testbed.generative import gp_regression
from neural_testbed.likelihood import regression

PROBLEM = gp_regression.GPRegressionProblem(
    "regression/0", input_dim=2, num_train=10, seed=3, num_pool=60, num_probes=30,
    num_test=20, num_samples=1000, taus=(1,))


def _diagnostics(agent, key):
    data, prior, env = PROBLEM.instance()
    state = agent.train(jax.random.key(0), data, prior)
    test = PROBLEM.sample_test(jax.random.key(1), env, 1)
    evaluate = jax.jit(regression.make_regression_evaluator(agent.enn, 1, 20, 1000))
    return evaluate(key, state, test).diagnostics, env


def _prior_agent():
    """Samples f from the environment's prior at the inputs of each call: ignores the data."""
    def apply(state, x, key):
        del state
        cov = gp_regression.prior_covariance("relu_nngp", x, x)
        values, vectors = jnp.linalg.eigh(cov)
        return (vectors * jnp.sqrt(jnp.clip(values, 0.0)) @ jax.random.normal(
            key, (x.shape[0],)))[:, None]
    return base.Agent(lambda key, data, prior: (), base.ENN(apply, lambda key: key))


def _spread(agent):
    """Metacorrelations of 8 independent sets of belief samples: their mean and its SE."""
    values = np.array([float(_diagnostics(agent, jax.random.key(10 + i))[0].metacorrelation)
                       for i in range(8)])
    return values.mean(), values.std(ddof=1) / np.sqrt(len(values))


def test_the_exact_posterior_has_metacorrelation_one():
    # Sample correlations from M = 1000 draws are off by about 1 / sqrt(M) per pair,
    # so the metacorrelation is just under 1; the bound is 4 SE of the 8 repeats below 1,
    # allowing the estimate's O(1/M) downward bias.
    mean, stderr = _spread(oracle_gp.make_oracle_gp_agent())
    assert 1 - mean < 4 * stderr + 0.005, (mean, stderr)


def test_a_data_blind_agent_scores_the_priors_metacorrelation():
    data, prior, env = PROBLEM.instance()
    probes = env.pool_x[:PROBLEM.num_probes]
    prior_correlation = gp_regression.correlation(
        gp_regression.prior_covariance("relu_nngp", probes, probes))
    rows, cols = np.triu_indices(PROBLEM.num_probes, k=1)
    exact = np.corrcoef(np.asarray(prior_correlation)[rows, cols],
                        np.asarray(env.probe_correlation)[rows, cols])[0, 1]
    mean, stderr = _spread(_prior_agent())
    assert abs(mean - exact) < 4 * stderr + 0.005, (mean, exact, stderr)
    assert exact < 0.99  # the check can fail: the data change the correlations


def test_a_single_model_is_not_applicable_rather_than_zero():
    single = base.Agent(lambda key, data, prior: (),
                        base.ENN(lambda s, x, i: jnp.sin(x[:, :1]), lambda key: key))
    d, _ = _diagnostics(single, jax.random.key(0))
    assert np.isnan(float(d.metacorrelation))
    record = diagnostics.as_regression_record(d)
    assert record == {"metacorrelation": None, "predictive_variance": 0.0}
