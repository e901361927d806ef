"""The KL estimate d_KL^tau of an agent on one problem, plus accuracy and ECE.

For each of N independent test tau-samples, the KL contribution is the exact
environment log-likelihood minus the agent's estimated joint log-likelihood
from M samples of its belief. The same M sampled models serve every test
tau-sample (as in the reference testbed); test samples are processed in
chunks so that memory stays bounded whatever M, N and tau are.
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base, memory
from neural_testbed.generative import mlp_classification as env_lib
from neural_testbed.likelihood import calibration, estimators

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "Evaluation",
    "choose_estimator",
    "evaluate_sampler",
    "make_evaluator",
]

Estimator = Literal["auto", "monte_carlo", "partition"]
ESTIMATORS = ("auto", "monte_carlo", "partition")
# Upper bound on (members x inputs) rows pushed through the network at once:
# about 26 MB per hidden layer of width 50 in float32. With M = 1000 distinct
# members and tau = 100 a chunk is one test sample (10^5 rows); twice that ran
# 1.7x slower for dropout on the 2-core machine (benchmarks/agents_zoo2.py).
_MAX_ROWS_PER_CHUNK = 2**17


class Evaluation(NamedTuple):
    """Scalars (arrays) summarising one evaluation."""

    kl: jax.Array  # mean over test tau-samples, nats
    kl_stderr: jax.Array  # standard error of that mean
    accuracy: jax.Array  # of the mean prediction, over all N * tau test inputs
    ece: jax.Array  # 15-bin expected calibration error of the mean prediction
    logits_finite: jax.Array  # bool: False if any agent logit was NaN or inf (see below)


def choose_estimator(tau: int, estimator: Estimator = "auto") -> str:
    """Resolves ``"auto"``: Monte Carlo for tau < 10, random partitioning otherwise."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    if estimator == "auto":
        return "monte_carlo" if tau < 10 else "partition"
    return estimator


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, max(1, limit)) + 1) if n % d == 0)


def _members_and_log_weights(enn: base.ENN, key: jax.Array, num_samples: int):
    """Draws M indices; returns the distinct members to evaluate and their log-weights."""
    indices = jax.vmap(enn.sample_index)(jax.random.split(key, num_samples))
    if enn.num_indices is not None and enn.num_indices <= num_samples:
        counts = jnp.bincount(indices, length=enn.num_indices)
        return jnp.arange(enn.num_indices), jnp.log(counts / num_samples)
    return indices, jnp.full((num_samples,), -jnp.log(num_samples))


