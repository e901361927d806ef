"""GP regression problems: draws are deterministic, test targets are the pool's function
values plus the known noise, the probes carry the exact posterior."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import gaussian_process
from neural_testbed.generative import gp_regression

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
        posterior = gaussian_process.condition("relu_nngp", data, noise_variance)
        mean, cov = gaussian_process.posterior_at("relu_nngp", posterior, x)
        return mean, cov, gaussian_process.correlation(cov)

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


