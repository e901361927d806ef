"""The KL estimate: infinite terms clipped and counted, the NLL without an exact
likelihood, the standard error of the mean; the choice of estimator per tau."""

import jax.numpy as jnp
import numpy as np

from neural_testbed.likelihood import kl


def test_clip_infinite_terms():
    terms, count = kl.clip_infinite_terms(jnp.array([1.0, jnp.inf, 3.0, jnp.inf]))
    np.testing.assert_array_equal(terms, [1.0, 3.0, 3.0, 3.0])
    assert int(count) == 2
    terms, count = kl.clip_infinite_terms(jnp.array([jnp.inf, jnp.inf]))
    assert np.all(np.isinf(terms)) and int(count) == 2  # nothing finite: stays infinite
    terms, _ = kl.clip_infinite_terms(jnp.array([jnp.nan, 1.0]))
    assert np.isnan(terms[0])  # NaN is not clipped: the row fails


def test_kl_estimate_is_the_mean_of_the_terms_and_their_standard_error():
    log_lik, exact = jnp.array([-1.0, -2.0, -jnp.inf, -4.0]), jnp.array([0.0, 0.0, 0.0, -1.0])
    mean, stderr, clipped = kl.kl_estimate(log_lik, exact)
    terms = np.array([1.0, 2.0, 3.0, 3.0])  # the infinite term is the largest finite one
    np.testing.assert_allclose(mean, terms.mean(), rtol=1e-6)
    np.testing.assert_allclose(stderr, terms.std(ddof=1) / 2.0, rtol=1e-6)
    assert int(clipped) == 1
    mean, stderr, clipped = kl.kl_estimate(jnp.array([-2.5]), None)  # the NLL of one sample
    assert float(mean) == 2.5 and float(stderr) == 0.0 and int(clipped) == 0


def test_auto_estimator_choice():
    assert kl.choose_estimator(1) == "monte_carlo"
    assert kl.choose_estimator(9) == "monte_carlo"
    assert kl.choose_estimator(10) == "partition"
    assert kl.choose_estimator(100, "monte_carlo") == "monte_carlo"


def test_evaluations_of_a_tau_curve():
    assert kl.evaluations((1, 100)) == [(1, "auto"), (100, "auto")]
    assert kl.evaluations((1, 2, 5, 10, 20)) == [
        (1, "auto"), (2, "auto"), (5, "auto"), (10, "auto"), (20, "auto"), (10, "monte_carlo")]
    assert kl.evaluations((1, 2, 5), "partition") == [
        (1, "partition"), (2, "partition"), (5, "partition")]
    # No tau on partitioning, or every tau on it: nothing to compare, nothing added.
    assert kl.evaluations((1, 2, 5)) == [(1, "auto"), (2, "auto"), (5, "auto")]
    assert kl.evaluations((10, 20, 50)) == [(10, "auto"), (20, "auto"), (50, "auto")]
    # The first tau on partitioning gets the Monte Carlo row, whatever the order.
    assert kl.evaluations((20, 1, 2, 10))[-1] == (10, "monte_carlo")
