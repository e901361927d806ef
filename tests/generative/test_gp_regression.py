"""GP regression problems: the kernel is the wide ReLU network's, draws are exact and
deterministic, test targets are the pool's function values plus the known noise."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import networks
from neural_testbed.generative import gp_regression, kernels


def test_kernel_is_the_covariance_of_a_wide_random_relu_network():
    """Over H hidden units of w ~ N(0, I/d), b ~ N(0, 1/d), the mean of relu(u) relu(u')
    is the kernel; tolerance: 4 standard errors of that mean, from the products themselves."""
    d, width = 3, 200_000
    x = jax.random.normal(jax.random.key(0), (4, d)) * jnp.array([[0.5], [1.0], [2.0], [1.0]])
    w_key, b_key = jax.random.split(jax.random.key(1))
    w = jax.random.normal(w_key, (d, width)) / np.sqrt(d)
    b = jax.random.normal(b_key, (width,)) / np.sqrt(d)
    h = np.asarray(jax.nn.relu(x @ w + b), np.float64)  # [4, H]
    products = h[:, None, :] * h[None, :, :]
    empirical, stderr = products.mean(-1), products.std(-1) / np.sqrt(width)
    exact = np.asarray(kernels.relu_nngp_kernel(x, x))
    assert np.all(np.abs(empirical - exact) < 4 * stderr), (empirical, exact, stderr)
    np.testing.assert_allclose(np.diag(exact), (np.sum(np.asarray(x) ** 2, -1) + 1) / d / 2,
                               rtol=1e-5)


def test_a_finite_kernel_network_has_the_kernels_covariance_at_any_width():
    """20000 draws of the width-3 network at 4 inputs: the sample covariance matches the
    kernel within 5 standard errors of each entry (the standard error of a sample
    covariance of zero-mean pairs is sqrt(var(f f') / n), estimated from the draws)."""
    x = jnp.array([[0.0, 0.0], [1.0, -0.5], [-2.0, 0.3], [0.5, 1.5]])
    draws = jax.vmap(lambda k: networks.apply_mlp(kernels.sample_relu_network(k, 2, 3), x))(
        jax.random.split(jax.random.key(5), 20_000))[..., 0]  # [draws, 4]
    draws = np.asarray(draws, np.float64)
    products = draws[:, :, None] * draws[:, None, :]
    sample = products.mean(0)  # E f = 0, so the covariance is the mean product
    stderr = products.std(0) / np.sqrt(len(draws))
    kernel = np.asarray(kernels.relu_nngp_kernel(x, x), np.float64)
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
