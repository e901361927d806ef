"""Covariance functions: the wide ReLU network's kernel is the covariance of such networks
(and of a finite draw of one at any width), with right gradients; the RBF is its formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import kernels, networks

# The library function under test, compiled as one program (not op by op).
_relu_nngp_kernel = jax.jit(kernels.relu_nngp_kernel)


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

