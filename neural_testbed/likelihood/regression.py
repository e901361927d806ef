"""d_KL^tau for regression problems: exact noise density against the agent's joint density.

For each of N independent test tau-samples, the term is the exact
log-density of its targets under the sampled function and the known Gaussian
noise, minus the agent's joint predictive log-density of them. The agent's
belief samples are functions ``f_m`` (its ENN's one output per input), M of
them drawn afresh for each test sample, and its predictive density adds the
known noise:

- ``"monte_carlo"``: ``log (1/M) sum_m prod_t N(y_t; f_m(x_t), s^2)``, the
  mixture the belief samples define; unbiased in density, but for large tau
  one sample dominates and the estimate is biased low.
- ``"gaussian"``: ``log N(y; mu, C + s^2 I)`` with ``mu`` and ``C`` the mean
  and (1/M) covariance of the M sampled function values at the tau inputs:
  exact for a Gaussian belief as M grows (the exact posterior of a GP is one),
  an approximation of a non-Gaussian one.
- ``"auto"``: Monte Carlo for tau < 10, Gaussian from tau = 10, the switch
  the classification testbed uses between its Algorithms 3 and 4.

Even the exact posterior scores above 0: what T points cannot tell about f.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from neural_testbed import base, diagnostics
from neural_testbed.diagnostics import xll
from neural_testbed.likelihood.kl import (
    _MAX_NETWORKS_PER_CHUNK,
    Evaluation,
    _largest_divisor_at_most,
    clip_infinite_terms,
)

__all__ = [
    "ESTIMATORS",
    "choose_estimator",
    "gaussian_fit_log_density",
    "gaussian_log_density",
    "make_regression_evaluator",
    "monte_carlo_log_density",
]

Estimator = Literal["auto", "monte_carlo", "gaussian"]
ESTIMATORS = ("auto", "monte_carlo", "gaussian")
_GAUSSIAN_FROM_TAU = 10
# Sampled function values held at once, per chunk of test samples.
_MAX_VALUES_PER_CHUNK = 2**20


def choose_estimator(tau: int, estimator: Estimator = "auto") -> str:
    """The estimator ``estimator`` means at ``tau``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    if estimator == "auto":
        return "monte_carlo" if tau < _GAUSSIAN_FROM_TAU else "gaussian"
    return estimator


def gaussian_log_density(residuals: jax.Array, variance) -> jax.Array:
    """``sum_t log N(r_t; 0, variance)`` over the last axis."""
    return -0.5 * jnp.sum(residuals**2 / variance + jnp.log(2 * jnp.pi * variance), axis=-1)


def _weights(f: jax.Array, log_weights: jax.Array | None) -> jax.Array:
    """The members' log-weights: uniform over the rows of ``f`` when not given."""
    return jnp.full(f.shape[0], -jnp.log(f.shape[0])) if log_weights is None else log_weights


def monte_carlo_log_density(f: jax.Array, y: jax.Array, noise_variance,
                            log_weights: jax.Array | None = None) -> jax.Array:
    """``log sum_m w_m prod_t N(y_t; f[m, t], noise_variance)`` for ``f [M, tau]``
    (weights ``1 / M`` unless ``log_weights [M]`` are given)."""
    per_sample = gaussian_log_density(y[None, :] - f, noise_variance)
    return jax.nn.logsumexp(per_sample + _weights(f, log_weights))


def gaussian_fit_log_density(f: jax.Array, y: jax.Array, noise_variance,
                             log_weights: jax.Array | None = None) -> jax.Array:
    """``log N(y; mean, cov + noise_variance I)`` with the (weighted) mean and covariance
    of ``f [M, tau]`` over its M rows (weights ``1 / M`` unless given)."""
    tau = f.shape[1]
    weights = jnp.exp(_weights(f, log_weights))
    mean = weights @ f
    centred = f - mean
    cov = (centred * weights[:, None]).T @ centred + noise_variance * jnp.eye(tau)
    chol = jnp.linalg.cholesky(cov)
    z = jax.scipy.linalg.solve_triangular(chol, y - mean, lower=True)
    return (-0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diag(chol)))
            - 0.5 * tau * jnp.log(2 * jnp.pi))


