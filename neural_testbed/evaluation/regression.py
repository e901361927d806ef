"""The evaluation of an agent on one regression problem: d_KL^tau and the regression
diagnostics, from the same belief samples.

The agent's belief samples are functions ``f_m`` (its ENN's one output per input),
M of them drawn afresh for each of N test tau-samples; their joint log-density of
the targets plus the known noise is estimated by
:mod:`neural_testbed.likelihood.regression` and reduced to the KL (or NLL) estimate
(:func:`neural_testbed.likelihood.kl.kl_estimate`); the diagnostics
(:func:`neural_testbed.diagnostics.regression_diagnostics`) come from M belief samples
at the problem's probe inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from neural_testbed import base, diagnostics
from neural_testbed.diagnostics import xll
from neural_testbed.evaluation.classification import (
    MAX_NETWORKS_PER_CHUNK,
    Evaluation,
    largest_divisor_at_most,
)
from neural_testbed.likelihood import kl
from neural_testbed.likelihood.regression import (
    Estimator,
    choose_estimator,
    gaussian_fit_log_density,
    monte_carlo_log_density,
)

__all__ = ["make_regression_evaluator"]

# Sampled function values held at once, per chunk of test samples.
_MAX_VALUES_PER_CHUNK = 2**20


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
        most = min(most, MAX_NETWORKS_PER_CHUNK // num_samples)
    return largest_divisor_at_most(num_test, most)


def make_regression_evaluator(enn: base.ENN, tau: int, num_test: int, num_samples: int,
                              estimator: Estimator = "auto"):
    """``evaluate(key, state, test) -> Evaluation``; jittable.

    ``test`` is a :class:`base.TestSamples` with ``x [N, tau, d]``, float
    targets ``y [N, tau]``, their exact log-densities (or ``None``: the result
    is then the negative log-likelihood), the noise variance and the probes.
    ``enn.apply`` gives one output per input, ``[n, 1]``: a belief sample's
    function value. Accuracy and ECE are NaN (no classes); the diagnostics
    are :class:`diagnostics.RegressionDiagnostics` from M belief samples at
    the probe inputs: the metacorrelation, the XLL with the exact posterior as
    the reference, and the agent's predictive there (stored for ``xll``). Without the
    exact posterior (``probe_correlation`` None: real data) the metacorrelation and the
    XLL are NaN (stored as null) and the predictive is still kept.
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
        kl_mean, stderr, num_clipped = kl.kl_estimate(log_lik, test.log_likelihood)
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
        if test.probe_correlation is None:  # real data: no exact posterior to compare with
            found = diagnostics.RegressionDiagnostics(
                nan, jnp.mean(jnp.var(probes, axis=0)), nan, belief)
        else:
            found = diagnostics.regression_diagnostics(
                probes, belief, test.probe_y, test.probe_mean, test.probe_variance,
                test.probe_correlation)
        return Evaluation(
            kl=kl_mean, kl_stderr=stderr, accuracy=nan, ece=nan,
            logits_valid=jnp.all(valid), num_clipped=num_clipped, diagnostics=found)

    return evaluate
