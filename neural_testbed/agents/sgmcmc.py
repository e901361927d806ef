"""SG-MCMC: stochastic gradient Langevin dynamics, with or without momentum.

Welling & Teh's SGLD turns minibatch gradient descent into a Markov chain
whose stationary distribution approaches the posterior as the step size
shrinks, by adding Gaussian noise of the right scale to each step. With
momentum (Chen et al.'s stochastic gradient Hamiltonian Monte Carlo, with
friction ``1 - momentum``) the chain moves further per step. The agent runs
one chain on the MLP (50, 50), discards a burn-in, keeps a snapshot of the
parameters every ``snapshot_every`` steps and uses the snapshots as an
ensemble: the ENN index is a snapshot id.

The chain targets the posterior of the whole training set of T pairs:

    log pi(theta) = (T / |B|) sum_{i in B} log p(y_i | x_i, theta)  -  |theta|^2 / (2 sigma^2)

where the first term is the minibatch estimate of the full log-likelihood
(the whole set when T <= batch_size, so then the gradient is exact), and the
Gaussian prior's variance on every weight and bias is
``sigma^2 = prior_variance / (2 d temperature)``. Equivalently the per-pair
loss is the mean cross-entropy plus an L2 term
``temperature * d / (prior_variance * T) * |theta|^2``. That is the reference
testbed's prior; the paper's appendix B.5 prints ``lambda T / (d temperature)``,
2T times wider, which on problems of one T is ``prior_variance = 2 T lambda``
(docs/differences.md).

On regression problems the network has one output, ``f(x)``, and
``log p(y | x, theta) = log N(y; f(x), noise_variance)`` with the known noise
(the loss is :func:`training.data_loss`'s ``(y - f)^2 / (2 noise_variance)``;
the dropped constant moves no gradient). The temperature is 1 there
(:func:`training.temperature`): ``f`` is drawn at unit scale and the noise
variance is already in the likelihood, so the weight prior's variance is
``prior_variance / (2 d)``.

The chain is one compiled ``lax.scan``: an outer scan over snapshots whose
body is an inner scan of ``snapshot_every`` steps, so only the snapshots are
stored, never the 500,000 steps.

References:
  M. Welling and Y. W. Teh, "Bayesian learning via stochastic gradient
  Langevin dynamics", ICML 2011.
  T. Chen, E. Fox and C. Guestrin, "Stochastic gradient Hamiltonian Monte
  Carlo", ICML 2014.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, networks
from neural_testbed.agents import _threefry, training, validation

__all__ = ["SGMCMCConfig", "make_sgmcmc_agent", "run_chain", "sgld", "sgmcmc_appendix_b_sweep",
           "sgmcmc_sweep"]

# The constant learning rates both sweeps take (the paper's appendix B.5).
_LEARNING_RATES = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2)

Params = Any
# (params, batch) -> the negative log-likelihood of each of the batch's rows, [rows].
LossFn = Callable[[Params, base.Data], jax.Array]


@dataclasses.dataclass(frozen=True)
class SGMCMCConfig:
    """Hyperparameters of the SG-MCMC agent (the testbed's defaults)."""

    learning_rate: float = 1e-4  # eta, constant step size on the per-pair mean loss
    prior_variance: float = 0.1  # lambda: L2 = temperature * d / (lambda * T), see module doc
    momentum: float = 0.9  # in [0, 1); 0 = plain SGLD, else SGHMC with friction 1 - momentum
    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU
    num_steps: int = 500_000  # chain length, burn-in included
    burn_in: int = 100_000  # steps discarded before the first snapshot
    snapshot_every: int = 1000  # steps between snapshots; (num_steps - burn_in) / this snapshots
    batch_size: int = 100  # minibatch size, drawn with replacement; all T pairs if T <= this

    def __post_init__(self):
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if not self.prior_variance > 0:
            raise ValueError(f"prior_variance must be > 0, got {self.prior_variance!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not self.hidden or any(w < 1 for w in self.hidden):
            raise ValueError(f"hidden must be one or more widths >= 1, got {self.hidden!r}")
        _check_chain_lengths(self.num_steps, self.burn_in, self.snapshot_every)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size!r}")
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)

    @property
    def num_snapshots(self) -> int:
        """The size of the agent's ensemble."""
        return (self.num_steps - self.burn_in) // self.snapshot_every


def _check_chain_lengths(num_steps: int, burn_in: int, snapshot_every: int) -> None:
    """Rejects chain lengths that keep no snapshot or do not split into whole chunks."""
    if snapshot_every < 1:
        raise ValueError(f"snapshot_every must be >= 1, got {snapshot_every!r}")
    if burn_in < 0:
        raise ValueError(f"burn_in must be >= 0, got {burn_in!r}")
    if burn_in >= num_steps:
        raise ValueError(
            f"burn_in ({burn_in!r}) must be smaller than num_steps ({num_steps!r}), "
            "or no snapshot is kept"
        )
    for name, value in (("num_steps", num_steps), ("burn_in", burn_in)):
        if value % snapshot_every:
            raise ValueError(
                f"{name} ({value!r}) must be a multiple of snapshot_every ({snapshot_every!r})"
            )


