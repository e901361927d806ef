"""The evaluation of an agent on one classification problem: d_KL^tau, accuracy, ECE and
the diagnostics, all from the same belief samples.

For each of N independent test tau-samples, the agent's joint log-likelihood of
its labels is estimated from M samples of its belief (:mod:`neural_testbed.likelihood`)
and reduced to the KL (or NLL) estimate (:func:`neural_testbed.likelihood.kl.kl_estimate`).
The M belief samples are drawn afresh for every test tau-sample, as in the reference
testbed, so the N terms are independent. For a finite ensemble that costs no extra
forward passes: an [N, M] array of member ids is drawn and every member is weighted by
its count in each row. Test samples are processed in chunks so that memory stays
bounded whatever M, N and tau are.

The evaluator sees a problem only through its test samples
(:class:`neural_testbed.base.TestSamples`), so it serves every problem family.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base, diagnostics
from neural_testbed.diagnostics import calibration
from neural_testbed.likelihood import estimators, kl
from neural_testbed.likelihood.kl import Estimator

__all__ = [
    "MAX_NETWORKS_PER_CHUNK",
    "Evaluation",
    "evaluate_log_probs",
    "evaluate_sampler",
    "largest_divisor_at_most",
    "make_evaluator",
]

# Upper bound on (members x inputs) rows pushed through the network at once:
# about 26 MB per hidden layer of width 50 in float32. With M = 1000 distinct
# members and tau = 100 a chunk is one test sample (10^5 rows); larger chunks ran
# slower for dropout (benchmarks/agents_zoo2.py; the figure in
# benchmarks/results/figures_from_code.md).
_MAX_ROWS_PER_CHUNK = 2**17
# Upper bound on distinct networks (continuous indices) per chunk: each may
# hold its own weights (bbb: 2,800 floats for a 50-50 MLP), so at tau = 1 the
# row bound alone would allow 131,072 networks, 1.5 GB of bbb weights.
MAX_NETWORKS_PER_CHUNK = 2**13


class Evaluation(NamedTuple):
    """Scalars (arrays) summarising one evaluation."""

    kl: jax.Array  # mean over test tau-samples of the per-sample terms, nats
    kl_stderr: jax.Array  # standard error of that mean
    accuracy: jax.Array  # of the mean prediction, over all N * tau test inputs
    ece: jax.Array  # 15-bin expected calibration error of the mean prediction
    logits_valid: jax.Array  # bool: False if any agent logit was NaN or +inf
    num_clipped: jax.Array  # int32: infinite terms replaced by the largest finite one
    # From the same belief samples: per input for classification (reduce with
    # diagnostics.summarise), diagnostics.RegressionDiagnostics for regression.
    diagnostics: diagnostics.Inputs | diagnostics.RegressionDiagnostics


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (1 if ``limit`` < 1): a chunk size
    that splits ``n`` test samples evenly."""
    return max(d for d in range(1, min(n, max(1, limit)) + 1) if n % d == 0)


class _Layout(NamedTuple):
    """How belief samples are drawn and test samples cut into chunks."""

    counted: bool  # a finite ensemble: every member evaluated, weighted by its count
    num_members: int  # networks per test sample: the members (counted) or the M draws
    chunk: int  # test samples per chunk
    num_chunks: int


