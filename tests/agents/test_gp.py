"""The gp agent: with the environment's kernel and no fitting it is the oracle; fitting
recovers a known lengthscale (its contract is in test_contract.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, gaussian_process, kernels, leaderboard
from neural_testbed.agents import gp, oracle_gp

# The contract test's regression problem (d = 10, T = 10), so its programs compile once.
PROBLEM = leaderboard.get_sweep("regression-quick")["regression/60"]


def test_the_environments_kernel_unfitted_is_the_oracle():
    """relu_nngp at the environment's variances, plus the ridge the oracle's prior includes,
    conditioned on the same pairs and noise: the same posterior, and the same draw per key."""
    data, prior, env = PROBLEM.instance()
    shapes = base.Shapes.of(PROBLEM)
    agent = gp.make_gp_agent(gp.GPConfig(fit=False), shapes)
    oracle = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(), shapes)
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    oracle_state = jax.jit(oracle.train)(jax.random.key(0), data, prior)
    x = np.asarray(env.pool_x)[:50]
    mean, cov = jax.jit(gp.posterior)(state, x)
    oracle_mean, oracle_cov = jax.jit(oracle_gp.posterior)(oracle_state, x)
    np.testing.assert_allclose(mean, oracle_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cov, oracle_cov, rtol=1e-5, atol=1e-6)
    key = jax.random.key(3)
    np.testing.assert_allclose(jax.jit(agent.enn.apply)(state, x, key),
                               jax.jit(oracle.enn.apply)(oracle_state, x, key), atol=1e-5)
    assert {k: float(v) for k, v in gp.hyperparameters(state).items()} == pytest.approx(
        {"weight_variance": 1.0, "bias_variance": 1.0})


@jax.jit
def _negative_log_evidence(log_params, data, noise_variance):
    kernel = functools.partial(kernels.rbf_kernel, **jax.tree.map(jnp.exp, log_params))
    return -gaussian_process.log_marginal_likelihood(kernel, data, noise_variance)


def test_fitting_recovers_an_rbf_lengthscale():
    """T = 200 pairs in d = 2 from an RBF GP (signal variance 1, lengthscale 0.5, noise 0.01).
    The fitted log lengthscale is within 4 standard errors of the truth, the standard error
    from the expected Fisher information at the truth, I_ij = tr(K^-1 dK_i K^-1 dK_j) / 2 over
    the log hyperparameters (the maximum-likelihood estimator's asymptotic spread); and the fit
    is the maximum: its evidence is at least the truth's (seeds fixed)."""
    d, num_train, noise = 2, 200, 0.01
    truth = {"signal_variance": np.float32(np.log(1.0)), "lengthscale": np.float32(np.log(0.5))}

    @jax.jit
    def draw(key):  # the inputs, f from the GP, the noisy targets: one program
        kernel = functools.partial(kernels.rbf_kernel, signal_variance=1.0, lengthscale=0.5)
        x_key, f_key, noise_key = jax.random.split(key, 3)
        x = jax.random.normal(x_key, (num_train, d))
        chol = jnp.linalg.cholesky(gaussian_process.prior_covariance(kernel, x, x))
        f = chol @ jax.random.normal(f_key, (num_train,))
        return base.Data(x, f + np.sqrt(noise) * jax.random.normal(noise_key, (num_train,)))

    data = draw(jax.random.key(7))
    x = data.x
    prior = base.RegressionPriorKnowledge(input_dim=d, kernel="relu_nngp",
                                          noise_variance=jnp.float32(noise))
    state = jax.jit(gp.make_gp_agent(gp.GPConfig(kernel="rbf"), base.Shapes(d, 1)).train)(
        jax.random.key(0), data, prior)

    def covariance(log_params):
        kernel = functools.partial(kernels.rbf_kernel, **jax.tree.map(jnp.exp, log_params))
        return gaussian_process.prior_covariance(kernel, x, x) + noise * jnp.eye(num_train)

    names = ("signal_variance", "lengthscale")
    cov, grads = jax.jit(lambda p: (covariance(p), jax.jacfwd(covariance)(p)))(truth)
    k_inv = np.linalg.inv(np.asarray(cov, np.float64))
    products = [k_inv @ np.asarray(grads[n], np.float64) for n in names]
    fisher = np.array([[0.5 * np.trace(a @ b) for b in products] for a in products])
    stderr = np.sqrt(np.linalg.inv(fisher)[1, 1])
    error = float(state.log_hyperparameters["lengthscale"]) - float(truth["lengthscale"])
    assert abs(error) < 4 * stderr, (error, stderr)
    assert stderr < 0.1  # the check is sharp: within about 40% of the truth
    fitted = _negative_log_evidence(state.log_hyperparameters, data, noise)
    # 0.01 nats: far above float32 rounding of a log-density of this size (about 1e-4).
    assert fitted < _negative_log_evidence(truth, data, noise) + 0.01


def test_bad_configs_are_refused_with_the_value_and_what_is_allowed():
    with pytest.raises(ValueError, match="kernel must be one of 'relu_nngp', 'rbf', got 'matern'"):
        gp.GPConfig(kernel="matern")
    with pytest.raises(ValueError, match="lengthscale must be > 0, got 0"):
        gp.GPConfig(lengthscale=0)
    with pytest.raises(ValueError, match="num_steps must be >= 1, got 0"):
        gp.GPConfig(num_steps=0)
    with pytest.raises(ValueError, match="fit must be true or false, got 'yes'"):
        gp.GPConfig(fit="yes")


def test_registered_for_regression_with_a_sweep_of_each_kernel_fitted_or_not():
    spec = agents.get_agent("gp")
    assert spec.targets == ("regression",) and spec.default == gp.GPConfig()
    sweep = spec.sweep()
    assert len(set(sweep)) == 4 and {(c.kernel, c.fit) for c in sweep} == {
        ("relu_nngp", True), ("relu_nngp", False), ("rbf", True), ("rbf", False)}
