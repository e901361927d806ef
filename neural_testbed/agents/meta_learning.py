"""What the neural-process agents (cnp, np, anp) share: meta-training on the told prior.

A neural process is not fitted to the T training pairs: it is meta-trained on many
functions drawn from the prior the agent is told about, and the pairs are only the
context it is then conditioned on. The three agents differ in their networks and
loss; the data they meta-train on, the sizes of their contexts, the likelihood of a
target and the training loop are the same, and live here so that the agents compare
like with like (one change to the meta-training changes all three):

- :func:`sample_tasks`: a batch of functions from the told Gaussian process at fresh
  inputs ``x ~ N(0, I_d)``, noisy targets, and each function's context (its first
  ``c ~ U{1..C}`` pairs, as a weight per pair);
- :func:`max_context`: C, ``2 T`` clipped to the config's bounds, so that T is
  mid-range and the same network can be conditioned on up to T more pairs (the
  probes' uncertainty-reduction@k does);
- :func:`target_nll`: the Gaussian negative log-likelihood of a target whose ``f``
  has the network's variance and whose noise has the told variance;
- :func:`meta_train`: Adam on a loss over such batches, one ``lax.scan``;
- :func:`mean_embedding`: a context encoded pair by pair and averaged, the
  order-invariant summary every path that pools its context uses;
- :func:`check_meta_training` and :func:`check_widths`: the range rules of the
  meta-training fields and of network widths, with the same one-line errors in every
  config.

A config that meta-trains has the fields ``num_steps``, ``learning_rate``,
``batch_size``, ``largest_context_at_least``, ``largest_context_at_most`` and
``num_targets`` (see :class:`~neural_testbed.agents.cnp.CNPConfig`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, gaussian_process, networks

__all__ = ["MIN_VARIANCE", "check_meta_training", "check_widths", "gaussian_head", "max_context",
           "mean_embedding", "meta_train", "sample_tasks", "target_nll"]

# A floor under a decoder's variance of f (this plus a softplus), so that draws and
# log-densities stay finite.
MIN_VARIANCE = 1e-6

# fold_in data of a step key's stream for the loss's own draws (a neural process's
# latent samples): apart from the four keys sample_tasks splits the step key into.
_LOSS_STREAM = 2**31 - 1


def check_meta_training(config: Any) -> None:
    """Refuses, in one line naming the field, meta-training fields out of range."""
    for name in ("num_steps", "batch_size", "largest_context_at_least", "num_targets"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)!r}")
    if config.largest_context_at_most < config.largest_context_at_least:
        raise ValueError(f"largest_context_at_most must be >= largest_context_at_least "
                         f"({config.largest_context_at_least}), got "
                         f"{config.largest_context_at_most!r}")
    if not config.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {config.learning_rate!r}")


def check_widths(config: Any, *names: str) -> None:
    """Refuses a network field that is not one or more widths >= 1."""
    for name in names:
        widths = getattr(config, name)
        if not widths or any(w < 1 for w in widths):
            raise ValueError(f"{name} must be one or more widths >= 1, got {widths!r}")


def max_context(config: Any, num_train: int) -> int:
    """The largest context meta-training shows the network: ``2 T`` within the config's
    bounds."""
    return min(max(2 * num_train, config.largest_context_at_least),
               config.largest_context_at_most)


def mean_embedding(encoder: networks.MLPParams, context_x: jax.Array, context_y: jax.Array,
                   weights: jax.Array) -> jax.Array:
    """The encoder's embedding of each pair ``(x [c, d], y [c])``, averaged with
    ``weights [c]`` (1 for a pair, 0 for padding): ``[encoder width]``."""
    embeddings = networks.apply_mlp(encoder, jnp.concatenate([context_x, context_y[:, None]], -1))
    return weights @ embeddings / jnp.sum(weights)


def gaussian_head(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A decoder's two outputs per input ``[n, 2]`` as f's mean ``[n]`` and variance ``[n]``
    (``MIN_VARIANCE`` plus a softplus)."""
    return out[:, 0], MIN_VARIANCE + jax.nn.softplus(out[:, 1])


def target_nll(y: jax.Array, mean: jax.Array, variance_f: jax.Array,
               noise_variance) -> jax.Array:
    """The Gaussian negative log-likelihood of each target: f's variance plus the known
    noise variance, as every regression agent's likelihood has it."""
    variance = variance_f + noise_variance
    return 0.5 * (jnp.log(2 * jnp.pi * variance) + (y - mean) ** 2 / variance)


def sample_tasks(key: jax.Array, prior: base.RegressionPriorKnowledge, num_functions: int,
                 num_points: int, largest_context: int):
    """Functions from the prior at fresh inputs, noisy targets, and each one's context
    weights (its first ``c ~ U{1..largest_context}`` pairs): ``x [B, P, d]``, ``y [B, P]``,
    ``weights [B, P]``."""
    x_key, f_key, noise_key, size_key = jax.random.split(key, 4)
    x = jax.random.normal(x_key, (num_functions, num_points, prior.input_dim))
    # The environment's ridge, on the diagonal: where two float32 draws coincide (about
    # one function in 10^4 at 40 inputs in d = 1), its same-input ridge would leave the
    # covariance singular and the Cholesky factor NaN.
    cov = (jax.vmap(lambda x: gaussian_process.KERNELS[prior.kernel](x, x))(x)
           + gaussian_process.RIDGE * jnp.eye(num_points))
    f = jnp.einsum("bij,bj->bi", jnp.linalg.cholesky(cov),
                   jax.random.normal(f_key, (num_functions, num_points)))
    y = f + jnp.sqrt(prior.noise_variance) * jax.random.normal(noise_key, f.shape)
    sizes = jax.random.randint(size_key, (num_functions, 1), 1, largest_context + 1)
    weights = (jnp.arange(num_points) < sizes).astype(x.dtype)  # [B, num_points]
    return x, y, weights


def meta_train(key: jax.Array, params: Any, loss: Callable[[Any, Any, jax.Array], jax.Array],
               config: Any, prior: base.RegressionPriorKnowledge, num_train: int) -> Any:
    """``params`` after ``config.num_steps`` Adam steps on ``loss(params, tasks, key)``, each
    on a fresh batch of :func:`sample_tasks` with contexts up to :func:`max_context`.

    The whole loop is one ``lax.scan`` over the step keys (``split(key, num_steps)``);
    step ``i`` draws its tasks from its key and hands ``loss`` a key of another stream
    of it, for the loss's own draws (a latent sample), which a loss without any ignores.
    ``num_train`` is T, a Python int: it sets the tasks' sizes.
    """
    largest = max_context(config, num_train)
    num_points = largest + config.num_targets
    optimizer = optax.adam(config.learning_rate)

    def step(carry, step_key):
        params, opt_state = carry
        tasks = sample_tasks(step_key, prior, config.batch_size, num_points, largest)
        grads = jax.grad(loss)(params, tasks, jax.random.fold_in(step_key, _LOSS_STREAM))
        updates, opt_state = optimizer.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)),
                                  jax.random.split(key, config.num_steps))
    return params
