"""laplace: the mlp agent with a last-layer Laplace approximation of its posterior.

Train the mlp agent (exactly: same config, same key, same network); keep its
hidden layers as a fixed feature map ``phi: R^d -> R^m`` and put a Gaussian
posterior on the last layer ``theta = [W; b]`` (``[(m + 1), K]``, flattened to
``P = (m + 1) K`` numbers) around the trained values ``theta_hat``:

    theta ~ N(theta_hat, H^-1),
    H = prior_precision * I + sum_t J_t^T (diag(p_t) - p_t p_t^T) J_t,

where ``p_t = softmax(theta_hat^T [phi(x_t); 1])`` and ``J_t = d logits / d
theta`` at training input ``t``. The sum is the generalised Gauss-Newton
(GGN, here equal to the Fisher) matrix of the softmax cross-entropy summed
over the T training pairs. The logits are linear in ``theta``, so this matrix
is also the exact Hessian of the negative log-likelihood with respect to the
last layer. The GGN and Hessian forms of the last-layer Laplace
approximation are therefore the same here.

Which curvature: the full ``P x P`` matrix. For the testbed ``P = 51 * 2 =
102`` (510 for K = 10), so the full matrix costs less than the MLP's training
and keeps what the cheaper forms lose: a diagonal approximation drops every
correlation between weights (and between a feature's weights for different
classes, which carry the softmax's shift invariance), and a Kronecker
factorisation (KFAC) replaces a sum of Kronecker products by a product of
sums, which is not exact even for one layer. The factor of ``H`` is computed
by QR, never forming ``H``: ``H = B^T B`` with ``B`` the rows
``(I - u u^T) diag(u) J_t`` (``u = sqrt(p_t)``, one block of K rows per
training input) stacked on ``sqrt(prior_precision) I``. A sampled last layer
is ``theta_hat + R^-1 z`` with ``z ~ N(0, I_P)`` and ``H = R^T R``.

A sampled network is the trained feature extractor with a sampled last layer.
The ENN index is the key that draws ``z``; the same last layer serves every
input of a call.

The prior precision is swept. The mlp's own L2 term corresponds to a prior
precision of ``2 T * scale = 2 lambda d sqrt(temperature)``: 0.4 to 2.8 for
the default lambda = 1 and d = 2, inside the swept range. A precision of 1e8
gives back the mlp's predictions. The default, 10, had the lowest d_KL^agg
on the quick sweep. Smaller precisions spread the samples further. They
lower d_KL^100 a little more at small T but raise d_KL^1. At T = 1000,
precisions of 0.1 and below do worse than the mlp at both taus. They leave
large variance on the features that are rarely active in training.

Compared with mlp: on the quick sweep (18 problems, N = M = 1000, paired
keys) with default configs, laplace minus mlp was +0.0005 +- 0.0004 at
tau = 1 (d_KL 0.0631 against 0.0625: no real change, as the samples keep the
mlp's mean and only spread around it). At tau = 100 it was -0.39 +- 0.19
(5.69 against 6.08, a ratio of 0.94). The gain comes from T = 10 (13.7
against 14.8) and from temperature 0.5 (2.17 against 2.77). At T = 1000 the
two are equal (0.856 against 0.855).

References:
  MacKay, "A practical Bayesian framework for backpropagation networks",
  Neural Computation 1992.
  Kristiadi, Hein and Hennig, "Being Bayesian, even just a bit, fixes
  overconfidence in ReLU networks", ICML 2020.
  Daxberger et al., "Laplace redux: effortless Bayesian deep learning",
  NeurIPS 2021.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base, networks
from neural_testbed.agents import _threefry, mlp, training, validation

__all__ = [
    "LaplaceConfig",
    "LaplaceState",
    "fit_last_layer",
    "last_layer_features",
    "laplace_sweep",
    "last_layer_precision_factor",
    "make_laplace_agent",
]


@dataclasses.dataclass(frozen=True)
class LaplaceConfig:
    """Hyperparameters of the laplace agent: the prior precision and the mlp's."""

    prior_precision: float = 10.0  # precision of the Gaussian prior on the last layer, > 0
    hidden: tuple[int, ...] = (50, 50)  # the mlp's hidden layer widths, ReLU; m = hidden[-1]
    learning_rate: float = 1e-3  # the mlp's Adam step size
    num_steps: int = 1000  # the mlp's Adam steps
    batch_size: int = 100  # the mlp's minibatch size, drawn with replacement
    l2_weight_decay: float = 1.0  # the mlp's lambda; loss += lambda / T * |params|^2
    adaptive_weight_scale: bool = True  # the mlp's decay times d * sqrt(temperature)

    def __post_init__(self):
        if isinstance(self.prior_precision, (int, float)) and not self.prior_precision > 0:
            raise ValueError(f"prior_precision must be > 0, got {self.prior_precision!r}")
        training.check_training_fields(self)
        validation.check_fields(self)

    def mlp_config(self) -> mlp.MLPConfig:
        """The config of the mlp whose last layer is approximated."""
        return mlp.MLPConfig(
            hidden=self.hidden,
            learning_rate=self.learning_rate,
            num_steps=self.num_steps,
            batch_size=self.batch_size,
            l2_weight_decay=self.l2_weight_decay,
            adaptive_weight_scale=self.adaptive_weight_scale,
        )


