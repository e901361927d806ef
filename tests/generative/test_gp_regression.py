"""GP regression problems: the kernel is the wide ReLU network's, draws are exact and
deterministic, test targets are the pool's function values plus the known noise."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from neural_testbed import base, networks
from neural_testbed.generative import gp_regression, kernels

# The library functions under test, each compiled as one program (not op by op).
_relu_nngp_kernel = jax.jit(kernels.relu_nngp_kernel)
_prior_covariance = jax.jit(gp_regression.prior_covariance, static_argnums=0)
_log_marginal_likelihood = jax.jit(gp_regression.log_marginal_likelihood, static_argnums=0)


@pytest.mark.parametrize("weight_variance, bias_variance", [(1.0, 1.0), (2.0, 0.25)])
def test_kernel_is_the_covariance_of_a_wide_random_relu_network(weight_variance, bias_variance):
    """Over H hidden units of w ~ N(0, weight_variance I/d), b ~ N(0, bias_variance/d), the
    mean of relu(u) relu(u') is the kernel (the defaults are the environment's (1, 1));
    tolerance: 4 standard errors of that mean, from the products themselves."""
    d, width = 3, 200_000
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(4, d)) * np.array([[0.5], [1.0], [2.0], [1.0]])).astype(np.float32)
    w = rng.normal(size=(d, width)) * np.sqrt(weight_variance / d)
    b = rng.normal(size=width) * np.sqrt(bias_variance / d)
    h = np.maximum(x.astype(np.float64) @ w + b, 0.0)  # [4, H]
    products = h[:, None, :] * h[None, :, :]
    empirical, stderr = products.mean(-1), products.std(-1) / np.sqrt(width)
    exact = np.asarray(_relu_nngp_kernel(x, x, weight_variance, bias_variance))
    assert np.all(np.abs(empirical - exact) < 4 * stderr), (empirical, exact, stderr)
    np.testing.assert_allclose(
        np.diag(exact), (weight_variance * np.sum(x.astype(np.float64) ** 2, -1)
                         + bias_variance) / d / 2, rtol=1e-5)
    if (weight_variance, bias_variance) == (1.0, 1.0):
        np.testing.assert_array_equal(exact, _relu_nngp_kernel(x, x))


def test_kernel_gradients_in_the_variances_are_finite_and_right_on_the_diagonal():
    """Where x = x' (cos t = 1) the derivative through arccos would be 0 x inf; the kernel's
    gradient there is finite and equals central finite differences (float64 via numpy)."""
    x = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)

    @jax.jit
    def total(log_variances):
        weight, bias = jnp.exp(log_variances)
        return jnp.sum(kernels.relu_nngp_kernel(x, x, weight, bias))

    point = np.array([0.3, -0.4], np.float32)
    grad = np.asarray(jax.jit(jax.grad(total))(point))
    assert np.all(np.isfinite(grad))
    step = 1e-2
    for i in range(2):
        e = np.zeros(2, np.float32)
        e[i] = step
        numeric = (float(total(point + e)) - float(total(point - e))) / (2 * step)
        np.testing.assert_allclose(grad[i], numeric, rtol=1e-3)


def test_rbf_kernel_is_its_formula():
    x = np.array([[0.0, 0.0], [0.6, 0.8], [3.0, 4.0]], np.float32)
    k = np.asarray(jax.jit(kernels.rbf_kernel)(x, x, signal_variance=2.0, lengthscale=1.0))
    np.testing.assert_allclose(np.diag(k), 2.0, rtol=1e-6)
    np.testing.assert_allclose(k[0, 1], 2.0 * np.exp(-0.5), rtol=1e-6)  # distance 1
    np.testing.assert_allclose(k[0, 2], 2.0 * np.exp(-12.5), rtol=1e-4)  # distance 5
    np.testing.assert_allclose(k, k.T)


def test_log_marginal_likelihood_is_the_gaussian_density_of_the_targets():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 2)).astype(np.float32), rng.normal(size=6).astype(np.float32)
    cov = np.asarray(_prior_covariance("relu_nngp", x, x), np.float64)
    expected = stats.multivariate_normal(np.zeros(6), cov + 0.1 * np.eye(6)).logpdf(y)
    value = _log_marginal_likelihood("relu_nngp", base.Data(x, y), 0.1)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    # A kernel function and the environment's name give the same numbers.
    np.testing.assert_allclose(
        _log_marginal_likelihood(kernels.relu_nngp_kernel, base.Data(x, y), 0.1),
        value, rtol=1e-6)


def test_a_finite_kernel_network_has_the_kernels_covariance_at_any_width():
    """20000 draws of the width-3 network at 4 inputs: the sample covariance matches the
    kernel within 5 standard errors of each entry (the standard error of a sample
    covariance of zero-mean pairs is sqrt(var(f f') / n), estimated from the draws)."""
    x = np.array([[0.0, 0.0], [1.0, -0.5], [-2.0, 0.3], [0.5, 1.5]], np.float32)
    draws = jax.jit(lambda key: jax.vmap(
        lambda k: networks.apply_mlp(kernels.sample_relu_network(k, 2, 3), x))(
        jax.random.split(key, 20_000)))(jax.random.key(5))
    draws = np.asarray(draws, np.float64)[..., 0]  # [draws, 4]
    products = draws[:, :, None] * draws[:, None, :]
    sample = products.mean(0)  # E f = 0, so the covariance is the mean product
    stderr = products.std(0) / np.sqrt(len(draws))
    kernel = np.asarray(_relu_nngp_kernel(x, x), np.float64)
    assert np.all(np.abs(sample - kernel) < 5 * stderr), (sample, kernel)


PROBLEM = gp_regression.GPRegressionProblem("regression/0", input_dim=2, num_train=30, seed=0,
                                            num_pool=100, num_test=50, taus=(1, 7))


def test_draws_are_deterministic_per_problem_and_differ_between_seeds():
    a, b = PROBLEM.instance(), PROBLEM.instance()
    np.testing.assert_array_equal(a.env.pool_f, b.env.pool_f)
    np.testing.assert_array_equal(a.data.y, b.data.y)
    other = dataclasses.replace(PROBLEM, seed=1).instance()
    assert not np.allclose(a.env.pool_f, other.env.pool_f)
    assert a.data.y.dtype == jnp.float32 and a.data.x.shape == (30, 2)
    assert np.isfinite(a.env.pool_f).all()


def test_test_targets_are_pool_values_plus_noise_with_their_exact_log_density():
    _, prior, env = PROBLEM.instance()
    test = PROBLEM.sample_test(jax.random.key(3), env, 7)
    assert test.x.shape == (50, 7, 2) and test.y.shape == (50, 7)
    # Every test input is a pool input; its target is f there plus noise.
    match = np.all(np.asarray(test.x)[:, :, None, :] == np.asarray(env.pool_x)[None, None], -1)
    assert np.all(match.sum(-1) >= 1)
    f = (match * np.asarray(env.pool_f)).sum(-1) / match.sum(-1)
    noise = np.asarray(test.y) - f
    expected = (-0.5 * noise**2 / 0.01 - 0.5 * np.log(2 * np.pi * 0.01)).sum(-1)
    np.testing.assert_allclose(test.log_likelihood, expected, rtol=1e-4)
    # The noise has the problem's variance: 350 draws, chi-square bounds at about 4 sigma.
    assert 0.7 < np.mean(noise**2) / 0.01 < 1.3
    assert float(prior.noise_variance) == pytest.approx(0.01)


def test_bad_settings_are_refused_with_the_value_and_what_is_allowed():
    with pytest.raises(ValueError, match="noise_variance must be a finite number > 0, got 0"):
        dataclasses.replace(PROBLEM, noise_variance=0)
    with pytest.raises(ValueError, match="unknown kernel 'rbf'; allowed: relu_nngp"):
        dataclasses.replace(PROBLEM, kernel="rbf")
    with pytest.raises(ValueError, match="num_pool must be an integer >= 1, got 0"):
        dataclasses.replace(PROBLEM, num_pool=0)


def test_the_probes_carry_noisy_targets_and_the_exact_posterior_there():
    data, prior, env = PROBLEM.instance()
    q = PROBLEM.num_probes

    @jax.jit
    def exact_posterior(data, noise_variance, x):  # mean, covariance and correlation at x
        posterior = gp_regression.condition("relu_nngp", data, noise_variance)
        mean, cov = gp_regression.posterior_at("relu_nngp", posterior, x)
        return mean, cov, gp_regression.correlation(cov)

    mean, cov, correlation = exact_posterior(data, prior.noise_variance,
                                             np.asarray(env.pool_x)[:q])
    np.testing.assert_allclose(env.probe_mean, mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(env.probe_variance, np.diag(cov), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(env.probe_correlation, correlation, atol=1e-3)
    # The targets are f plus noise of the problem's variance: 100 draws, chi-square bounds
    # at about 4 sigma (the mean of 100 squared standard normals has sd 0.14).
    noise = np.asarray(env.probe_y) - np.asarray(env.pool_f)[:q]
    assert 0.45 < np.mean(noise**2) / 0.01 < 1.6
    # A stream of its own: not the test samples' noise on the same inputs.
    test = PROBLEM.sample_test(jax.random.key(3), env, 1)
    assert not np.any(np.isin(np.asarray(test.y), np.asarray(env.probe_y)))
    np.testing.assert_array_equal(test.probe_y, env.probe_y)


def _covariance_with_repeated_inputs() -> tuple[jax.Array, jax.Array]:
    """The prior covariance at 40 1-d inputs, 10 of them repeats of others, as a tau = 100
    test tau-sample drawn with replacement has; and where each input first occurs."""
    x = jax.random.normal(jax.random.key(3), (30, 1))
    index = jnp.concatenate([jnp.arange(30), jnp.array([0, 3, 3, 7, 11, 12, 20, 25, 29, 29])])
    cov = gp_regression.prior_covariance("relu_nngp", x[index], x[index])
    first = jnp.concatenate([jnp.arange(30), index[30:]])
    return cov, first


def test_a_root_without_repeated_inputs_is_exact_and_repeats_their_first_occurrence():
    cov, first = _covariance_with_repeated_inputs()
    root = gp_regression._square_root_of_distinct(cov)
    # Each repeated input's row is its first occurrence's, so their draws are one value.
    np.testing.assert_array_equal(root, root[first])
    # root root^T is cov up to float32 rounding of an eigendecomposition (the tolerance
    # is a few hundred float32 ulps of the largest variance); LAPACK's root of the whole
    # matrix is no closer.
    scale = float(jnp.max(jnp.diag(cov)))
    whole = gp_regression._square_root(cov)
    assert float(jnp.max(jnp.abs(root @ root.T - cov))) < 1e-4 * scale
    assert float(jnp.max(jnp.abs(whole @ whole.T - cov))) < 1e-4 * scale


def test_a_cpus_joint_sample_is_the_whole_matrixs_root_as_before():
    # The published rows were drawn so on a CPU: the GPU's detour must not change them.
    cov, _ = _covariance_with_repeated_inputs()
    mean = jnp.linspace(-1.0, 1.0, cov.shape[0])
    key = jax.random.key(5)
    expected = mean + gp_regression._square_root(cov) @ jax.random.normal(key, mean.shape)
    np.testing.assert_array_equal(jax.jit(gp_regression.joint_sample)(key, mean, cov),
                                  expected)