def sgld(
    key: jax.Array, learning_rate: float, num_train: int, momentum: float = 0.0
) -> optax.GradientTransformation:
    """SGLD (momentum 0) or SGHMC (momentum > 0) as an optax gradient transformation.

    It takes gradients ``g`` of a *per-pair* potential ``U`` (mean minibatch
    loss plus the prior's L2 term, so that ``T * U`` is the full-data negative
    log-posterior) and returns the updates

        u_t = momentum * u_{t-1} - learning_rate * g_t + sigma * xi_t,
        sigma^2 = 2 (1 - momentum) learning_rate / T,

    ``xi_t ~ N(0, I)``. With momentum 0 this is Langevin dynamics with step
    ``eps = learning_rate / T`` on ``T * U``; otherwise it is SGHMC with
    friction ``1 - momentum`` and the same ``eps``. Either way, for small
    steps, the parameters are distributed as ``exp(-T U)``, the posterior of
    the full training set.

    It is the step size, then the Langevin noise (:func:`optax.add_noise` with
    a constant variance; its state carries the PRNG key, split at each update),
    then the momentum (:func:`optax.trace`). A threefry key is re-typed to the
    same stream with an unrolled hash, which draws the noise faster on a CPU
    (``benchmarks/threefry.py``, its figures in ``benchmarks/results/threefry.jsonl``).

    Args:
      key: typed PRNG key of the Langevin noise.
      learning_rate: the step size on the per-pair potential, > 0.
      num_train: T, the number of training pairs the potential averages over.
      momentum: in [0, 1).

    Returns:
      An :class:`optax.GradientTransformation`.

    Example:
      >>> optimizer = optax.chain(optax.add_decayed_weights(2 * l2), sgld(key, 1e-4, 100))
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    noise_variance = 2.0 * (1.0 - momentum) * learning_rate / num_train
    noise = optax.add_noise(noise_variance, 0.0, _threefry.fast_key(key))
    parts = [optax.scale(-learning_rate), noise]
    if momentum > 0:
        parts.append(optax.trace(decay=momentum))
    return optax.chain(*parts)


def run_chain(
    key: jax.Array,
    loss_fn: LossFn,
    params: Params,
    data: base.Data,
    optimizer: optax.GradientTransformation,
    *,
    num_steps: int,
    burn_in: int,
    snapshot_every: int,
    batch_size: int,
) -> Params:
    """Runs an SG-MCMC chain and returns its snapshots after burn-in.

    One ``lax.scan`` over ``num_steps / snapshot_every`` chunks, each an inner
    scan of ``snapshot_every`` optimizer steps that ends with a snapshot; the
    first ``burn_in / snapshot_every`` snapshots are dropped. Each step's
    potential is the mean of ``loss_fn`` over ``batch_size`` pairs drawn with
    replacement from its own key, or over all T pairs when T <= ``batch_size``
    (an exact gradient).

    With ``data.mask`` (padding, see :mod:`neural_testbed.base`) the draws are
    among the pairs it marks, as :func:`training.train_minibatch` draws; when
    T <= ``batch_size`` the batch is the first ``min(rows, batch_size)`` rows
    that hold every pair and the mean is over the pairs alone, so the chain is
    the one run on the pairs alone.

    Args:
      key: PRNG key of the minibatches.
      loss_fn: ``(params, batch) -> [rows]``, the negative log-likelihood of each
        row of the batch; the chain averages it over the batch's pairs.
      params: the chain's starting point.
      data: the training pairs (and, with a mask, padding).
      optimizer: e.g. ``chain(add_decayed_weights(2 * l2), sgld(...))``.
      num_steps, burn_in, snapshot_every: multiples of ``snapshot_every``,
        ``burn_in < num_steps``.
      batch_size: pairs per step.

    Returns:
      The snapshots: ``params``' tree, each leaf with a leading
      ``[(num_steps - burn_in) / snapshot_every]`` axis.
    """
    _check_chain_lengths(num_steps, burn_in, snapshot_every)
    rows = data.x.shape[0]

    def potential(params, batch):
        return training.mean_over_pairs(loss_fn(params, batch), batch.mask)

    def batch_at(step_key) -> base.Data:
        if data.mask is None:  # T is the number of rows: a static choice
            if rows <= batch_size:
                return data
            idx = jax.random.randint(step_key, (batch_size,), 0, rows)
            return base.Data(x=data.x[idx], y=data.y[idx])
        # Padded: T is traced, so both cases are one batch of min(rows, batch_size) rows.
        num_train, size = base.num_pairs(data), min(rows, batch_size)
        pairs = jnp.nonzero(data.mask, size=rows, fill_value=0)[0]  # the pairs' rows, first
        full = num_train <= batch_size
        drawn = pairs[jax.random.randint(step_key, (size,), 0, num_train)]
        idx = jnp.where(full, pairs[:size], drawn)
        mask = jnp.where(full, jnp.arange(size) < num_train, True)
        return base.Data(x=data.x[idx], y=data.y[idx], mask=mask)

    def step(carry, step_key):
        params, opt_state = carry
        grads = jax.grad(potential)(params, batch_at(step_key))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def chunk(carry, chunk_key):
        carry, _ = jax.lax.scan(step, carry, jax.random.split(chunk_key, snapshot_every))
        return carry, carry[0]

    num_chunks = num_steps // snapshot_every
    chunk_keys = jax.random.split(_threefry.fast_key(key), num_chunks)
    _, snapshots = jax.lax.scan(chunk, (params, optimizer.init(params)), chunk_keys)
    return jax.tree.map(lambda s: s[burn_in // snapshot_every:], snapshots)


def _l2_scale(
    config: SGMCMCConfig, num_train: int | jax.Array,
    prior: base.PriorKnowledge | base.RegressionPriorKnowledge,
) -> jax.Array:
    """The prior's L2 term on the per-pair loss: ``temperature * d / (prior_variance * T)``,
    i.e. a Gaussian prior of variance ``prior_variance / (2 d temperature)`` on every weight
    (temperature 1 on regression, :func:`training.temperature`)."""
    return (training.temperature(prior) * prior.input_dim
            / (config.prior_variance * num_train))


def make_sgmcmc_agent(config: SGMCMCConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the SG-MCMC agent; its state is the snapshots, its index a snapshot id.

    Example:
      >>> agent = make_sgmcmc_agent(SGMCMCConfig(momentum=0.0, learning_rate=1e-3),
      ...                           base.Shapes(2, 2))
      >>> snapshots = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(snapshots, x, agent.enn.sample_index(jax.random.key(1)))

    References:
      Welling & Teh, ICML 2011; Chen, Fox & Guestrin, ICML 2014.
    """
    num_snapshots = config.num_snapshots

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge):
        init_key, noise_key, chain_key = jax.random.split(key, 3)
        params = networks.init_mlp(
            init_key, shapes.input_dim, (*config.hidden, shapes.num_outputs))
        num_train = base.num_pairs(data)
        # add_decayed_weights(2 l2) adds the gradient of l2 |theta|^2: the Gaussian prior.
        optimizer = optax.chain(
            optax.add_decayed_weights(2 * _l2_scale(config, num_train, prior)),
            sgld(noise_key, config.learning_rate, num_train, config.momentum),
        )

        def loss_fn(params, batch):
            return training.data_loss(networks.apply_mlp(params, batch.x), batch.y, prior)

        return run_chain(
            chain_key, loss_fn, params, data, optimizer,
            num_steps=config.num_steps, burn_in=config.burn_in,
            snapshot_every=config.snapshot_every, batch_size=config.batch_size,
        )  # leaves [num_snapshots, ...]

    def apply(snapshots, x, index):
        return networks.apply_mlp(jax.tree.map(lambda s: s[index], snapshots), x)

    def sample_index(key):
        return jax.random.randint(key, (), 0, num_snapshots)

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=num_snapshots),
                      accepts_padding=True)


