"""The kernel of an infinitely wide one-hidden-layer ReLU network (arc-cosine, order 1).

A network ``f(x) = sum_j v_j relu(w_j . x + b_j)`` with ``w_j ~ N(0, I / d)``,
``b_j ~ N(0, 1 / d)`` and ``v_j ~ N(0, 1 / H)`` tends, as its width H grows,
to a Gaussian process with this kernel (Neal, 1995; Cho and Saul, 2009). The
regression testbed draws its functions from that process, so that a finite
network with this prior can match it (Wang et al., section 5); the scales are
those of the reference testbed's kernels (weights of standard deviation 1 over
the square root of the fan-in, first-layer bias of standard deviation
``1 / sqrt(d)``, no output bias).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["relu_nngp_kernel", "sample_relu_network"]


def relu_nngp_kernel(x1: jax.Array, x2: jax.Array) -> jax.Array:
    """``k(x1, x2)``: ``[n, d]``, ``[m, d]`` -> ``[n, m]``.

    With the pre-activations' variances ``q(x) = (|x|^2 + 1) / d`` and
    covariance ``c = (x . x' + 1) / d``, ``k = sqrt(q q') (sin t + (pi - t) cos t)
    / (2 pi)`` where ``cos t = c / sqrt(q q')``: so ``k(x, x) = q(x) / 2``.
    """
    d = x1.shape[-1]
    q1 = (jnp.sum(x1**2, axis=-1) + 1.0) / d
    q2 = (jnp.sum(x2**2, axis=-1) + 1.0) / d
    norm = jnp.sqrt(q1[:, None] * q2[None, :])
    cos = jnp.clip(((x1 @ x2.T) + 1.0) / d / norm, -1.0, 1.0)
    theta = jnp.arccos(cos)
    return norm * (jnp.sin(theta) + (jnp.pi - theta) * cos) / (2 * jnp.pi)


def sample_relu_network(key: jax.Array, input_dim: int, width: int) -> list[dict[str, jax.Array]]:
    """A finite network of this kernel's prior: H = ``width`` hidden ReLU units.

    Weights and first-layer biases are Gaussian at the scales above (``N(0, 1 / d)``,
    output weights ``N(0, 1 / H)``, no output bias), so over draws its outputs have
    covariance exactly :func:`relu_nngp_kernel` at any width (the sum over units
    is of H independent terms each of covariance k / H); only their higher
    moments depend on H. An agent reads it as a random function drawn like the
    environment's (the ensemble+ agent's prior functions on regression).

    Returns:
      The parameters in :func:`neural_testbed.networks.init_mlp`'s layout,
      layers ``d -> H -> 1``.
    """
    w_key, b_key, v_key = jax.random.split(key, 3)
    return [
        {"w": jax.random.normal(w_key, (input_dim, width)) / jnp.sqrt(input_dim),
         "b": jax.random.normal(b_key, (width,)) / jnp.sqrt(input_dim)},
        {"w": jax.random.normal(v_key, (width, 1)) / jnp.sqrt(width), "b": jnp.zeros((1,))},
    ]
