"""The hypermodel agent: a linear hypermodel over an MLP, with an additive prior hypermodel.

An ensemble needs one trained network per sample of its belief; a hypermodel
trains one map from a continuous index ``z`` to network parameters, so it can
produce as many distinct networks as are asked for. Here the map is linear,
``theta(z) = a z + b`` with ``z ~ N(0, I_k) / sqrt(k)``, over every parameter
(biases included) of an MLP (50, 50). As in ensemble+, a fixed random prior is
added to its output, here itself a linear hypermodel over a small MLP, each of
whose layers is driven by its own slice of the index, so that networks of
different indices keep disagreeing away from the data. The loss averages the
cross-entropy over many indices sampled at each step.

On regression problems the generated MLP and the prior have one output, the
function value, and the cross-entropy's place is taken by the Gaussian
negative log-likelihood with the known noise (:func:`training.data_loss`); the
temperature in the prior's scale and in the adaptive decay is 1 there
(:func:`training.temperature`), the noise variance being in the data term.

Both hypermodels are initialised as in the reference testbed (its hypermodel
factory over the ENN library's ``MLPHypermodelPriorIndependentLayers``);
``docs/differences.md`` lists what still differs.

References:
  Dwaracherla, Lu, Ibrahimi, Osband, Wen and Van Roy, "Hypermodels for
  exploration", ICLR 2020.
  Osband, Aslanides and Cassirer, "Randomized prior functions for deep
  reinforcement learning", NeurIPS 2018 (the additive prior).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from neural_testbed import base, networks
from neural_testbed.agents import ensembling, training, validation
from neural_testbed.agents.ensembling import Bootstrap, TemperatureScaling

__all__ = [
    "HypermodelConfig",
    "HypermodelState",
    "LinearHypermodel",
    "bootstrap_weight_fn",
    "generate_params",
    "hypermodel_appendix_b_sweep",
    "hypermodel_sweep",
    "init_linear_hypermodel",
    "init_prior_hypermodel",
    "layer_index_slices",
    "make_hypermodel_agent",
    "sample_index",
]


# The index dimensions and decay lambdas both sweeps take (the paper's appendix B.7).
_INDEX_DIMS = (1, 3, 5, 7)
_LAMBDAS = (0.1, 0.3, 1.0, 3.0, 10.0)


@dataclasses.dataclass(frozen=True)
class HypermodelConfig:
    """Hyperparameters of the hypermodel agent (paper defaults)."""

    index_dim: int = 5  # k, the dimension of the index z ~ N(0, I_k) / sqrt(k)
    num_index_samples: int = 128  # indices drawn at each step; the loss averages over them
    prior_scale: float = 1.0  # >= 0; the prior hypermodel is scaled by this / temperature**p
    temperature_scaling: TemperatureScaling = "sqrt"  # p = 1/2 ("sqrt") or 1 ("linear")
    prior_hidden: tuple[int, ...] = (10,)  # hidden widths of the prior's MLP, ReLU
    bootstrap: Bootstrap = "none"  # distribution of the per-(point, index) loss weights
    hidden: tuple[int, ...] = (50, 50)  # hidden widths of the generated MLP, ReLU
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 2000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    l2_weight_decay: float = 1.0  # lambda; loss += lambda / T * |a, b|^2
    adaptive_weight_scale: bool = True  # multiply the decay by d * sqrt(temperature)

    def __post_init__(self):
        for name in ("index_dim", "num_index_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if any(w < 1 for w in self.prior_hidden):
            raise ValueError(f"prior_hidden widths must be >= 1, got {self.prior_hidden!r}")
        ensembling.check_prior_options(self)
        training.check_training_fields(self)
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


class LinearHypermodel(NamedTuple):
    """MLP parameters as a linear function of the index: ``theta(z) = a z + b``."""

    a: networks.MLPParams  # each leaf: the MLP leaf's shape + [index_dim]
    b: networks.MLPParams  # each leaf: the MLP leaf's shape


class HypermodelState(NamedTuple):
    """A trained hypermodel agent."""

    params: LinearHypermodel  # trained, over an MLP of widths (*hidden, K); K = 1 on regression
    prior_params: LinearHypermodel  # fixed, never trained, over (*prior_hidden, K); b = 0
    prior_scale: jax.Array  # float32 scalar, from ensembling.prior_function_scale


def _mlp_shapes(input_dim: int, layer_sizes: Sequence[int]) -> list[dict[str, tuple[int, ...]]]:
    """The shape of each leaf of an MLP's parameters, in the layout of :func:`networks.init_mlp`."""
    sizes = (input_dim, *layer_sizes)
    return [{"w": (fan_in, fan_out), "b": (fan_out,)} for fan_in, fan_out in zip(sizes, sizes[1:])]


