"""The svgp agent: its ELBO against the exact GP's evidence, its KL, its joint draws,
configs and sweep, and a run through the leaderboard against the uniform baseline."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import svgp


def _rbf(x1, x2, signal_variance, lengthscale):
    sq = ((x1[:, None, :] - x2[None, :, :]) / lengthscale) ** 2
    return signal_variance * np.exp(-0.5 * sq.sum(-1))


def _scale_of(lower):
    """The unconstrained form of lower-triangular ``L`` with a positive diagonal."""
    return np.tril(lower, -1) + np.diag(np.log(np.diag(lower)))


def _problem(seed, num_train=8, input_dim=2, noise_variance=0.1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_train, input_dim))
    y = np.sin(x.sum(-1)) + math.sqrt(noise_variance) * rng.normal(size=num_train)
    return x, y


def test_elbo_is_the_collapsed_bound_at_the_optimal_q():
    """Regression, Z = the T inputs, q(u) the optimal one (Titsias 2009): minus T times the
    loss, plus the likelihood's constant, equals Titsias's collapsed bound
    log N(y; 0, Q + s^2 I) - tr(K - Q) / (2 s^2), Q = K K_ZZ^-1 K, computed here in float64;
    without the jitter on K_ZZ, Q = K and it is the log marginal likelihood. Any other q
    is lower. Tolerance: float32 arithmetic on T = 8 terms of order 1."""
    noise, signal, lengthscale = 0.1, 1.3, np.array([0.8, 1.5])
    x, y = _problem(0, noise_variance=noise)
    t = len(y)
    k = _rbf(x, x, signal, lengthscale)
    k_zz = k + svgp.JITTER * signal * np.eye(t)
    q = k @ np.linalg.solve(k_zz, k)
    cov = q + noise * np.eye(t)
    bound = (-0.5 * y @ np.linalg.solve(cov, y) - 0.5 * np.linalg.slogdet(cov)[1]
             - 0.5 * t * math.log(2 * math.pi) - np.trace(k - q) / (2 * noise))
    # The optimal q(u): the posterior of u ~ N(0, K_ZZ) given y = P u + noise, P = K K_ZZ^-1,
    # in the whitened coordinates v = L_Z^-1 u.
    p = k @ np.linalg.inv(k_zz)
    post_cov = np.linalg.inv(np.linalg.inv(k_zz) + p.T @ p / noise)
    post_mean = post_cov @ p.T @ y / noise
    chol_z = np.linalg.cholesky(k_zz)
    mean_v = np.linalg.solve(chol_z, post_mean)
    cov_v = np.linalg.solve(chol_z, np.linalg.solve(chol_z, post_cov).T)
    lower = np.linalg.cholesky(cov_v)
    params = svgp.Parameters(
        log_signal_variance=jnp.float32(math.log(signal)),
        log_lengthscale=jnp.asarray(np.log(lengthscale), jnp.float32),
        inducing=jnp.asarray(x, jnp.float32),
        active=jnp.ones(t, jnp.float32),
        mean=jnp.asarray(mean_v[:, None], jnp.float32),
        scale=jnp.asarray(_scale_of(lower)[None], jnp.float32))
    prior = base.RegressionPriorKnowledge(input_dim=2, kernel="rbf", noise_variance=noise)
    data = base.Data(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32))
    elbo = jax.jit(lambda p: -t * svgp.negative_elbo(jax.random.key(0), p, data, prior, t, 1)
                   - 0.5 * t * math.log(2 * math.pi * noise))
    np.testing.assert_allclose(elbo(params), bound, atol=2e-3)
    worse = params._replace(mean=params.mean + 0.1)
    assert elbo(worse) < bound - 1e-2


def test_inverse_cholesky_factor_and_its_gradient():
    """Against LAPACK's factor and JAX's own gradient of it, for a random positive definite
    matrix (float32; tolerances a few hundred ulps of the entries' scale)."""
    rng = np.random.default_rng(4)
    root = rng.normal(size=(6, 6))
    matrix = jnp.asarray(root @ root.T + 6 * np.eye(6), jnp.float32)
    weights = jnp.asarray(rng.normal(size=(6, 6)), jnp.float32)

    def reference(m):
        low = jnp.linalg.cholesky(m)
        return jax.scipy.linalg.solve_triangular(low, jnp.eye(6), lower=True)

    np.testing.assert_allclose(jax.jit(svgp.inverse_cholesky_factor)(matrix), reference(matrix),
                               atol=1e-6)
    grad = jax.jit(jax.grad(lambda m: jnp.sum(weights * jnp.tanh(svgp.inverse_cholesky_factor(m)))))
    expected = jax.grad(lambda m: jnp.sum(weights * jnp.tanh(reference(m))))(matrix)
    np.testing.assert_allclose(grad(matrix), expected, atol=2e-5)


def test_whitened_kl_matches_the_gaussian_kl():
    """Two outputs, random means and factors, against KL(N(m, S) || N(0, I)) in float64:
    1/2 (tr S + m^T m - M - log det S)."""
    rng = np.random.default_rng(1)
    m, outputs = 5, 2
    mean = rng.normal(size=(m, outputs))
    lower = np.stack([np.tril(rng.normal(size=(m, m)), -1) + np.diag(rng.uniform(0.3, 2, m))
                      for _ in range(outputs)])
    expected = 0.0
    for k in range(outputs):
        cov = lower[k] @ lower[k].T
        expected += 0.5 * (np.trace(cov) + mean[:, k] @ mean[:, k] - m
                           - np.linalg.slogdet(cov)[1])
    got = jax.jit(svgp.whitened_kl)(jnp.asarray(mean, jnp.float32), jnp.asarray(lower, jnp.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_draws_have_the_posterior_mean_and_covariance():
    """20,000 joint draws at 4 inputs from a trained 2-class agent: their mean and
    covariance per class are the SVGP's predictive ones, A m_k and
    K_XX - A A^T + A L_k L_k^T A^T. Tolerance: 5 standard errors of a sample mean
    (sqrt(var / n)) and of a sample covariance (sqrt((s_ii s_jj + s_ij^2) / n))."""
    config = svgp.SVGPConfig(num_inducing=6, num_steps=200, learning_rate=0.05)
    agent = svgp.make_svgp_agent(config, base.Shapes(2, 2))
    rng = np.random.default_rng(2)
    x = rng.normal(size=(12, 2)).astype(np.float32)
    data = base.Data(jnp.asarray(x), jnp.asarray((x[:, 0] > 0).astype(np.int32)))
    prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50),
                                temperature=0.1)
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    x_test = jnp.asarray(rng.normal(size=(4, 2)), jnp.float32)
    n = 20_000
    draws = np.asarray(jax.jit(jax.vmap(lambda k: agent.enn.apply(state, x_test, k)))(
        jax.random.split(jax.random.key(1), n)), np.float64)  # [n, 4, 2]
    params = state.params
    a = np.asarray(svgp._projection(params, state.inverse_inducing, x_test), np.float64)
    k_xx = np.asarray(svgp._kernel(params, x_test, x_test), np.float64)
    for k in range(2):
        mean = a @ np.asarray(params.mean, np.float64)[:, k]
        spread = a @ np.asarray(state.scale, np.float64)[k]
        cov = k_xx - a @ a.T + spread @ spread.T
        sample_mean = draws[..., k].mean(0)
        sample_cov = np.cov(draws[..., k].T)
        var = np.diag(cov)
        assert np.all(np.abs(sample_mean - mean) < 5 * np.sqrt(var / n)), (sample_mean, mean)
        se = np.sqrt((var[:, None] * var[None, :] + cov**2) / n)
        assert np.all(np.abs(sample_cov - cov) < 5 * se), (sample_cov, cov)
        assert np.max(np.abs(cov - np.diag(var))) > 10 * se.max()  # the draws are joint


def test_training_fits_a_regression_function():
    """T = 40 noisy pairs of sin(x1 + x2): after training, the predictive mean at the
    training inputs is closer to the noiseless function than the prior's (0) by far, and
    the ELBO rose. Tolerances are loose (a fit, not an estimator): the noise alone puts
    the mean square error of a perfect fit's targets at 0.1."""
    x, y = _problem(3, num_train=40, noise_variance=0.1)
    data = base.Data(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32))
    prior = base.RegressionPriorKnowledge(input_dim=2, kernel="relu_nngp", noise_variance=0.1)
    config = svgp.SVGPConfig(num_inducing=10, num_steps=1000, learning_rate=0.02)
    state = jax.jit(svgp.make_svgp_agent(config, base.Shapes(2, 1)).train)(
        jax.random.key(0), data, prior)
    mean, _ = jax.jit(svgp.marginals)(state.params, data.x)
    truth = np.sin(x.sum(-1))
    assert np.mean((np.asarray(mean[:, 0]) - truth) ** 2) < 0.1 * np.mean(truth**2)


