"""The multilayer perceptron shared by the environments and the agents.

One small pure-JAX MLP, so that an agent can build a network (or a prior
function) exactly like the environment's: weights are truncated normal (cut
at two standard deviations) with stddev ``1 / sqrt(fan_in)``, biases zero
except, optionally, the first layer's. This matches the reference testbed's
Haiku defaults.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp

__all__ = ["MLPParams", "apply_mlp", "init_mlp"]

# A list of layers, each {"w": [fan_in, fan_out], "b": [fan_out]}.
MLPParams = list[dict[str, jax.Array]]


def init_mlp(
    key: jax.Array,
    input_dim: int,
    layer_sizes: Sequence[int],
    first_bias_stddev: float = 0.0,
) -> MLPParams:
    """Draws MLP parameters with fan-in scaling.

    Args:
      key: PRNG key.
      input_dim: size of the input vector.
      layer_sizes: output size of each layer; the last one is the logit size.
      first_bias_stddev: stddev of the first layer's Gaussian bias (the
        environment uses ``1 / sqrt(input_dim)``); other biases are zero.

    Returns:
      The parameters, a list of ``{"w", "b"}`` dicts.
    """
    params = []
    fan_in = input_dim
    keys = jax.random.split(key, 2 * len(layer_sizes))
    for i, fan_out in enumerate(layer_sizes):
        w = jax.random.truncated_normal(keys[2 * i], -2.0, 2.0, (fan_in, fan_out))
        w = w / jnp.sqrt(fan_in)
        if i == 0 and first_bias_stddev > 0:
            b = first_bias_stddev * jax.random.normal(keys[2 * i + 1], (fan_out,))
        else:
            b = jnp.zeros((fan_out,))
        params.append({"w": w, "b": b})
        fan_in = fan_out
    return params


def apply_mlp(params: MLPParams, x: jax.Array) -> jax.Array:
    """ReLU MLP forward pass: ``x [..., input_dim] -> [..., layer_sizes[-1]]``."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]