def init_linear_hypermodel(
    key: jax.Array, input_dim: int, layer_sizes: Sequence[int], index_dim: int
) -> LinearHypermodel:
    """Draws the trained hypermodel as the reference initialises it.

    The reference generates every parameter of the base MLP, weights and
    biases alike, with a default Haiku linear layer of the index and uses the
    output unscaled (its ``scale=False``): each coefficient of ``a`` is a
    truncated normal (cut at two standard deviations) with stddev
    ``1 / sqrt(index_dim)`` and the offset ``b`` is zero. With ``E|z|^2 = 1``,
    every generated parameter, whatever its layer's fan-in, has variance
    ``0.774 / index_dim`` over indices and draws of ``a`` (0.774 is the
    variance of the unit normal cut at +-2), and biases differ between indices
    from the start.
    """
    shapes = _mlp_shapes(input_dim, layer_sizes)
    keys = iter(jax.random.split(key, 2 * len(shapes)))
    a = [
        {name: jax.random.truncated_normal(next(keys), -2.0, 2.0, (*shape, index_dim))
         / jnp.sqrt(index_dim) for name, shape in layer.items()}
        for layer in shapes
    ]
    b = jax.tree.map(lambda leaf: jnp.zeros(leaf.shape[:-1], leaf.dtype), a)
    return LinearHypermodel(a=a, b=b)


def layer_index_slices(index_dim: int, num_layers: int) -> list[np.ndarray]:
    """The index coordinates that drive each layer of the prior hypermodel.

    The reference splits the index into ``num_layers`` consecutive chunks of
    near-equal size (``np.array_split``: the first chunks take the remainder),
    so that the layers of one prior network are drawn independently; with
    fewer coordinates than layers every layer uses the whole index.
    """
    if index_dim < num_layers:
        return [np.arange(index_dim)] * num_layers
    return np.array_split(np.arange(index_dim), num_layers)


def init_prior_hypermodel(
    key: jax.Array, input_dim: int, layer_sizes: Sequence[int], index_dim: int
) -> LinearHypermodel:
    """Draws the fixed prior hypermodel of the reference (per-layer index slices).

    Layer ``l`` is generated from its slice ``z_l`` of the index alone
    (:func:`layer_index_slices`): each weight is ``u . z_l / sqrt(fan_in)``
    and each bias, the output layer's included, ``v . z_l``, with ``u``,
    ``v`` fixed random unit vectors and no offset. So for
    ``z ~ N(0, I_k) / sqrt(k)`` every generated prior weight is exactly
    ``N(0, 1 / (k fan_in))`` and every bias ``N(0, 1 / k)``. It is returned as
    a linear hypermodel whose coefficients are zero outside each layer's
    slice, so it is applied like the trained one.
    """
    shapes = _mlp_shapes(input_dim, layer_sizes)
    slices = layer_index_slices(index_dim, len(shapes))
    keys = iter(jax.random.split(key, 2 * len(shapes)))
    a = []
    for layer, coords in zip(shapes, slices):
        scales = {"w": 1.0 / np.sqrt(layer["w"][0]), "b": 1.0}
        coefs = {}
        for name, shape in layer.items():
            u = jax.random.normal(next(keys), (*shape, len(coords)))
            u = scales[name] * u / jnp.linalg.norm(u, axis=-1, keepdims=True)
            coefs[name] = jnp.zeros((*shape, index_dim)).at[..., coords].set(u)
        a.append(coefs)
    b = jax.tree.map(lambda leaf: jnp.zeros(leaf.shape[:-1], leaf.dtype), a)
    return LinearHypermodel(a=a, b=b)


def generate_params(hypermodel: LinearHypermodel, z: jax.Array) -> networks.MLPParams:
    """The MLP parameters ``a z + b`` of index ``z [index_dim]``."""
    return jax.tree.map(lambda a, b: a @ z + b, hypermodel.a, hypermodel.b)


