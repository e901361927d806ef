"""Pieces shared by agents that train by minibatch gradient descent.

They honour ``Data.mask`` (padding is data, see :mod:`neural_testbed.base`):
minibatches are drawn from the pairs only, and :func:`mean_over_pairs` averages
over them, so an agent built on them may declare ``accepts_padding``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base

__all__ = [
    "L2_LAMBDAS",
    "adam_with_l2",
    "check_training_fields",
    "data_loss",
    "is_regression",
    "mean_over_pairs",
    "minibatch_sampler",
    "temperature",
    "train_minibatch",
    "weight_decay_scale",
]

Params = Any
LossFn = Callable[[jax.Array, Params, base.Data], jax.Array]  # (key, params, batch) -> loss

# The lambdas of :func:`weight_decay_scale` the paper's appendix B.1, B.2 and B.6 sweep.
L2_LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def weight_decay_scale(
    l2_weight_decay: float,
    num_train: int | jax.Array,
    prior: base.PriorKnowledge | base.RegressionPriorKnowledge,
    adaptive_weight_scale: bool,
    num_members: int = 1,
) -> jax.Array:
    """The paper's L2 scale: ``lambda / (members * T)``, times ``d * sqrt(temperature)`` if adaptive.

    The adaptive factor lets one lambda serve every temperature and input
    dimension (reference testbed, Appendix B). On regression problems it is
    ``d`` alone (:func:`temperature` is 1 there): the data term
    (:func:`data_loss`) is already divided by the noise variance, which plays
    the temperature's part.

    ``num_train`` is T, :func:`base.num_pairs` of the training data.
    """
    scale = l2_weight_decay / (num_members * num_train)
    if adaptive_weight_scale:
        scale = scale * prior.input_dim * jnp.sqrt(temperature(prior))
    return scale


def temperature(prior):
    """The temperature an agent scales its priors and regularisers by: the problem's on
    classification, 1 on regression.

    A classification environment's logits are its network's output divided by
    the temperature, so an agent's prior functions, weight priors and decays
    carry powers of it. A regression environment's ``f`` is drawn at unit scale
    (the kernel of a network with fan-in scaled weights), as a network's output
    at temperature 1; the known noise variance enters through the Gaussian data
    term of :func:`data_loss` (divided by it) instead, and the prior over ``f``
    does not depend on it.
    """
    return 1.0 if is_regression(prior) else prior.temperature


def is_regression(prior) -> bool:
    """Whether an agent is told about a regression problem (else K-class classification)."""
    return isinstance(prior, base.RegressionPriorKnowledge)


def data_loss(outputs: jax.Array, targets: jax.Array, prior) -> jax.Array:
    """Per-example loss, ``[..., n, out]`` outputs against ``[n]`` targets: softmax
    cross-entropy for classes; for regression the Gaussian negative log-likelihood
    with the known noise, ``(y - f)^2 / (2 noise_variance)`` (constants dropped)."""
    if is_regression(prior):
        return (targets - outputs[..., 0]) ** 2 / (2 * prior.noise_variance)
    targets = jnp.broadcast_to(targets, outputs.shape[:-1])
    return optax.softmax_cross_entropy_with_integer_labels(outputs, targets)


def mean_over_pairs(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    """The mean of per-row ``values [rows]`` over the rows that are pairs (``Data.mask``;
    None: every row)."""
    if mask is None:
        return values.mean()
    weights = mask.astype(values.dtype)
    return (weights @ values) / weights.sum()


def adam_with_l2(learning_rate: float, scale) -> optax.GradientTransformation:
    """Adam on the loss plus ``scale * |params|^2``: the reference's L2 term.

    ``add_decayed_weights(2 * scale)`` before Adam adds that term's gradient,
    i.e. coupled L2 (the gradient goes through Adam's normalisation), not
    decoupled weight decay as in AdamW.
    """
    return optax.chain(optax.add_decayed_weights(2 * scale), optax.adam(learning_rate))


def minibatch_sampler(data: base.Data, batch_size: int) -> Callable[[jax.Array], base.Data]:
    """``key -> batch``: ``batch_size`` training pairs drawn with replacement (no mask).

    With ``data.mask``, the draws are among the rows it marks, in order: the i-th pair
    is drawn exactly when it would be from the pairs alone, so padding changes no draw.
    The pairs' rows are found once, here, not at each draw.
    """
    num_train = base.num_pairs(data)
    rows = None  # the pairs' rows in order, where a mask says which they are
    if data.mask is not None:
        rows = jnp.nonzero(data.mask, size=data.mask.shape[0], fill_value=0)[0]

    def draw(key: jax.Array) -> base.Data:
        idx = jax.random.randint(key, (batch_size,), 0, num_train)
        if rows is not None:
            idx = rows[idx]
        return base.Data(x=data.x[idx], y=data.y[idx])

    return draw


def train_minibatch(
    key: jax.Array,
    loss_fn: LossFn,
    params: Params,
    data: base.Data,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    batch_size: int,
    num_active_steps: jax.Array | None = None,
) -> tuple[Params, jax.Array]:
    """Runs ``num_steps`` optimizer steps on minibatches drawn with replacement from the pairs.

    The whole loop is one ``lax.scan``: each step draws ``batch_size`` of the
    training pairs from its own key, so the run is a pure function of ``key`` and
    compiles once. ``loss_fn(key, params, batch)`` is differentiated with respect
    to ``params``; ``key`` is for its own randomness (dropout masks, weight
    draws); ``batch`` holds pairs only (no mask).

    With ``data.mask``, the draws are among the rows it marks
    (:func:`minibatch_sampler`), so padding changes no draw. ``num_active_steps``: a
    traced count of steps that update the parameters (the rest leave them as they
    are), for an agent whose number of steps depends on T, which padding makes traced;
    ``None``: every step.

    Returns:
      The trained parameters and the loss at each step, ``[num_steps]``.
    """
    draw_batch = minibatch_sampler(data, batch_size)

    def step(carry, xs):
        index, step_key = xs
        params, opt_state = carry
        batch_key, loss_key = jax.random.split(step_key)
        batch = draw_batch(batch_key)
        loss, grads = jax.value_and_grad(loss_fn, argnums=1)(loss_key, params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        updated = (optax.apply_updates(params, updates), opt_state)
        if num_active_steps is not None:
            updated = jax.tree.map(lambda new, old: jnp.where(index < num_active_steps, new, old),
                                   updated, carry)
        return updated, loss

    (params, _), losses = jax.lax.scan(
        step, (params, optimizer.init(params)),
        (jnp.arange(num_steps), jax.random.split(key, num_steps)),
    )
    return params, losses


def check_training_fields(config, linear_allowed: bool = False) -> None:
    """Checks the fields minibatch agents share (num_steps, batch_size, learning_rate,
    l2_weight_decay, hidden), raising an error that names the field and the rule.
    ``linear_allowed``: ``hidden=()`` (no hidden layer, a linear model) is allowed; the
    agents that read hidden features (laplace, deep_kernel, the ensembles' priors...)
    need one."""
    for name in ("num_steps", "batch_size"):
        value = getattr(config, name)
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    if not config.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {config.learning_rate!r}")
    if not config.l2_weight_decay >= 0:
        raise ValueError(f"l2_weight_decay must be >= 0, got {config.l2_weight_decay!r}")
    if (not config.hidden and not linear_allowed) or any(w < 1 for w in config.hidden):
        least = "zero" if linear_allowed else "one"
        raise ValueError(f"hidden must be {least} or more widths >= 1, got {config.hidden!r}")
