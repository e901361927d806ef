"""The random-MLP classification environment of the Neural Testbed.

Inputs are ``x ~ N(0, I_d)``; a random ReLU MLP ``d -> 50 -> 50 -> K`` (fan-in
scaled truncated-normal weights, first-layer bias ``N(0, 1/d)``, other biases
zero) gives logits, which are divided by a temperature; labels are drawn from
the softmax of the result. Everything here is a pure function of a PRNG key.

Reference: Osband et al., "Evaluating predictive distributions: does Bayesian
deep learning work?" (the Neural Testbed), section 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from neural_testbed import base, networks

__all__ = [
    "Environment",
    "TestSamples",
    "check_temperature",
    "environment_logits",
    "sample_environment",
    "sample_test_data",
    "sample_train_data",
]


class Environment(NamedTuple):
    """A sampled environment: the MLP's parameters and its temperature."""

    params: networks.MLPParams
    temperature: jax.Array | float  # > 0; logits are divided by it


class TestSamples(NamedTuple):
    """N independent test tau-samples with their exact log-likelihoods."""

    x: jax.Array  # [num_test, tau, input_dim]
    y: jax.Array  # [num_test, tau] int32
    log_likelihood: jax.Array  # [num_test]: sum over tau of log P(y | env, x)


def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_temperature(temperature) -> None:
    """Raises a clear error for a concrete temperature that is not > 0."""
    if isinstance(temperature, (int, float)) and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def sample_environment(
    key: jax.Array,
    temperature: jax.Array | float,
    input_dim: int = 2,
    num_classes: int = 2,
    hidden: Sequence[int] = (50, 50),
) -> Environment:
    """Draws a random-MLP environment.

    Args:
      key: PRNG key; the same key gives the same environment.
      temperature: logits are divided by it; low temperature = high SNR.
      input_dim: d, the input dimension.
      num_classes: K, the number of classes.
      hidden: widths of the hidden layers.

    Returns:
      The environment.

    Example:
      >>> env = sample_environment(jax.random.key(0), temperature=0.1)
      >>> data = sample_train_data(jax.random.key(1), env, num_train=10)
    """
    _check_positive_int("input_dim", input_dim)
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    check_temperature(temperature)
    params = networks.init_mlp(
        key, input_dim, (*hidden, num_classes), first_bias_stddev=1.0 / input_dim**0.5
    )
    return Environment(params=params, temperature=temperature)


def environment_logits(env: Environment, x: jax.Array) -> jax.Array:
    """Tempered logits of the environment: ``[..., input_dim] -> [..., K]``."""
    return networks.apply_mlp(env.params, x) / env.temperature


def _input_dim(env: Environment) -> int:
    return env.params[0]["w"].shape[0]


def sample_train_data(key: jax.Array, env: Environment, num_train: int) -> base.Data:
    """Draws T training pairs ``x ~ N(0, I)``, ``y ~ softmax(env(x))``."""
    _check_positive_int("num_train (T)", num_train)
    x_key, y_key = jax.random.split(key)
    x = jax.random.normal(x_key, (num_train, _input_dim(env)))
    y = jax.random.categorical(y_key, environment_logits(env, x))
    return base.Data(x=x, y=y.astype(jnp.int32))


def sample_test_data(
    key: jax.Array, env: Environment, num_test: int, tau: int
) -> TestSamples:
    """Draws ``num_test`` independent tau-samples and their exact log-likelihoods.

    Each tau-sample is tau inputs drawn i.i.d. from ``N(0, I)`` with labels from
    the environment; its log-likelihood is the sum of ``log P(y_t | env, x_t)``.
    """
    _check_positive_int("num_test", num_test)
    _check_positive_int("tau", tau)
    x_key, y_key = jax.random.split(key)
    x = jax.random.normal(x_key, (num_test, tau, _input_dim(env)))
    logits = environment_logits(env, x)
    y = jax.random.categorical(y_key, logits).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(logits)
    log_lik = jnp.take_along_axis(log_probs, y[..., None], axis=-1)[..., 0].sum(-1)
    chex.assert_shape([y, log_lik], [(num_test, tau), (num_test,)])
    return TestSamples(x=x, y=y, log_likelihood=log_lik)