def _apply(hypermodel: LinearHypermodel, x: jax.Array, z: jax.Array) -> jax.Array:
    return networks.apply_mlp(generate_params(hypermodel, z), x)


def sample_index(key: jax.Array, index_dim: int) -> jax.Array:
    """An index ``z ~ N(0, I_k) / sqrt(k)``, ``[index_dim]`` float32."""
    return jax.random.normal(key, (index_dim,)) / jnp.sqrt(index_dim)


def bootstrap_weight_fn(
    key: jax.Array, bootstrap: Bootstrap, num_train: int, index_dim: int
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The loss weights of training points for a continuous index.

    Each training point ``i`` gets a fixed random unit vector ``u_i`` drawn
    from ``key``; for an index ``z``, ``g = sqrt(k) u_i . z`` is exactly
    ``N(0, 1)``, and the weight is ``1 + sign(g)`` (``"bernoulli"``: 0 or 2
    with probability 1/2 each) or ``-log Phi(g)`` (``"exponential"``: Exp(1),
    since ``Phi(g)`` is uniform), or 1 (``"none"``). The weights are a
    function of ``z``, so one index always sees the same reweighting of the
    data, as an ensemble member does. (The reference's ENN library also
    builds them from random directions; its exponential weights are only
    approximately Exp(1).)

    Returns:
      ``weights(z [index_dim], ids [n] int) -> [n]``, the weights of the
      training points ``ids`` for index ``z``.
    """
    ensembling.check_bootstrap(bootstrap)
    if bootstrap == "none":
        return lambda z, ids: jnp.ones(ids.shape, jnp.float32)
    directions = jax.random.normal(key, (num_train, index_dim))
    directions = directions / jnp.linalg.norm(directions, axis=-1, keepdims=True)  # [T, k]

    def weights(z: jax.Array, ids: jax.Array) -> jax.Array:
        g = jnp.sqrt(index_dim) * directions[ids] @ z  # [n], each N(0, 1) over z
        if bootstrap == "bernoulli":
            return 2.0 * (g > 0).astype(jnp.float32)
        return -log_ndtr(g)

    return weights


def make_hypermodel_agent(config: HypermodelConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the hypermodel agent.

    Index ``z`` gives ``f(x; a z + b) + s * f_prior(x; a' z)``, where ``a, b``
    are trained from :func:`init_linear_hypermodel`, ``a'`` is the fixed
    draw of :func:`init_prior_hypermodel`, and ``s`` is from
    :func:`ensembling.prior_function_scale`. At each step the loss is the
    bootstrap-weighted cross-entropy (on regression, :func:`training.data_loss`'s
    Gaussian one) averaged over the minibatch and over
    ``num_index_samples`` fresh indices, plus ``lambda / T`` weight decay on
    ``a, b`` (times ``d * sqrt(temperature)`` if adaptive).

    Example:
      >>> agent = make_hypermodel_agent(HypermodelConfig(index_dim=3), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))
    """
    index_dim = config.index_dim

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge) -> HypermodelState:
        init_key, train_key, prior_key, bootstrap_key = jax.random.split(key, 4)
        num_rows = data.x.shape[0]  # T, or more when padded (data.mask says which)
        num_outputs = shapes.num_outputs
        params = init_linear_hypermodel(
            init_key, shapes.input_dim, (*config.hidden, num_outputs), index_dim
        )
        prior_params = init_prior_hypermodel(
            prior_key, shapes.input_dim, (*config.prior_hidden, num_outputs), index_dim
        )
        scale = ensembling.prior_function_scale(
            config.prior_scale, training.temperature(prior), config.temperature_scaling
        )
        # One direction per row, the i-th pair taking the i-th: the first T are the same
        # draws whatever the padding, so a pair's weights are too.
        weight_fn = bootstrap_weight_fn(bootstrap_key, config.bootstrap, num_rows, index_dim)
        pair_index = None if data.mask is None else jnp.cumsum(data.mask) - 1  # [rows]
        decay = training.weight_decay_scale(
            config.l2_weight_decay, base.num_pairs(data), prior, config.adaptive_weight_scale
        )
        optimizer = training.adam_with_l2(config.learning_rate, decay)

        def loss_fn(key, params, batch):
            ids = batch.x  # [batch] ids of the drawn training points
            x = data.x[ids]  # [batch, d]
            # Indices drawn like sample_index's, in one call (quicker to compile than a vmap).
            zs = jax.random.normal(key, (config.num_index_samples, index_dim)) / jnp.sqrt(index_dim)

            def index_loss(z):
                outputs = _apply(params, x, z) + scale * _apply(prior_params, x, z)
                losses = training.data_loss(outputs, batch.y, prior)  # [batch]
                pairs = ids if pair_index is None else pair_index[ids]
                return (weight_fn(z, pairs) * losses).mean()

            return jax.vmap(index_loss)(zs).mean()

        # Minibatches are drawn over point ids so that the loss can look up the
        # drawn points' bootstrap weights.
        point_ids = base.Data(x=jnp.arange(num_rows), y=data.y, mask=data.mask)
        params, _ = training.train_minibatch(
            train_key, loss_fn, params, point_ids, optimizer, config.num_steps, config.batch_size)
        return HypermodelState(params=params, prior_params=prior_params, prior_scale=scale)

    def apply(state: HypermodelState, x: jax.Array, z: jax.Array) -> jax.Array:
        return _apply(state.params, x, z) + state.prior_scale * _apply(state.prior_params, x, z)

    return base.Agent(
        train=train,
        enn=base.ENN(apply, lambda key: sample_index(key, index_dim), num_indices=None),
        accepts_padding=True,
    )