def sgmcmc_sweep() -> tuple[SGMCMCConfig, ...]:
    """The reference's sweep, behind the published numbers (42 configs): learning rate
    {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2} x prior_variance {0.01, 0.1, 0.5} x
    momentum {0, 0.9}. The paper's lambda grid also has 1: :func:`sgmcmc_appendix_b_sweep`."""
    return tuple(
        SGMCMCConfig(learning_rate=lr, prior_variance=lam, momentum=m)
        for m, lr, lam in itertools.product((0.0, 0.9), _LEARNING_RATES, (0.01, 0.1, 0.5))
    )


def sgmcmc_appendix_b_sweep() -> tuple[SGMCMCConfig, ...]:
    """The grid of the paper's appendix B.5 (56 configs): momentum {0, 0.9} x learning
    rate {1e-5, ..., 1e-2} x lambda (``prior_variance``) {0.01, 0.1, 0.5, 1}.

    Lambda enters the prior as everywhere here, a variance of ``lambda / (2 d
    temperature)`` (the reference's), not the ``lambda T / (d temperature)`` appendix
    B.5 prints; on problems of one T the printed prior is ``prior_variance = 2 T
    lambda``. Run it with ``neural-testbed sweep --agent sgmcmc --configs appendix-b``.
    """
    return tuple(
        SGMCMCConfig(learning_rate=lr, prior_variance=lam, momentum=m)
        for m, lr, lam in itertools.product((0.0, 0.9), _LEARNING_RATES, (0.01, 0.1, 0.5, 1.0))
    )
