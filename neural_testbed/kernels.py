"""Covariance functions: the wide ReLU network's (the environment's) and the RBF.

The regression testbed draws its functions from the Gaussian process that a
one-hidden-layer ReLU network ``f(x) = sum_j v_j relu(w_j . x + b_j)`` tends to
as its width H grows (Neal, 1995; Cho and Saul, 2009: the arc-cosine kernel of
order 1), so that a finite network with this prior can match it (Wang et al.,
section 5). The environment's scales are those of the reference testbed's
kernels: weights of standard deviation 1 over the square root of the fan-in,
first-layer bias of standard deviation ``1 / sqrt(d)``, no output bias; they
are :func:`relu_nngp_kernel`'s defaults. Its variances are arguments so that
the ``gp`` agent can fit them; the squared-exponential :func:`rbf_kernel` is
that agent's other choice.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["rbf_kernel", "relu_nngp_kernel", "sample_relu_network"]


def relu_nngp_kernel(x1: jax.Array, x2: jax.Array, weight_variance=1.0,
                     bias_variance=1.0) -> jax.Array:
    """``k(x1, x2)``: ``[n, d]``, ``[m, d]`` -> ``[n, m]``.

    The network has ``w ~ N(0, weight_variance I / d)``, ``b ~ N(0, bias_variance / d)``
    and ``v ~ N(0, 1 / H)``; the defaults (1, 1) are the environment's. With the
    pre-activations' variances ``q(x) = (weight_variance |x|^2 + bias_variance) / d``
    and covariance ``c = (weight_variance x . x' + bias_variance) / d``,
    ``k = sqrt(q q') (sin t + (pi - t) cos t) / (2 pi)`` where ``cos t = c / sqrt(q q')``:
    so ``k(x, x) = q(x) / 2``. Scaling both variances by ``s`` scales ``k`` by ``s``
    (ReLU is positively homogeneous): the pair sets the output scale too.
    """
    d = x1.shape[-1]
    q1 = (weight_variance * jnp.sum(x1**2, axis=-1) + bias_variance) / d
    q2 = (weight_variance * jnp.sum(x2**2, axis=-1) + bias_variance) / d
    norm = jnp.sqrt(q1[:, None] * q2[None, :])
    cos = jnp.clip((weight_variance * (x1 @ x2.T) + bias_variance) / d / norm, -1.0, 1.0)
    return norm * _arc_cosine_shape(cos) / (2 * jnp.pi)


@jax.custom_jvp
def _arc_cosine_shape(cos: jax.Array) -> jax.Array:
    """``sin t + (pi - t) cos t`` with ``t = arccos(cos)``.

    Its derivative in ``cos`` is ``pi - t``, finite everywhere; differentiating
    through ``arccos`` instead gives ``0 x inf = NaN`` where ``cos = 1`` (on the
    diagonal), which would stop the ``gp`` agent's fit.
    """
    theta = jnp.arccos(cos)
    return jnp.sin(theta) + (jnp.pi - theta) * cos


@_arc_cosine_shape.defjvp
def _arc_cosine_shape_jvp(primals, tangents):
    (cos,), (cos_dot,) = primals, tangents
    return _arc_cosine_shape(cos), (jnp.pi - jnp.arccos(cos)) * cos_dot


def rbf_kernel(x1: jax.Array, x2: jax.Array, signal_variance=1.0,
               lengthscale=1.0) -> jax.Array:
    """``signal_variance exp(-|x1 - x2|^2 / (2 lengthscale^2))``: ``[n, d]``, ``[m, d]``
    -> ``[n, m]``; one lengthscale for every input dimension (isotropic)."""
    sq1 = jnp.sum(x1**2, axis=-1)[:, None]
    sq2 = jnp.sum(x2**2, axis=-1)[None, :]
    sq_dist = jnp.clip(sq1 + sq2 - 2 * (x1 @ x2.T), 0.0)
    return signal_variance * jnp.exp(-0.5 * sq_dist / lengthscale**2)


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