def hypermodel_sweep() -> tuple[HypermodelConfig, ...]:
    """The paper's sweep, around the default (19 distinct configs).

    Index dim in {1, 3, 5, 7}; lambda in {0.1, 0.3, 1, 3, 10}; bootstrap in
    {none, bernoulli, exponential}; prior scale {0, 1} x prior hidden {(10,),
    (10, 10)} x lambda {1, 2} x temperature scaling {linear, sqrt}. With prior
    scale 0 the prior's widths and scaling change nothing, so those grid
    points are listed once per lambda; the default is listed once. The grid the
    paper prints is :func:`hypermodel_appendix_b_sweep`.
    """
    default = HypermodelConfig()
    replace = dataclasses.replace
    priors = (
        replace(default, prior_scale=scale, prior_hidden=hidden, l2_weight_decay=lam,
                temperature_scaling=scaling)
        if scale else replace(default, prior_scale=0.0, l2_weight_decay=lam)
        for scale, hidden, lam, scaling in itertools.product(
            (0.0, 1.0), ((10,), (10, 10)), (1.0, 2.0), ("linear", "sqrt")
        )
    )
    configs = (
        *(replace(default, index_dim=k) for k in _INDEX_DIMS),
        *(replace(default, l2_weight_decay=lam) for lam in _LAMBDAS),
        *(replace(default, bootstrap=b) for b in ("none", "bernoulli", "exponential")),
        *priors,
    )
    return tuple(dict.fromkeys(configs))


def hypermodel_appendix_b_sweep() -> tuple[HypermodelConfig, ...]:
    """The grid of the paper's appendix B.7 (600 distinct configs of its 720 points):
    index dim in {1, 3, 5, 7} x either decay (``lambda / T`` or ``lambda d
    sqrt(temperature) / T``) x lambda in {0.1, 0.3, 1, 3, 10} x bootstrap in {none,
    exponential, bernoulli} x the prior's 1 or 2 hidden layers of 10 units x the paper's
    prior scales {0, sqrt(temperature), 1} (:data:`ensembling.PAPER_PRIOR_SCALES`).

    With prior scale 0 the prior's layers change nothing, so those points are listed
    once, at the default prior. Every other field is the default's, and the default is
    among them. Run it with ``neural-testbed sweep --agent hypermodel --configs appendix-b``.
    """
    default = HypermodelConfig()
    configs = (
        HypermodelConfig(index_dim=k, adaptive_weight_scale=adaptive, l2_weight_decay=lam,
                         bootstrap=bootstrap, prior_scale=scale, temperature_scaling=scaling,
                         prior_hidden=prior_hidden if scale else default.prior_hidden)
        for k, adaptive, lam, bootstrap, prior_hidden, (scale, scaling) in itertools.product(
            _INDEX_DIMS, (True, False), _LAMBDAS, ensembling.BOOTSTRAPS,
            ((10,), (10, 10)), ensembling.PAPER_PRIOR_SCALES)
    )
    return tuple(dict.fromkeys(configs))