def _test_samples_per_chunk(num_test: int, num_samples: int, tau: int,
                            num_indices: int | None) -> int:
    """Test samples evaluated at once: a divisor of ``num_test`` that bounds the function
    values held, and, for continuous indices, the distinct networks (each may hold its own
    weights: bbb's draws, the hypermodel's generated parameters), as the classification
    evaluator does."""
    counted = num_indices is not None and num_indices <= num_samples
    rows = num_indices if counted else num_samples
    most = _MAX_VALUES_PER_CHUNK // (rows * tau)
    if not counted:
        most = min(most, _MAX_NETWORKS_PER_CHUNK // num_samples)
    return _largest_divisor_at_most(num_test, most)


def make_regression_evaluator(enn: base.ENN, tau: int, num_test: int, num_samples: int,
                              estimator: Estimator = "auto"):
    """``evaluate(key, state, test) -> kl.Evaluation``; jittable.

    ``test`` is a :class:`base.TestSamples` with ``x [N, tau, d]``, float
    targets ``y [N, tau]``, their exact log-densities (or ``None``: the result
    is then the negative log-likelihood), the noise variance and the probes.
    ``enn.apply`` gives one output per input, ``[n, 1]``: a belief sample's
    function value. Accuracy and ECE are NaN (no classes); the diagnostics
    are :class:`diagnostics.RegressionDiagnostics` from M belief samples at
    the probe inputs: the metacorrelation, the XLL with the exact posterior as
    the reference, and the agent's predictive there (stored for ``xll``).
    """
    for name, value in (("tau", tau), ("num_test", num_test), ("num_samples", num_samples)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    log_density = {"monte_carlo": monte_carlo_log_density,
                   "gaussian": gaussian_fit_log_density}[choose_estimator(tau, estimator)]
    # An agent with n <= M members (an ensemble, a single network) is evaluated once per
    # member, weighted by how often its M belief samples drew it, as for classification.
    counted = enn.num_indices is not None and enn.num_indices <= num_samples
    chunk = _test_samples_per_chunk(num_test, num_samples, tau, enn.num_indices)

    def sample(state, x, indices):
        """Belief samples' values ``[len(indices), n]`` at inputs ``x [n, d]``."""
        f = jax.vmap(lambda index: enn.apply(state, x, index))(indices)
        if f.shape[1:] != (x.shape[0], 1):
            raise ValueError(f"agent returned outputs of shape {f.shape[1:]} for inputs of "
                             f"shape {x.shape}; expected ({x.shape[0]}, 1), one value per input")
        if jnp.issubdtype(f.dtype, jnp.complexfloating):  # the likelihood would drop a part
            raise ValueError(f"agent returned outputs of dtype {f.dtype}; outputs must be real "
                             "numbers")
        return f[..., 0]

    def evaluate(key: jax.Array, state: base.State, test: base.TestSamples) -> Evaluation:
        if test.x.shape[:2] != (num_test, tau) or test.y.shape != (num_test, tau):
            raise ValueError(f"test samples of shape x {test.x.shape}, y {test.y.shape}; "
                             f"expected ({num_test}, {tau}, d) and ({num_test}, {tau})")
        if test.noise_variance is None or test.probe_x is None or test.probe_y is None:
            raise ValueError("regression test samples need noise_variance, probe inputs and "
                             "the probes' targets")
        terms_key, probe_key = jax.random.split(key)
        keys = jax.random.split(terms_key, (num_test, num_samples))

        def one(args):
            x, y, sample_keys = args
            if counted:
                counts = jnp.bincount(jax.vmap(enn.sample_index)(sample_keys),
                                      length=enn.num_indices)
                f = sample(state, x, jnp.arange(enn.num_indices))
                log_weights = jnp.log(counts / num_samples)
            else:
                f, log_weights = sample(state, x, jax.vmap(enn.sample_index)(sample_keys)), None
            return (log_density(f, y, test.noise_variance, log_weights),
                    jnp.all(jnp.isfinite(f)))

        log_lik, valid = jax.lax.map(one, (test.x, test.y, keys), batch_size=chunk)
        terms = -log_lik if test.log_likelihood is None else test.log_likelihood - log_lik
        terms, num_clipped = clip_infinite_terms(terms)
        stderr = (jnp.std(terms, ddof=1) / jnp.sqrt(num_test) if num_test > 1
                  else jnp.zeros(()))
        indices = jax.vmap(enn.sample_index)(jax.random.split(probe_key, num_samples))
        probes = sample(state, test.probe_x, indices)
        if counted:  # the same draws as each member once, weighted by its count: a few rows
            belief = xll.predictive(sample(state, test.probe_x, jnp.arange(enn.num_indices)),
                                    jnp.bincount(indices, length=enn.num_indices)
                                    / num_samples, test.noise_variance)
        else:
            belief = xll.predictive(probes, jnp.full(num_samples, 1 / num_samples),
                                    test.noise_variance)
        nan = jnp.array(jnp.nan)
        return Evaluation(
            kl=jnp.mean(terms), kl_stderr=stderr, accuracy=nan, ece=nan,
            logits_valid=jnp.all(valid), num_clipped=num_clipped,
            diagnostics=diagnostics.regression_diagnostics(
                probes, belief, test.probe_y, test.probe_mean, test.probe_variance,
                test.probe_correlation))

    return evaluate
