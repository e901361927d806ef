"""Known answers for the regression KL's estimators: their formulas, and the choice of
estimator per tau."""

import jax
import numpy as np
import pytest
from scipy import stats

from neural_testbed.likelihood import regression


def test_estimators_are_their_formulas():
    f = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    y = np.array([0.1, -0.3, 0.5, 0.0], np.float32)
    mixture = np.log(np.mean([stats.multivariate_normal(np.asarray(m), 0.2 * np.eye(4)).pdf(y)
                              for m in f]))
    np.testing.assert_allclose(jax.jit(regression.monte_carlo_log_density)(f, y, 0.2), mixture,
                               rtol=1e-5)
    cov = np.cov(np.asarray(f).T, bias=True) + 0.2 * np.eye(4)
    gaussian = stats.multivariate_normal(np.asarray(f).mean(0), cov).logpdf(y)
    np.testing.assert_allclose(jax.jit(regression.gaussian_fit_log_density)(f, y, 0.2), gaussian,
                               rtol=1e-5)
    assert regression.choose_estimator(9) == "monte_carlo"
    assert regression.choose_estimator(10) == "gaussian"
    with pytest.raises(ValueError, match="unknown estimator 'partition'; allowed: auto, "):
        regression.choose_estimator(10, "partition")