@pytest.mark.slow  # training and evaluating through the runner (the contract tests cover its parts)
def test_beats_the_uniform_baseline():
    """Two quick problems (T = 100, temperature 0.1; 2-d), N and M cut to 500 test samples:
    svgp's d_KL^1 is below the uniform agent's on each, by more than 3 of its standard
    errors (the rows' own)."""
    quick = leaderboard.get_sweep("quick")
    problems = [dataclasses.replace(quick[i], num_test=500, num_samples=500, taus=(1,))
                for i in ("classification_2d/110", "classification_2d/111")]
    config = svgp.SVGPConfig(num_steps=1000)
    rows = leaderboard.run_agent(functools.partial(svgp.make_svgp_agent, config), problems,
                                 "svgp", config=config, progress=False)
    uniform = leaderboard.run_agent(
        functools.partial(agents.AGENTS["uniform"].make, agents.AGENTS["uniform"].default),
        problems, "uniform", progress=False)
    assert all(r.status == "ok" for r in rows + uniform), rows + uniform
    for ours, baseline in zip(rows, uniform):
        assert ours.kl + 3 * ours.kl_stderr < baseline.kl, (ours.kl, ours.kl_stderr, baseline.kl)


def test_more_inducing_inputs_than_pairs_leave_the_rest_out():
    """T = 3 pairs and M = 200 (the sweep's largest) on a 2-class problem: finite draws
    (copies of the 3 inputs made K_ZZ singular but for the jitter, and float32's factor
    NaN), and the same predictive as M = 3, the extra inducing variables being independent
    of f (to float32 rounding over 100 Adam steps)."""
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
    data = base.Data(x, jnp.asarray([0, 1, 1], jnp.int32))
    prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50),
                                temperature=0.5)
    x_test = jnp.asarray(rng.normal(size=(5, 2)), jnp.float32)
    moments = []
    for m in (200, 3):
        agent = svgp.make_svgp_agent(svgp.SVGPConfig(num_inducing=m, num_steps=100),
                                     base.Shapes(2, 2))
        state = jax.jit(agent.train)(jax.random.key(0), data, prior)
        draws = jax.jit(jax.vmap(lambda k, a=agent, s=state: a.enn.apply(s, x_test, k)))(
            jax.random.split(jax.random.key(1), 4))
        assert np.all(np.isfinite(draws)), m
        moments.append(jax.jit(svgp.marginals)(state.params, x_test))
    for big, small in zip(*moments):
        np.testing.assert_allclose(big, small, rtol=1e-3, atol=1e-4)


def test_sweep():
    sweep = agents.svgp_sweep()
    assert len(set(sweep)) == 6
    assert {(c.num_inducing, c.ard) for c in sweep} == {
        (m, ard) for m in (10, 50, 200) for ard in (True, False)}


@pytest.mark.parametrize("field, value, message", [
    ("num_inducing", 0, "num_inducing must be >= 1"),
    ("num_samples", 0, "num_samples must be >= 1"),
    ("learning_rate", 0.0, "learning_rate must be > 0"),
    ("lengthscale", -1.0, "lengthscale must be > 0"),
    ("signal_variance", float("nan"), "signal_variance must be > 0"),
    ("ard", "yes", "ard must be"),
])
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        svgp.SVGPConfig(**{field: value})
