"""The epinet agent: an MLP base network plus a small epistemic network driven by an index.

An epistemic neural network (ENN) adds to an ordinary network a random index
``z`` such that networks of different indices disagree where the data say
little. The epinet does it cheaply: one base MLP ``mu`` is trained as usual,
and a small network on the base's (stop-gradient) features and the index adds
an index-dependent correction::

    f(x, z) = mu(x) + sigma_L(sg[phi(x)], z) + sigma_P(x, z),    z ~ N(0, I_D)

- ``mu``: an MLP (50, 50) -> K; ``phi(x)`` is the input ``x`` concatenated
  with the base's last hidden layer (``d + 50`` features), gradients stopped.
- ``sigma_L``, the learnable epinet: an MLP (15, 15) on ``[z, phi(x)]`` whose
  ``K * D`` outputs are read as a ``[K, D]`` matrix and contracted with ``z``.
- ``sigma_P``, the fixed prior: ``D`` small random MLPs (5, 5) -> K, never
  trained, combined linearly by the index, ``sum_i z_i g_i(x)``, and scaled by
  ``prior_scale / temperature``. Optionally, a second fixed prior with the
  epinet's own form (off by default, as in the reference).

The loss is the cross-entropy averaged over the minibatch and over
``num_index_samples`` fresh indices per step (8, as many as ``D``), plus L2
decay ``lambda (d / T)^0.7 |params|^2`` on the base and the learnable epinet
(never on a prior). The architecture, defaults and decay follow the reference
testbed's epinet factory over the ENN library's MLP epinet;
``docs/differences.md`` ("epinet") lists what differs.

On regression problems ``K = 1`` (the function value), the cross-entropy's
place is taken by the Gaussian negative log-likelihood with the known noise
(:func:`training.data_loss`), and the prior's scale is ``prior_scale`` alone:
the temperature is 1 there (:func:`training.temperature`), the noise variance
being in the data term. The decay has no temperature in either case.

References:
  Osband, Wen, Asghari, Dwaracherla, Ibrahimi, Lu and Van Roy, "Epistemic
  neural networks", arXiv:2107.08924, 2021.
  Osband, Aslanides and Cassirer, "Randomized prior functions for deep
  reinforcement learning", NeurIPS 2018 (the additive prior).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base, networks
from neural_testbed.agents import ensembling, training, validation
from neural_testbed.agents.ensembling import TemperatureScaling

__all__ = [
    "EpinetConfig",
    "EpinetState",
    "epinet_sweep",
    "l2_scale",
    "make_epinet_agent",
    "num_train_steps",
    "sample_index",
]


@dataclasses.dataclass(frozen=True)
class EpinetConfig:
    """Hyperparameters of the epinet agent (the reference testbed's defaults)."""

    index_dim: int = 8  # D, the dimension of the index z ~ N(0, I_D) (not scaled by 1/sqrt(D))
    epinet_hidden: tuple[int, ...] = (15, 15)  # hidden widths of the learnable epinet, ReLU
    prior_scale: float = 0.3  # >= 0; the additive prior is scaled by this / temperature**p
    temperature_scaling: TemperatureScaling = "linear"  # p = 1 ("linear") or 1/2 ("sqrt")
    prior_hidden: tuple[int, ...] = (5, 5)  # hidden widths of each of the D prior MLPs, ReLU
    epinet_prior_scale: float = 0.0  # >= 0; scale of a fixed prior shaped like the epinet
    num_index_samples: int = 8  # indices drawn per step, the loss averaged (reference: index_dim)
    hidden: tuple[int, ...] = (50, 50)  # hidden widths of the base MLP; the last one is phi(x)
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps (times large_data_steps_factor on large data)
    large_data_ratio: float = 500.0  # T / input_dim above which training is longer
    large_data_steps_factor: int = 10  # num_steps multiplier when T / input_dim > large_data_ratio
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 0.2  # lambda; loss += lambda * (d / T)**0.7 * |base, epinet|^2

    def __post_init__(self):
        for name in ("index_dim", "num_index_samples", "large_data_steps_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("epinet_hidden", "prior_hidden"):
            widths = getattr(self, name)
            if not isinstance(widths, tuple) or any(
                    isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
                raise ValueError(
                    f"{name} must be a tuple of widths >= 1 (or empty), got {widths!r}")
        for name in ("prior_scale", "epinet_prior_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and 0 <= value < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(self.large_data_ratio, (int, float)) and self.large_data_ratio > 0):
            raise ValueError(f"large_data_ratio must be > 0, got {self.large_data_ratio!r}")
        training.check_training_fields(self)
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


class EpinetState(NamedTuple):
    """A trained epinet agent."""

    base: networks.MLPParams  # trained mu: (*hidden, K)
    epinet: networks.MLPParams  # trained sigma_L: [z, x, phi] -> (*epinet_hidden, K * D)
    prior_epinet: networks.MLPParams  # fixed, never trained, shaped like ``epinet``
    prior_members: networks.MLPParams  # fixed, never trained: D MLPs (*prior_hidden, K), axis 0
    prior_scale: jax.Array  # float32 scalar multiplying the additive prior


class _Trained(NamedTuple):
    """The parameters gradient descent (and the L2 decay) sees."""

    base: networks.MLPParams
    epinet: networks.MLPParams


def num_train_steps(config: EpinetConfig, num_train: int, input_dim: int) -> int:
    """Adam steps for ``num_train`` points in ``input_dim`` dimensions.

    The reference trains ten times longer when there are more than 500 points
    per input dimension: in 2-d, T > 1000, so never in the paper's sweep.
    """
    if num_train / input_dim > config.large_data_ratio:
        return config.num_steps * config.large_data_steps_factor
    return config.num_steps


def l2_scale(l2_weight_decay: float, num_train: int | jax.Array, input_dim: int) -> float:
    """The reference's L2 multiplier ``lambda * (d / T)**0.7`` (no temperature factor)."""
    return l2_weight_decay * (input_dim / num_train) ** 0.7


def sample_index(key: jax.Array, index_dim: int) -> jax.Array:
    """An index ``z ~ N(0, I_D)``, ``[index_dim]`` float32."""
    return jax.random.normal(key, (index_dim,))


def _base_forward(params: networks.MLPParams, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The base MLP's logits ``[n, K]`` and its features ``[x, last hidden]``, gradients stopped."""
    h = x
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    features = jax.lax.stop_gradient(jnp.concatenate([x, h], axis=-1))  # [n, d + hidden[-1]]
    return logits, features


def _project(params: networks.MLPParams, features: jax.Array, z: jax.Array) -> jax.Array:
    """An epinet-shaped network: an MLP on ``[z, features]``, output ``[n, K, D]`` times ``z``.

    Written so that what depends on ``z`` alone is computed once per index, not once
    per input: the first layer's ``z`` part, and the last layer contracted with ``z``
    before it meets the inputs. The same function; where a thousand indices meet the same
    inputs (an evaluation) faster on a CPU."""
    index_dim = z.shape[0]
    *hidden, last = params
    w_last = last["w"].reshape(last["w"].shape[0], -1, index_dim) @ z  # [fan_in, K]
    b_last = last["b"].reshape(-1, index_dim) @ z  # [K]
    if not hidden:
        return features @ w_last[index_dim:] + (z @ w_last[:index_dim] + b_last)
    first = hidden[0]
    h = jax.nn.relu(features @ first["w"][index_dim:]
                    + (z @ first["w"][:index_dim] + first["b"]))
    for layer in hidden[1:]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ w_last + b_last


def _member_outputs(prior_members: networks.MLPParams, x: jax.Array) -> jax.Array:
    """The D prior MLPs at ``x [n, d]``: ``[D, n, K]``."""
    return ensembling.apply_members(prior_members, x)


def make_epinet_agent(config: EpinetConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the epinet agent.

    Index ``z`` gives ``mu(x) + A(z, phi(x)) z + s * sum_i z_i g_i(x)``, where
    ``A`` is the learnable epinet's ``[K, D]`` output, ``g_i`` the fixed prior
    MLPs and ``s = prior_scale / temperature**p`` (plus ``epinet_prior_scale``
    times a fixed epinet-shaped network, when that is positive).
    The base and the learnable epinet are trained together by Adam; the
    epinet sees the base's features through a stop-gradient, so it cannot
    change the base.

    Example:
      >>> agent = make_epinet_agent(EpinetConfig(index_dim=4), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))
    """
    index_dim = config.index_dim
    num_index_samples = config.num_index_samples
    epinet_prior_scale = config.epinet_prior_scale

    def fixed_priors(state: EpinetState, x: jax.Array, features: jax.Array, z: jax.Array):
        out = state.prior_scale * jnp.einsum(
            "mnk,m->nk", _member_outputs(state.prior_members, x), z)
        if epinet_prior_scale:  # a static choice: no work when it is off
            out = out + epinet_prior_scale * _project(state.prior_epinet, features, z)
        return out

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge) -> EpinetState:
        base_key, epinet_key, members_key, prior_epinet_key, train_key = jax.random.split(key, 5)
        num_train = base.num_pairs(data)  # T: a traced scalar when the training set is padded
        input_dim, num_classes = shapes.input_dim, shapes.num_outputs  # K; 1 on regression
        feature_dim = input_dim + config.hidden[-1]
        params = _Trained(
            base=networks.init_mlp(base_key, input_dim, (*config.hidden, num_classes)),
            epinet=networks.init_mlp(epinet_key, index_dim + feature_dim,
                                     (*config.epinet_hidden, num_classes * index_dim)),
        )
        prior_epinet = networks.init_mlp(prior_epinet_key, index_dim + feature_dim,
                                         (*config.epinet_hidden, num_classes * index_dim))
        prior_members = ensembling.init_members(
            members_key, index_dim, input_dim, (*config.prior_hidden, num_classes))
        scale = ensembling.prior_function_scale(
            config.prior_scale, training.temperature(prior), config.temperature_scaling)
        fixed = EpinetState(params.base, params.epinet, prior_epinet, prior_members, scale)
        optimizer = training.adam_with_l2(
            config.learning_rate, l2_scale(config.l2_weight_decay, num_train, input_dim))

        def loss_fn(key, params, batch):
            logits, features = _base_forward(params.base, batch.x)  # [batch, K], [batch, F]
            zs = jax.random.normal(key, (num_index_samples, index_dim))

            def index_loss(z):
                # What does not depend on z (the base, the prior MLPs) is not
                # batched by the vmap below: it is computed once per step.
                prior_logits = jax.lax.stop_gradient(fixed_priors(fixed, batch.x, features, z))
                out = logits + _project(params.epinet, features, z) + prior_logits
                return training.data_loss(out, batch.y, prior).mean()

            return jax.vmap(index_loss)(zs).mean()

        # As many steps as the (padded) training set's size asks for; a padded problem
        # whose own T asks for fewer stops updating after its own count.
        steps = num_train_steps(config, data.x.shape[0], input_dim)
        active = None
        if data.mask is not None and steps != config.num_steps:
            active = jnp.where(num_train / input_dim > config.large_data_ratio, steps,
                               config.num_steps)
        params, _ = training.train_minibatch(
            train_key, loss_fn, params, data, optimizer, steps, config.batch_size, active)
        return fixed._replace(base=params.base, epinet=params.epinet)

    def apply(state: EpinetState, x: jax.Array, z: jax.Array) -> jax.Array:
        logits, features = _base_forward(state.base, x)
        return logits + _project(state.epinet, features, z) + fixed_priors(state, x, features, z)

    return base.Agent(
        train=train,
        enn=base.ENN(apply, lambda key: sample_index(key, index_dim), num_indices=None),
        accepts_padding=True,
    )


def epinet_sweep() -> tuple[EpinetConfig, ...]:
    """Index dim x epinet width x prior scale around the default (24 configs).

    The reference testbed gives the epinet a default but no sweep, so the grid
    is ours: index dim in {4, 8, 16} (half, once and twice the default, each
    with as many index samples per step, as the reference ties them); epinet
    hidden widths (15, 15) (the default) or (50, 50) (as wide as the base);
    prior scale in {0, 0.1, 0.3, 1}: no prior (the learnable epinet alone), a
    third of the default, the default, and 1 (the prior divided by the
    temperature exactly as the environment divides its logits).
    """
    default = EpinetConfig()
    return tuple(
        dataclasses.replace(default, index_dim=k, num_index_samples=k, epinet_hidden=widths,
                            prior_scale=scale)
        for k, widths, scale in itertools.product(
            (4, 8, 16), ((15, 15), (50, 50)), (0.0, 0.1, 0.3, 1.0))
    )