def make_evaluator(
    enn: base.ENN,
    tau: int,
    num_classes: int,
    num_test: int = 1000,
    num_samples: int = 1000,
    estimator: Estimator = "auto",
):
    """Builds ``evaluate(key, state, env) -> Evaluation``, a pure jittable function.

    Args:
      enn: the agent's sampling functions.
      tau: number of inputs in each test sample (1 = marginal).
      num_classes: K, checked against the agent's logits.
      num_test: N, the number of independent test tau-samples.
      num_samples: M, the number of samples drawn from the agent's belief.
      estimator: ``"monte_carlo"`` (Algorithm 3), ``"partition"`` (Algorithm 4)
        or ``"auto"`` (Monte Carlo for tau < 10).

    Returns:
      The evaluation function.
    """
    for name, value in (("tau", tau), ("num_test", num_test), ("num_samples", num_samples)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    method = choose_estimator(tau, estimator)
    memory.keep_freed_memory()

    def evaluate(key: jax.Array, state: base.State, env: env_lib.Environment) -> Evaluation:
        index_key, data_key, partition_key = jax.random.split(key, 3)
        members, log_weights = _members_and_log_weights(enn, index_key, num_samples)
        num_members = log_weights.shape[0]
        test = env_lib.sample_test_data(data_key, env, num_test, tau)
        input_dim = test.x.shape[-1]
        chunk = _largest_divisor_at_most(num_test, _MAX_ROWS_PER_CHUNK // (num_members * tau))
        num_chunks = num_test // chunk

        def member_logits(x_flat):
            return jax.vmap(lambda index: enn.apply(state, x_flat, index))(members)

        expected = (num_members, chunk * tau, num_classes)
        got = jax.eval_shape(member_logits, jnp.zeros((chunk * tau, input_dim))).shape
        if got != expected:
            raise ValueError(
                f"agent returned logits of shape {got[1:]} for inputs of shape "
                f"{(chunk * tau, input_dim)}; expected {expected[1:]} "
                f"(one row of {num_classes} class logits per input)"
            )

        def one_chunk(chunk_data):
            x, y, keys = chunk_data  # [chunk, tau, d], [chunk, tau], [chunk]
            logits = member_logits(x.reshape(chunk * tau, input_dim))
            log_probs = jax.nn.log_softmax(logits).reshape(num_members, chunk, tau, num_classes)
            log_probs = jnp.moveaxis(log_probs, 1, 0)  # [chunk, members, tau, K]
            if method == "monte_carlo":
                log_lik = jax.vmap(estimators.monte_carlo_log_likelihood, (0, 0, None))(
                    log_probs, y, log_weights
                )
            else:
                log_lik = jax.vmap(estimators.partition_log_likelihood, (0, 0, 0, None))(
                    keys, log_probs, y, log_weights
                )
            mean_log_probs = jax.nn.logsumexp(log_probs + log_weights[:, None, None], axis=1)
            # A NaN or +-inf logit makes its log-softmax row NaN or -inf, so
            # checking the log-probabilities finds it. Checking the logits
            # themselves gives XLA a second consumer of the forward pass's
            # output and doubled the tau = 100 evaluation time on CPU.
            return log_lik, jnp.exp(mean_log_probs), jnp.all(jnp.isfinite(log_probs))

        keys = jax.random.split(partition_key, num_test)
        log_lik, mean_probs, finite = jax.lax.map(
            one_chunk,
            (
                test.x.reshape(num_chunks, chunk, tau, input_dim),
                test.y.reshape(num_chunks, chunk, tau),
                keys.reshape(num_chunks, chunk),
            ),
        )
        kl_per_sample = test.log_likelihood - log_lik.reshape(num_test)
        mean_probs = mean_probs.reshape(num_test * tau, num_classes)
        labels = test.y.reshape(num_test * tau)
        return Evaluation(
            kl=jnp.mean(kl_per_sample),
            kl_stderr=jnp.std(kl_per_sample, ddof=1) / jnp.sqrt(num_test) if num_test > 1
            else jnp.zeros(()),
            accuracy=calibration.accuracy(mean_probs, labels),
            ece=calibration.expected_calibration_error(mean_probs, labels),
            logits_finite=jnp.all(finite),
        )

    return evaluate


@functools.partial(jax.jit, static_argnames=("sampler", "tau", "num_test", "num_samples", "estimator"))
def _evaluate_sampler_jit(key, env, sampler, tau, num_test, num_samples, estimator):
    num_classes = env.params[-1]["w"].shape[-1]
    evaluate = make_evaluator(
        base.sampler_as_enn(sampler), tau, num_classes, num_test, num_samples, estimator
    )
    return evaluate(key, None, env)


def evaluate_sampler(
    sampler: base.EpistemicSampler,
    env: env_lib.Environment,
    key: jax.Array,
    tau: int = 1,
    num_test: int = 1000,
    num_samples: int = 1000,
    estimator: Estimator = "auto",
) -> Evaluation:
    """Evaluates a plain ``sampler(x, key) -> logits`` on one environment.

    The sampler must be jittable. Hold it in a variable and pass the same
    object again to reuse the compiled evaluation.

    Example:
      >>> env = generative.sample_environment(jax.random.key(0), temperature=0.1)
      >>> sampler = lambda x, key: generative.environment_logits(env, x)
      >>> evaluate_sampler(sampler, env, jax.random.key(1), tau=100).kl  # ~0
    """
    env_lib.check_temperature(env.temperature)
    choose_estimator(tau, estimator)
    return _evaluate_sampler_jit(key, env, sampler, tau, num_test, num_samples, estimator)
