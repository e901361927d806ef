"""Gaussian-process algebra: the evidence is the Gaussian density of the targets; joint
draws at repeated inputs are exact, and a CPU's are those of the whole matrix's root."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from neural_testbed import base, gaussian_process, kernels
from neural_testbed.run import programs

# The library functions under test, each compiled as one program (not op by op).
_prior_covariance = jax.jit(gaussian_process.prior_covariance, static_argnums=0)
_log_marginal_likelihood = jax.jit(gaussian_process.log_marginal_likelihood, static_argnums=0)


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


def _covariance_with_repeated_inputs() -> tuple[jax.Array, jax.Array]:
    """The prior covariance at 40 1-d inputs, 10 of them repeats of others, as a tau = 100
    test tau-sample drawn with replacement has; and where each input first occurs."""
    x = jax.random.normal(jax.random.key(3), (30, 1))
    index = jnp.concatenate([jnp.arange(30), jnp.array([0, 3, 3, 7, 11, 12, 20, 25, 29, 29])])
    cov = gaussian_process.prior_covariance("relu_nngp", x[index], x[index])
    first = jnp.concatenate([jnp.arange(30), index[30:]])
    return cov, first


def test_a_root_without_repeated_inputs_is_exact_and_repeats_their_first_occurrence():
    cov, first = _covariance_with_repeated_inputs()
    root = gaussian_process.square_root_of_distinct(cov)
    # Each repeated input's row is its first occurrence's, so their draws are one value.
    np.testing.assert_array_equal(root, root[first])
    # root root^T is cov up to float32 rounding of an eigendecomposition (the tolerance
    # is a few hundred float32 ulps of the largest variance); LAPACK's root of the whole
    # matrix is no closer.
    scale = float(jnp.max(jnp.diag(cov)))
    whole = gaussian_process.square_root(cov)
    assert float(jnp.max(jnp.abs(root @ root.T - cov))) < 1e-4 * scale
    assert float(jnp.max(jnp.abs(whole @ whole.T - cov))) < 1e-4 * scale


def test_a_cpus_joint_sample_is_the_whole_matrixs_root_as_before():
    # The published rows were drawn so on a CPU: the GPU's detour must not change them.
    cov, _ = _covariance_with_repeated_inputs()
    mean = jnp.linspace(-1.0, 1.0, cov.shape[0])
    key = jax.random.key(5)
    expected = mean + gaussian_process.square_root(cov) @ jax.random.normal(key, mean.shape)
    np.testing.assert_array_equal(jax.jit(gaussian_process.joint_sample)(key, mean, cov),
                                  expected)


def test_the_ridge_finds_repeated_inputs_block_by_block_and_holds_few_comparisons():
    """same_input compares a block of rows at a time: the same matrix as all at once, and
    for the current regression sweep's largest problem (T = 10,000 training and 1,000 pool
    inputs of d = 100) no [n, m, d] array of 12 GB."""
    x = jax.random.normal(jax.random.key(0), (37, 3))
    x2 = jnp.concatenate([x[::4], jax.random.normal(jax.random.key(1), (5, 3))])
    whole = np.asarray(jnp.all(x[:, None] == x2[None], -1), np.float32)
    assert whole.sum() == 10  # every fourth row of x is repeated once in x2
    for block in (1, 7, 3 * 15, 10**9):
        np.testing.assert_array_equal(gaussian_process.same_input(x, x2, block), whole)
    n, d = 11_000, 100
    spec = jax.ShapeDtypeStruct((n, d), jnp.float32)
    traced = jax.jit(gaussian_process.same_input).trace(spec, spec).jaxpr.jaxpr
    largest = max(np.prod(v.aval.shape) for eqn in programs.equations(traced)
                  for v in eqn.outvars)
    assert largest <= (n + 30) * n, largest  # the [n, n] answer (padded to whole blocks)