def _layout(enn: base.ENN, tau: int, num_test: int, num_samples: int) -> _Layout:
    counted = enn.num_indices is not None and enn.num_indices <= num_samples
    num_members = enn.num_indices if counted else num_samples
    width = tau + 1  # inputs per test sample, with room for its out-of-distribution input
    if counted:
        chunk = largest_divisor_at_most(num_test, _MAX_ROWS_PER_CHUNK // (num_members * width))
    else:
        chunk = largest_divisor_at_most(num_test, min(
            _MAX_ROWS_PER_CHUNK // (num_samples * width), MAX_NETWORKS_PER_CHUNK // num_samples))
    return _Layout(counted, num_members, chunk, num_test // chunk)


def _draw_beliefs(key, enn: base.ENN, layout: _Layout, num_test: int, num_samples: int):
    """Members to evaluate and their log-weights ``[N, members]`` in each test sample."""
    if layout.counted and layout.num_members == 1:  # one network: nothing to draw
        return jnp.zeros((1,), jnp.int32), jnp.zeros((num_test, 1))
    keys = jax.random.split(key, (num_test, num_samples))
    indices = jax.vmap(jax.vmap(enn.sample_index))(keys)
    if layout.counted:
        counts = jax.vmap(lambda ids: jnp.bincount(ids, length=layout.num_members))(indices)
        return jnp.arange(layout.num_members), jnp.log(counts / num_samples)
    return indices, jnp.full((num_test, num_samples), -jnp.log(num_samples))


def _member_logits(enn: base.ENN, state, layout: _Layout, members, x, indices):
    """``x [chunk, inputs, d]`` -> logits ``[chunk, members, inputs, K]``: every member
    on all of the chunk's inputs at once (counted), or each test sample's own draws."""
    chunk, num_inputs, input_dim = x.shape
    if layout.counted:
        flat = x.reshape(chunk * num_inputs, input_dim)
        logits = jax.vmap(lambda index: enn.apply(state, flat, index))(members)
        return jnp.moveaxis(logits.reshape(layout.num_members, chunk, num_inputs, -1), 1, 0)
    return jax.vmap(lambda x_n, indices_n: jax.vmap(
        lambda index: enn.apply(state, x_n, index))(indices_n))(x, indices)


def _check_test(test: base.TestSamples, num_test: int, tau: int) -> None:
    if test.x.shape[:2] != (num_test, tau) or test.y.shape != (num_test, tau):
        raise ValueError(f"test samples of shape x {test.x.shape}, y {test.y.shape}; "
                         f"expected ({num_test}, {tau}, d) and ({num_test}, {tau})")
    if test.ood_x is not None and test.ood_x.shape != (num_test, test.x.shape[-1]):
        raise ValueError(f"out-of-distribution inputs of shape {test.ood_x.shape}; "
                         f"expected ({num_test}, {test.x.shape[-1]})")


def _check_logits(logits: jax.ShapeDtypeStruct, expected: tuple[int, ...],
                  input_shape: tuple[int, int]) -> None:
    """The agent's logits (their shape, traced) are real, one row of K per input."""
    if jnp.issubdtype(logits.dtype, jnp.complexfloating):  # softmax would drop a part
        raise ValueError(f"agent returned logits of dtype {logits.dtype}; logits must be "
                         "real numbers")
    if logits.shape != expected:
        raise ValueError(
            f"agent returned logits of shape {logits.shape[2:]} for inputs of shape "
            f"{input_shape}; expected {expected[2:]} (one row of {expected[-1]} class "
            "logits per input)")


def _chunk_terms(log_probs, y, keys, weights, tau: int, has_ood: bool, log_likelihood):
    """One chunk's joint log-likelihoods, mean predictions, splits (diagnostics), occupied
    cells and whether its logits were valid, from ``log_probs [chunk, members, inputs, K]``."""
    scored = log_probs[:, :, :tau]
    log_lik, cells = jax.vmap(log_likelihood)(keys, scored, y, weights)
    mean_log_probs = jax.nn.logsumexp(log_probs + weights[:, :, None, None], axis=1)
    # The split of the first input and the out-of-distribution one: N of each.
    probed = log_probs[:, :, ::tau] if has_ood else log_probs[:, :, :1]
    split = jax.vmap(diagnostics.split)(jnp.exp(probed), jnp.exp(weights))
    # A NaN or +inf logit makes its log-softmax row NaN, so checking the
    # log-probabilities finds it; a -inf logit is a probability of 0, which is allowed
    # (an infinite term, clipped and counted). Checking the logits themselves would give
    # XLA a second consumer of the forward pass's output, which it then materialises.
    return log_lik, jnp.exp(mean_log_probs), split, cells, ~jnp.any(jnp.isnan(scored))


def _evaluation(terms, test: base.TestSamples, layout: _Layout, log_weights, tau: int,
                num_samples: int) -> Evaluation:
    """The chunks' terms reduced to the estimate, accuracy, ECE and diagnostics."""
    log_lik, mean_probs, split, cells, valid = terms
    num_test, has_ood = test.y.shape[0], test.ood_x is not None
    kl_mean, kl_stderr, num_clipped = kl.kl_estimate(log_lik.reshape(num_test),
                                                     test.log_likelihood)
    mean_probs = mean_probs.reshape(num_test, -1, mean_probs.shape[-1])
    split = jax.tree.map(lambda a: a.reshape(num_test, -1), split)
    probs_in = mean_probs[:, :tau].reshape(num_test * tau, -1)
    labels = test.y.reshape(num_test * tau)
    ece_bins = jnp.stack(calibration.reliability_bins(probs_in, labels))  # the ECE's 15
    diagram = jnp.stack(calibration.reliability_diagram(probs_in, labels))  # Li & Zhu's 10
    distinct = (jnp.mean(jnp.sum(jnp.isfinite(log_weights), axis=1)) if layout.counted
                else jnp.array(num_samples))
    report = diagnostics.Inputs(
        diagram, mean_probs[:, 0], jax.tree.map(lambda a: a[:, 0], split),
        test.y[:, 0], mean_probs[:, tau] if has_ood else None,
        jax.tree.map(lambda a: a[:, -1], split) if has_ood else None,
        jnp.asarray(distinct, jnp.float32), jnp.mean(cells).astype(jnp.float32))
    return Evaluation(kl=kl_mean, kl_stderr=kl_stderr,
                      accuracy=calibration.accuracy(probs_in, labels),
                      ece=calibration.ece_from_bins(ece_bins, num_test * tau),
                      logits_valid=jnp.all(valid), num_clipped=num_clipped, diagnostics=report)


def _joint_log_likelihood(method: str, numerics, num_hyperplanes: int, num_samples: int):
    """``(key, log_probs, labels, log_weights) -> (log-likelihood, occupied cells)`` of one
    test sample by Algorithm 3 (cells NaN) or 4."""
    def log_likelihood(key, log_probs, labels, log_weights):
        if method == "monte_carlo":
            return (estimators.monte_carlo_log_likelihood(log_probs, labels, log_weights),
                    jnp.array(jnp.nan))
        return estimators.partition_log_likelihood_and_cells(
            key, log_probs, labels, log_weights, num_hyperplanes=num_hyperplanes,
            numerics=numerics, num_samples=num_samples)
    return log_likelihood


@functools.partial(jax.jit, static_argnames=("estimator", "numerics", "num_hyperplanes"))
def evaluate_log_probs(key: jax.Array, log_probs: jax.Array, test: base.TestSamples,
                       estimator: str = "monte_carlo", numerics: estimators.Numerics = "reference",
                       num_hyperplanes: int = 7) -> Evaluation:
    """The evaluation of given belief samples: ``log_probs [N, M, tau (+ 1), K]``, sample m
    of test tau-sample n being one network's class log-probabilities at its tau inputs
    (and then at its out-of-distribution input, where ``test`` has them).

    The same estimators and reductions as :func:`make_evaluator`'s, on predictions made
    elsewhere (a model in any framework, :mod:`neural_testbed.leaderboard.arrays`); with
    ``key`` the evaluator's key and the same draws it gives the same evaluation.
    ``estimator`` is ``"monte_carlo"`` or ``"partition"`` (resolve ``"auto"`` first).
    """
    num_test, num_samples, width, _ = log_probs.shape
    tau = test.y.shape[1]
    _check_test(test, num_test, tau)
    has_ood = test.ood_x is not None
    if width != tau + has_ood:
        what = "its tau inputs" + (" and its out-of-distribution one" if has_ood else "")
        raise ValueError(f"predictions at {width} inputs per test sample; expected "
                         f"{tau + has_ood} ({what})")
    log_likelihood = _joint_log_likelihood(estimator, numerics, num_hyperplanes, num_samples)
    chunk = largest_divisor_at_most(num_test, _MAX_ROWS_PER_CHUNK // (num_samples * width))
    layout = _Layout(False, num_samples, chunk, num_test // chunk)
    log_weights = jnp.full((num_test, num_samples), -jnp.log(num_samples))
    in_chunks = lambda a: a.reshape(layout.num_chunks, layout.chunk, *a.shape[1:])
    partition_key = jax.random.split(key)[1]  # as make_evaluator's evaluate splits its key
    terms = jax.lax.map(
        lambda c: _chunk_terms(*c, tau, has_ood, log_likelihood),
        (in_chunks(log_probs), in_chunks(test.y),
         in_chunks(jax.random.split(partition_key, num_test)), in_chunks(log_weights)))
    return _evaluation(terms, test, layout, log_weights, tau, num_samples)


def make_evaluator(
    enn: base.ENN,
    tau: int,
    num_classes: int,
    num_test: int = 1000,
    num_samples: int = 1000,
    estimator: Estimator = "auto",
    numerics: estimators.Numerics = "reference",
    num_hyperplanes: int = 7,
) -> Callable[[jax.Array, base.State, base.TestSamples], Evaluation]:
    """Builds ``evaluate(key, state, test) -> Evaluation``, a pure jittable function.

    Args:
      enn: the agent's sampling functions.
      tau: number of inputs in each test sample (1 = marginal).
      num_classes: K, checked against the agent's logits.
      num_test: N, the number of independent test tau-samples in ``test``.
      num_samples: M, the number of belief samples drawn for each test sample.
      estimator: ``"monte_carlo"`` (Algorithm 3), ``"partition"`` (Algorithm 4)
        or ``"auto"`` (Monte Carlo for tau < 10).
      numerics: Algorithm 4's numerics, ``"reference"`` (probability floor and
        cell smoothing, the default) or ``"paper"``; see :mod:`estimators`.
      num_hyperplanes: Algorithm 4's d (the paper: 7 on the testbed, 10 on real data).

    Returns:
      The evaluation function. ``test`` is a :class:`base.TestSamples` with
        ``x [N, tau, d]``, ``y [N, tau]`` and the exact ``log_likelihood [N]``
        (the result is d_KL) or ``None`` (the result is the negative
        log-likelihood).
    """
    for name, value in (("tau", tau), ("num_test", num_test), ("num_samples", num_samples),
                        ("num_hyperplanes", num_hyperplanes)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if numerics not in estimators.NUMERICS:
        raise ValueError(f"unknown numerics {numerics!r}; allowed: "
                         f"{', '.join(estimators.NUMERICS)}")
    log_likelihood = _joint_log_likelihood(kl.choose_estimator(tau, estimator), numerics,
                                           num_hyperplanes, num_samples)
    layout = _layout(enn, tau, num_test, num_samples)

    def evaluate(key: jax.Array, state: base.State, test: base.TestSamples) -> Evaluation:
        index_key, partition_key = jax.random.split(key)
        _check_test(test, num_test, tau)
        # Each test sample's out-of-distribution input goes through the network with
        # its tau inputs, under the same belief samples; the likelihood ignores it.
        has_ood = test.ood_x is not None
        x_all = (jnp.concatenate([test.x, test.ood_x[:, None, :]], axis=1) if has_ood
                 else test.x)
        members, log_weights = _draw_beliefs(index_key, enn, layout, num_test, num_samples)
        in_chunks = lambda a: a.reshape(layout.num_chunks, layout.chunk, *a.shape[1:])
        chunk_indices = None if layout.counted else jax.tree.map(in_chunks, members)
        logits = functools.partial(_member_logits, enn, state, layout, members)
        _check_logits(jax.eval_shape(logits, in_chunks(x_all)[0], None if layout.counted else
                                     jax.tree.map(lambda a: a[0], chunk_indices)),
                      (layout.chunk, layout.num_members, x_all.shape[1], num_classes),
                      x_all.shape[1:])

        def one_chunk(chunk_data):
            x, y, keys, weights, indices = chunk_data
            return _chunk_terms(jax.nn.log_softmax(logits(x, indices)), y, keys, weights, tau,
                                has_ood, log_likelihood)

        terms = jax.lax.map(one_chunk, (in_chunks(x_all), in_chunks(test.y),
                                        in_chunks(jax.random.split(partition_key, num_test)),
                                        in_chunks(log_weights), chunk_indices))
        return _evaluation(terms, test, layout, log_weights, tau, num_samples)

    return evaluate


@functools.partial(jax.jit, static_argnames=(
    "sampler", "num_classes", "num_samples", "estimator", "numerics"))
def _evaluate_sampler_jit(key, test, sampler, num_classes, num_samples, estimator, numerics):
    num_test, tau = test.y.shape
    evaluate = make_evaluator(base.sampler_as_enn(sampler), tau, num_classes, num_test,
                              num_samples, estimator, numerics)
    return evaluate(key, None, test)


def evaluate_sampler(
    key: jax.Array,
    sampler: base.EpistemicSampler,
    test: base.TestSamples,
    num_classes: int,
    num_samples: int = 1000,
    estimator: Estimator = "auto",
    numerics: estimators.Numerics = "reference",
) -> Evaluation:
    """Evaluates a plain ``sampler(x, key) -> logits`` on given test tau-samples.

    The sampler must be jittable. Hold it in a variable and pass the same
    object again to reuse the compiled evaluation.

    Example:
      >>> problem = leaderboard.get_sweep("paper")["classification_2d/97"]
      >>> instance = problem.instance()
      >>> test = problem.sample_test(jax.random.key(1), instance.env, tau=100)
      >>> sampler = lambda x, key: generative.environment_logits(instance.env, x)
      >>> evaluate_sampler(jax.random.key(2), sampler, test, num_classes=2).kl  # ~0
    """
    kl.choose_estimator(test.y.shape[-1], estimator)
    return _evaluate_sampler_jit(key, test, sampler, num_classes, num_samples, estimator,
                                 numerics)