class LaplaceState(NamedTuple):
    """A trained laplace agent."""

    params: networks.MLPParams  # the trained mlp; its last layer is theta_hat
    sample_matrix: jax.Array  # [P, P] R^-1, upper triangular; P = (m + 1) K


def last_layer_features(params: networks.MLPParams, x: jax.Array) -> jax.Array:
    """``[phi(x); 1]``, ``[n, m + 1]``: the last hidden layer and a constant for the bias."""
    hidden = jax.nn.relu(networks.apply_mlp(params[:-1], x))
    return jnp.concatenate([hidden, jnp.ones_like(hidden[:, :1])], axis=-1)


def last_layer_precision_factor(
    features: jax.Array, logits: jax.Array, prior_precision: float | jax.Array
) -> jax.Array:
    """``R [P, P]`` (upper triangular) with ``R^T R = prior_precision I + GGN``.

    Args:
      features: ``[phi(x_t); 1]`` of the training inputs, ``[T, m + 1]``.
      logits: the network's logits there, ``[T, K]``.
      prior_precision: a positive scalar.

    The parameters are ordered as ``theta.reshape(-1)`` for ``theta [(m + 1), K]``.
    """
    num_train, width = features.shape
    num_classes = logits.shape[-1]
    u = jnp.sqrt(jax.nn.softmax(logits))  # [T, K]
    eye = jnp.eye(num_classes, dtype=logits.dtype)
    # diag(p) - p p^T = C^T C with C = (I - u u^T) diag(u), as I - u u^T is a projector.
    root = (eye - u[:, :, None] * u[:, None, :]) * u[:, None, :]  # [T, K, K]
    # d logits_k / d theta[i, l] = features[i] * delta_kl, so C J = C[k, l] * features[i].
    rows = jnp.einsum("tkl,ti->tkil", root, features).reshape(num_train * num_classes,
                                                               width * num_classes)
    num_params = width * num_classes
    stacked = jnp.concatenate(
        [rows, jnp.sqrt(prior_precision) * jnp.eye(num_params, dtype=rows.dtype)])
    r = jnp.linalg.qr(stacked, mode="r")  # [P, P]
    return r * jnp.sign(jnp.diag(r))[:, None]


def fit_last_layer(
    params: networks.MLPParams, x: jax.Array, prior_precision: float | jax.Array,
    mask: jax.Array | None = None,
) -> LaplaceState:
    """The Laplace posterior of the last layer of trained ``params`` given training inputs
    ``x [T, d]`` (the labels do not enter: the GGN uses the network's own probabilities).

    ``mask``: the rows of ``x`` that are training inputs (``Data.mask``; None: all); the
    others' feature rows are zeroed, which adds nothing to the GGN.
    """
    features = last_layer_features(params, x)  # [T, m + 1]
    if mask is not None:
        features = jnp.where(mask[:, None], features, 0.0)
    last = params[-1]
    logits = features[:, :-1] @ last["w"] + last["b"]
    r = last_layer_precision_factor(features, logits, prior_precision)
    eye = jnp.eye(r.shape[0], dtype=r.dtype)
    inverse = jax.scipy.linalg.solve_triangular(r, eye, lower=False)  # R^-1
    return LaplaceState(params=params, sample_matrix=inverse)


def make_laplace_agent(config: LaplaceConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the laplace agent.

    Example:
      >>> agent = make_laplace_agent(LaplaceConfig(prior_precision=10.0), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))  # [n, K]
    """

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge) -> LaplaceState:
        # The mlp agent's network, bit for bit: trained from this config's mlp fields.
        params = mlp.train_mlp(key, data, prior, shapes, config)
        return fit_last_layer(params, data.x, config.prior_precision, data.mask)

    def apply(state: LaplaceState, x: jax.Array, index: jax.Array) -> jax.Array:
        last = state.params[-1]
        theta_hat = jnp.concatenate([last["w"], last["b"][None, :]])  # [m + 1, K]
        features = last_layer_features(state.params, x)  # [n, m + 1]
        num_params = state.sample_matrix.shape[0]
        # logits = features @ (theta_hat + reshape(R^-1 z)) = mean + B z, with
        # B = d logits / d theta @ R^-1 ([n, K, P]). B does not depend on z, so
        # when the evaluator vmaps over many z at the same inputs it is computed once.
        b = jnp.einsum("ni,ilp->nlp", features,
                       state.sample_matrix.reshape(*theta_hat.shape, num_params))
        # fast_key: the same z, drawn faster on CPU (the evaluator draws 10^6).
        z = jax.random.normal(_threefry.fast_key(index), (num_params,))
        return features @ theta_hat + b @ z

    def sample_index(key: jax.Array) -> jax.Array:
        return key  # the key of z

    # The mlp trains on the pairs alone; the GGN counts only those.
    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=None),
                      accepts_padding=True)


def laplace_sweep() -> tuple[LaplaceConfig, ...]:
    """prior precision in {1e-2, ..., 1e3} x the mlp's lambda in {0.1, 1, 10} (18 configs)."""
    return tuple(
        LaplaceConfig(prior_precision=prec, l2_weight_decay=lam)
        for prec, lam in itertools.product((1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3), (0.1, 1.0, 10.0))
    )
