"""MC dropout: an MLP trained with dropout that keeps dropping units when it samples.

Gal & Ghahramani showed that training a network with dropout and L2 weight
decay fits a variational approximation to the posterior of a Bayesian neural
network: a draw from that approximation is the network with a fresh random
dropout mask. So one posterior sample here is one *whole* network: the ENN
index is the key of its dropout masks, and a call applies the same masks to
every input, so that the tau inputs of a joint prediction see one network.
Training uses the usual independent mask per example (the Monte Carlo
estimate of the variational objective, one mask sample per data point).

Weight decay follows Gal's formula ``l^2 (1 - p) / (2 T)`` for a prior length
scale ``l``, or, with ``adaptive_weight_scale`` (the testbed's default),
``l * d * sqrt(temperature) / T`` as for the mlp agent.

On regression problems the network has one output, the function value, and
the data term is the Gaussian negative log-likelihood with the known noise
variance (:func:`training.data_loss`). Gal's regression objective divides his
decay by the model precision ``1 / noise_variance`` because his data term is
the squared error; ours is already divided by the noise variance, so the same
``l^2 (1 - p) / (2 T)`` is his decay on our scale. The adaptive decay drops
the temperature (``l * d / T``), as :func:`training.weight_decay_scale` does.

Reference:
  Y. Gal and Z. Ghahramani, "Dropout as a Bayesian approximation:
  Representing model uncertainty in deep learning", ICML 2016.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import jax

from neural_testbed import base, networks
from neural_testbed.agents import training, validation

__all__ = ["DropoutConfig", "dropout_appendix_b_sweep", "dropout_sweep", "make_dropout_agent"]

# The length scales both sweeps take (the paper's appendix B.3).
_LENGTH_SCALES = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0)


@dataclasses.dataclass(frozen=True)
class DropoutConfig:
    """Hyperparameters of the MC dropout agent (the testbed's defaults)."""

    dropout_rate: float = 0.1  # p, probability that a unit is dropped, in [0, 1)
    dropout_input: bool = False  # also drop input features (with the same p)
    length_scale: float = 1.0  # l, the prior length scale in the weight decay, > 0
    adaptive_weight_scale: bool = True  # decay l*d*sqrt(temperature)/T, else l^2 (1-p)/(2T)
    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU, dropout after each
    learning_rate: float = 1e-3  # Adam step size
    num_steps: int = 1000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs

    def __post_init__(self):
        if not 0 <= self.dropout_rate < 1:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        if not self.length_scale > 0:
            raise ValueError(f"length_scale must be > 0, got {self.length_scale!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        for name in ("num_steps", "batch_size"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if not self.hidden or any(w < 1 for w in self.hidden):
            raise ValueError(f"hidden must be one or more widths >= 1, got {self.hidden!r}")
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


def _draw_masks(
    key: jax.Array,
    params: networks.MLPParams,
    rate: float,
    dropout_input: bool,
    batch_shape: tuple[int, ...],
) -> list[jax.Array | None]:
    """Inverted-dropout masks for the input of each layer: 0 with probability
    ``rate``, else ``1 / (1 - rate)``.

    Entry ``i`` is ``[*batch_shape, fan_in of layer i]``, or None for the input
    layer when ``dropout_input`` is off.
    """
    keys = jax.random.split(key, len(params))
    masks = []
    for i, (k, layer) in enumerate(zip(keys, params)):
        if i == 0 and not dropout_input:
            masks.append(None)
            continue
        keep = jax.random.bernoulli(k, 1.0 - rate, (*batch_shape, layer["w"].shape[0]))
        masks.append(keep / (1.0 - rate))
    return masks


def _apply_with_masks(
    params: networks.MLPParams, x: jax.Array, masks: Sequence[jax.Array | None]
) -> jax.Array:
    """The ReLU MLP with ``masks[i]`` multiplying the input of layer ``i`` (None: no dropout).

    ``x`` is ``[n, input_dim]``; a mask is ``[width]`` (one network for all
    inputs) or ``[n, width]`` (one mask per input).

    A ``[width]`` mask scales the rows of the layer's weights instead of its inputs
    where the weights are the smaller (fan-out at most n): the same network, and when
    the evaluator vmaps over 1000 masks at the same tau inputs it writes 1000 small
    weight matrices instead of 1000 masked copies of the activations (a tau = 100
    evaluation faster on CPU, more so with input dropout); at tau = 1 (two inputs)
    the activations are the smaller. The same d_KL to float32 rounding.
    """
    for i, layer in enumerate(params):
        mask, w = masks[i], layer["w"]
        if mask is not None and mask.ndim == 1 and w.shape[1] <= x.shape[0]:
            w = mask[:, None] * w
        elif mask is not None:
            x = x * mask
        x = x @ w + layer["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x  # [n, num_classes], or [n, 1] on regression


def _weight_decay(
    config: DropoutConfig, num_train: int | jax.Array,
    prior: base.PriorKnowledge | base.RegressionPriorKnowledge,
) -> jax.Array:
    """The L2 scale s (loss += s |params|^2): Gal's ``l^2 (1 - p) / (2 T)``, or
    ``l * d * sqrt(temperature) / T`` when ``adaptive_weight_scale`` (``l * d / T``
    on regression)."""
    if config.adaptive_weight_scale:
        return training.weight_decay_scale(config.length_scale, num_train, prior, True)
    gal = config.length_scale**2 * (1.0 - config.dropout_rate) / 2.0
    return training.weight_decay_scale(gal, num_train, prior, False)


def make_dropout_agent(config: DropoutConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the MC dropout agent.

    Example:
      >>> agent = make_dropout_agent(DropoutConfig(dropout_rate=0.2), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(jax.random.key(1)))

    References:
      Gal & Ghahramani, "Dropout as a Bayesian approximation", ICML 2016.
    """

    def masks_for(key, params, batch_shape):
        return _draw_masks(key, params, config.dropout_rate, config.dropout_input, batch_shape)

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge):
        init_key, train_key = jax.random.split(key)
        # A nonzero first-layer bias, like the reference's dropout network.
        params = networks.init_mlp(
            init_key, shapes.input_dim, (*config.hidden, shapes.num_outputs),
            first_bias_stddev=1.0 / shapes.input_dim**0.5,
        )
        scale = _weight_decay(config, base.num_pairs(data), prior)
        optimizer = training.adam_with_l2(config.learning_rate, scale)

        def loss_fn(key, params, batch):
            masks = masks_for(key, params, (batch.x.shape[0],))  # one mask per example
            outputs = _apply_with_masks(params, batch.x, masks)
            return training.data_loss(outputs, batch.y, prior).mean()

        params, _ = training.train_minibatch(
            train_key, loss_fn, params, data, optimizer, config.num_steps, config.batch_size)
        return params

    def apply(params, x, index):
        return _apply_with_masks(params, x, masks_for(index, params, ()))

    def sample_index(key):
        return key  # the key of one network's dropout masks

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=None),
                      accepts_padding=True)


def dropout_sweep() -> tuple[DropoutConfig, ...]:
    """The reference's sweep, behind the published numbers: 33 distinct configs, one
    factor at a time (the grid the paper prints is :func:`dropout_appendix_b_sweep`).

    p in {0, 0.1, ..., 0.9} x input dropout {yes, no}; adaptive decay {yes, no}
    x length scale {0.01, 0.1, 0.3, 1, 3, 10}; hidden {(50, 50), (100, 100),
    (50, 50, 50)}; every other field at its default. A config that two grids
    share (the default) appears once.
    """
    rates = tuple(round(0.1 * i, 1) for i in range(10))
    by_rate = tuple(
        DropoutConfig(dropout_rate=p, dropout_input=drop_input)
        for p, drop_input in itertools.product(rates, (True, False))
    )
    by_decay = tuple(
        DropoutConfig(adaptive_weight_scale=adaptive, length_scale=l)
        for adaptive, l in itertools.product((True, False), _LENGTH_SCALES)
    )
    by_network = tuple(DropoutConfig(hidden=h) for h in ((50, 50), (100, 100), (50, 50, 50)))
    return tuple(dict.fromkeys(by_rate + by_decay + by_network))


def dropout_appendix_b_sweep() -> tuple[DropoutConfig, ...]:
    """The grid of the paper's appendix B.3 (384 configs): 2 or 3 hidden layers of 50 or
    100 units x either decay (Gal's ``l^2 (1 - p) / (2 T)`` or ``l d sqrt(temperature) /
    T``) x dropout rate p in {0.1, ..., 0.8} x length scale l in {0.01, 0.1, 0.3, 1, 3,
    10}; no input dropout and every other field at its default.

    Run it with ``neural-testbed sweep --agent dropout --configs appendix-b``.
    """
    layers = tuple((width,) * depth for depth, width in itertools.product((2, 3), (50, 100)))
    rates = tuple(round(0.1 * i, 1) for i in range(1, 9))
    return tuple(
        DropoutConfig(hidden=h, adaptive_weight_scale=adaptive, dropout_rate=p, length_scale=l)
        for h, adaptive, p, l in itertools.product(layers, (True, False), rates, _LENGTH_SCALES)
    )
