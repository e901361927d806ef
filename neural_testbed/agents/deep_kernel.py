"""deep_kernel: a Gaussian process on the logits whose kernel is a trained MLP's features.

Paper, appendix B.9 ("Gaussian process with learned kernel"). Train an MLP
``Z = W phi(x) + b`` as the mlp agent does; its penultimate layer
``phi: R^d -> R^m`` defines the kernel ``k(x, x') = phi(x)^T phi(x')``. For
each class ``i`` the logits ``Z^(i)`` of the T training inputs and of tau test
inputs are jointly Gaussian with that kernel and noise ``sigma^2`` on the
training logits. With ``Phi`` the ``[T, m]`` training features and ``Phi_*``
the ``[tau, m]`` test features, the conditional covariance of the test logits
is, by the Woodbury identity,

    Sigma = Phi_* Phi_*^T - Phi_* Phi^T (sigma^2 I + Phi Phi^T)^-1 Phi Phi_*^T
          = sigma^2 Phi_* (sigma^2 I + Phi^T Phi)^-1 Phi_*^T,

an ``m x m`` inverse instead of a ``T x T`` one. The mean is not the GP's
(the training logits are never observed) but the network's output ``mu``.
With the Cholesky factor ``sigma^2 I + Phi^T Phi = L L^T``, one posterior
sample of the logits of all K classes at once is

    Z_* = mu + sigma Phi_* L^-T zeta,   zeta [m, K] i.i.d. N(0, 1).

One ``zeta`` is one sampled function: the ENN index is the key that draws it,
and the same ``zeta`` serves every input of a call, so the tau inputs of a
joint prediction see one function. Training stores ``sigma L^-T`` (``[m, m]``)
with the network, so a sample costs two small matrix products.

``L`` is computed without forming ``Phi^T Phi``: it is ``R^T`` from the QR
factorisation of ``[Phi; sigma I]`` (``[T + m, m]``), since
``[Phi; sigma I]^T [Phi; sigma I] = sigma^2 I + Phi^T Phi``. In float32 the
direct Cholesky factorisation fails (NaN) once ``|Phi|^2 / sigma^2`` nears
``1e7``, e.g. T = 1000 sharp features and a small sigma; QR stays accurate.

Where the reference code (``agents/factories/deep_kernel.py``) differs from
the appendix, this module follows the appendix. The sample gets no extra
scale factor, sigma^2 is the hyperparameter, and phi is the network's own
last hidden layer. The reference's choices are options: sigma^2 tied to the
temperature (``temperature_scaled_sigma``) and phi normalised to unit length
(``normalization``). On the quick sweep the appendix's form with sigma^2 = 1
scored d_KL^agg 0.114. The mlp scored 0.116 and the reference's default
0.164. See docs/differences.md, "deep_kernel".

References:
  Osband et al., "The Neural Testbed: evaluating joint predictions",
  NeurIPS 2022, appendix B.9.
  Wilson, Hu, Salakhutdinov and Xing, "Deep kernel learning", AISTATS 2016.
  Rasmussen and Williams, "Gaussian processes for machine learning", 2006.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, networks
from neural_testbed.agents import _threefry, training, validation

__all__ = [
    "DeepKernelConfig",
    "DeepKernelState",
    "cholesky_factor",
    "deep_kernel_sweep",
    "features_and_logits",
    "make_deep_kernel_agent",
    "posterior_logits",
]

# Where phi is normalised to unit length (as in the reference's three modes):
# "during_training": inside the network (the last layer reads phi / |phi|, so
# the mean and the kernel share the normalised features); "only_output": only
# the kernel's features (the network is the plain mlp); "none": never.
Normalization = Literal["during_training", "only_output", "none"]
_NORM_EPS = 1e-6  # |phi| + eps in the normalisation, as the reference


@dataclasses.dataclass(frozen=True)
class DeepKernelConfig:
    """Hyperparameters of the deep_kernel agent."""

    sigma_squared: float = 1.0  # sigma^2, the GP's noise variance on the training logits, > 0
    temperature_scaled_sigma: bool = False  # use sigma^2 * temperature instead (the reference)
    normalization: Normalization = "none"  # where phi is scaled to unit length, see above
    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU; m = hidden[-1]
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / T * |params|^2 (as mlp)
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    def __post_init__(self):
        if isinstance(self.sigma_squared, (int, float)) and not self.sigma_squared > 0:
            raise ValueError(f"sigma_squared must be > 0, got {self.sigma_squared!r}")
        training.check_training_fields(self)
        validation.check_fields(self)


class DeepKernelState(NamedTuple):
    """A trained deep_kernel agent."""

    params: networks.MLPParams  # the trained MLP (its last layer gives mu)
    sample_matrix: jax.Array  # [m, m] sigma L^-T, upper triangular


def features_and_logits(
    params: networks.MLPParams, x: jax.Array, normalization: Normalization
) -> tuple[jax.Array, jax.Array]:
    """The kernel's features ``phi(x) [n, m]`` and the network's logits ``mu [n, K]``."""
    hidden = jax.nn.relu(networks.apply_mlp(params[:-1], x))  # [n, m], the last hidden layer
    # |phi|, with a zero (not NaN) gradient where every unit is off: phi = 0.
    square = jnp.sum(hidden**2, axis=-1, keepdims=True)
    norm = jnp.where(square > 0, jnp.sqrt(jnp.where(square > 0, square, 1.0)), 0.0)
    unit = hidden / (_NORM_EPS + norm)
    last = params[-1]
    if normalization == "during_training":
        return unit, unit @ last["w"] + last["b"]
    logits = hidden @ last["w"] + last["b"]
    return (unit if normalization == "only_output" else hidden), logits


def cholesky_factor(features: jax.Array, sigma: jax.Array) -> jax.Array:
    """The lower Cholesky factor ``L`` of ``sigma^2 I + Phi^T Phi``, by QR of ``[Phi; sigma I]``.

    Args:
      features: ``Phi [T, m]``.
      sigma: a positive scalar.

    Returns:
      ``L [m, m]``, lower triangular with a positive diagonal.
    """
    m = features.shape[-1]
    stacked = jnp.concatenate([features, sigma * jnp.eye(m, dtype=features.dtype)])  # [T+m, m]
    r = jnp.linalg.qr(stacked, mode="r")  # [m, m], R^T R = sigma^2 I + Phi^T Phi
    r = r * jnp.sign(jnp.diag(r))[:, None]  # rows of a negative pivot flipped: R^T R unchanged
    return r.T


def posterior_logits(
    state: DeepKernelState, x: jax.Array, zeta: jax.Array, normalization: Normalization
) -> jax.Array:
    """One sampled function at ``x [n, d]``: ``mu + sigma Phi_* L^-T zeta``, ``[n, K]``.

    ``zeta [m, K]`` is the standard normal draw; the same ``zeta`` for every
    input makes the ``n`` outputs one function's.
    """
    phi, mu = features_and_logits(state.params, x, normalization)
    # Phi_* sigma L^-T first: it does not depend on zeta, so when the evaluator
    # vmaps over many zetas at the same inputs it is computed once.
    scaled = phi @ state.sample_matrix  # [n, m]
    (n, m), num_classes = scaled.shape, zeta.shape[-1]
    # scaled @ zeta written as [n, K, m K] @ vec(zeta): over 1000 zetas, XLA on CPU
    # runs this matrix-vector form faster than the [n, m] @ [m, K] product.
    eye = jnp.eye(num_classes, dtype=scaled.dtype)
    blocks = jnp.einsum("nj,kl->nkjl", scaled, eye).reshape(n, num_classes, m * num_classes)
    return mu + blocks @ zeta.reshape(m * num_classes)


def make_deep_kernel_agent(config: DeepKernelConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the deep_kernel agent.

    Example:
      >>> agent = make_deep_kernel_agent(DeepKernelConfig(sigma_squared=0.1), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))  # [n, K]
    """
    norm = config.normalization

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge) -> DeepKernelState:
        init_key, train_key = jax.random.split(key)
        params = networks.init_mlp(
            init_key, shapes.input_dim, (*config.hidden, shapes.num_outputs)
        )
        scale = training.weight_decay_scale(
            config.l2_weight_decay, base.num_pairs(data), prior, config.adaptive_weight_scale
        )
        optimizer = training.adam_with_l2(config.learning_rate, scale)

        def loss_fn(key, params, batch):
            del key  # deterministic network
            _, logits = features_and_logits(params, batch.x, norm)
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch.y).mean()

        params, _ = training.train_minibatch(
            train_key, loss_fn, params, data, optimizer, config.num_steps, config.batch_size)
        # The posterior over the last layer, from every training input; padding rows
        # (Data.mask) are zeroed, which adds nothing to Phi^T Phi.
        phi, _ = features_and_logits(params, data.x, norm)  # [T, m]
        if data.mask is not None:
            phi = jnp.where(data.mask[:, None], phi, 0.0)
        sigma_squared = config.sigma_squared
        if config.temperature_scaled_sigma:
            sigma_squared = sigma_squared * prior.temperature
        sigma = jnp.sqrt(jnp.asarray(sigma_squared, phi.dtype))
        chol = cholesky_factor(phi, sigma)
        eye = jnp.eye(phi.shape[-1], dtype=phi.dtype)
        inverse = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)  # L^-1
        return DeepKernelState(params=params, sample_matrix=sigma * inverse.T)

    def apply(state: DeepKernelState, x: jax.Array, index: jax.Array) -> jax.Array:
        # fast_key: the same zeta, drawn faster on CPU (the evaluator draws 10^6).
        zeta = jax.random.normal(_threefry.fast_key(index), (config.hidden[-1], shapes.num_outputs))
        return posterior_logits(state, x, zeta, norm)

    def sample_index(key: jax.Array) -> jax.Array:
        return key  # the key of zeta: smaller to store than zeta itself

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=None),
                      accepts_padding=True)


def deep_kernel_sweep() -> tuple[DeepKernelConfig, ...]:
    """sigma^2 in {0.01, ..., 100} x lambda in the reference's {1e-6, 1e-5, 1e-4, 1} (20)."""
    return tuple(
        DeepKernelConfig(sigma_squared=s2, l2_weight_decay=lam)
        for s2, lam in itertools.product((0.01, 0.1, 1.0, 10.0, 100.0), (1e-6, 1e-5, 1e-4, 1.0))
    )
