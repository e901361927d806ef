"""Pieces shared by the agents whose belief is many networks: ensemble, ensemble+, hypermodel.

- Member stacks: ``num_members`` MLPs as one pytree whose leaves have a
  leading ``[num_members]`` axis (:func:`init_members`, :func:`apply_members`,
  :func:`select_member`), and the layout of an ensemble agent's training key
  (:func:`split_keys`), which ensemble and ensemble+ share so that ensemble+
  without prior or bootstrap draws the ensemble's weights.
- Randomised prior functions: the scale of a fixed random network added to a
  trained one (:func:`prior_function_scale`), as in ensemble+ and the
  hypermodel's additive prior.
- Bootstrap: the names of the loss-weight distributions and their checks.

References:
  Lakshminarayanan, Pritzel and Blundell, "Simple and scalable predictive
  uncertainty estimation using deep ensembles", NeurIPS 2017.
  Osband, Aslanides and Cassirer, "Randomized prior functions for deep
  reinforcement learning", NeurIPS 2018.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import networks

__all__ = [
    "BOOTSTRAPS",
    "ENSEMBLE_SIZES",
    "PAPER_PRIOR_SCALES",
    "Bootstrap",
    "EnsembleKeys",
    "TemperatureScaling",
    "apply_members",
    "check_bootstrap",
    "check_num_ensemble",
    "check_prior_options",
    "init_members",
    "prior_function_scale",
    "select_member",
    "split_keys",
]

# Per (training point, member) loss weights: all ones, Exp(1), or 2 * Bernoulli(1/2).
Bootstrap = Literal["none", "exponential", "bernoulli"]
BOOTSTRAPS: tuple[Bootstrap, ...] = typing.get_args(Bootstrap)
# The prior function is multiplied by prior_scale / sqrt(temperature) or / temperature.
TemperatureScaling = Literal["sqrt", "linear"]

# The ensemble sizes the paper's appendix B.2 and B.6 sweep.
ENSEMBLE_SIZES = (1, 3, 10, 30, 100)
# The prior scales the paper's appendix B.6 and B.7 print, {0, sqrt(beta), 1}, as
# (prior_scale, temperature_scaling). The paper scales a prior drawn like the generating
# process, whose logits are its network's output / beta, so its sqrt(beta) and 1 are the
# network's output / sqrt(beta) and / beta (:func:`prior_function_scale`). With scale 0
# the scaling is idle and kept at the configs' default, "sqrt".
PAPER_PRIOR_SCALES: tuple[tuple[float, TemperatureScaling], ...] = (
    (0.0, "sqrt"), (1.0, "sqrt"), (1.0, "linear"))


# Member stacks.


def check_num_ensemble(num_ensemble: int) -> None:
    """Raises a clear error unless ``num_ensemble`` is an integer >= 1."""
    if isinstance(num_ensemble, bool) or not isinstance(num_ensemble, int) or num_ensemble < 1:
        raise ValueError(f"num_ensemble must be an integer >= 1, got {num_ensemble!r}")


class EnsembleKeys(NamedTuple):
    """The keys an ensemble agent's training key is split into.

    ensemble+ splits its key the same way and uses all four, so with no prior
    function and no bootstrap it initialises and trains exactly like the
    ensemble agent, which uses the first two.
    """

    init: jax.Array  # initialisation of the trained members
    train: jax.Array  # minibatches
    prior: jax.Array  # ensemble+: the fixed prior functions
    bootstrap: jax.Array  # ensemble+: the bootstrap weights


def split_keys(key: jax.Array) -> EnsembleKeys:
    """Splits an agent's training key into its :class:`EnsembleKeys`."""
    return EnsembleKeys(*jax.random.split(key, 4))


def init_members(
    key: jax.Array,
    num_members: int,
    input_dim: int,
    layer_sizes: Sequence[int],
    first_bias_stddev: float = 0.0,
) -> networks.MLPParams:
    """Draws ``num_members`` MLPs with :func:`networks.init_mlp`, one key each.

    Returns:
      The parameters of all members; every leaf has a leading
      ``[num_members]`` axis.
    """
    return jax.vmap(
        lambda k: networks.init_mlp(k, input_dim, layer_sizes, first_bias_stddev)
    )(jax.random.split(key, num_members))


def apply_members(params: networks.MLPParams, x: jax.Array) -> jax.Array:
    """Every member's output: ``x [n, input_dim] -> [num_members, n, out]``."""
    return jax.vmap(networks.apply_mlp, in_axes=(0, None))(params, x)


def select_member(params: networks.MLPParams, index: jax.Array) -> networks.MLPParams:
    """The parameters of member ``index`` (an int32 scalar, possibly traced)."""
    return jax.tree.map(lambda leaf: leaf[index], params)


# Randomised prior functions and bootstrap options.


def prior_function_scale(
    prior_scale: float, temperature: jax.Array | float, temperature_scaling: TemperatureScaling
) -> jax.Array:
    """The multiplier of the prior function: ``prior_scale / temperature**p``.

    The environment's logits are its network's output divided by the
    temperature, so ``"linear"`` with ``prior_scale=1`` draws prior logits
    exactly like the environment's, and ``"sqrt"`` draws them at the
    geometric mean of that size and the network's own.
    """
    temperature = jnp.asarray(temperature, jnp.float32)
    if temperature_scaling == "linear":
        return prior_scale / temperature
    return prior_scale / jnp.sqrt(temperature)


def _check_choice(name: str, value: str, choices: typing.Any) -> None:
    allowed = typing.get_args(choices)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def check_bootstrap(bootstrap: str) -> None:
    """Raises a clear error unless ``bootstrap`` is a known distribution."""
    _check_choice("bootstrap", bootstrap, Bootstrap)


def check_prior_options(config) -> None:
    """Checks a config's ``prior_scale``, ``temperature_scaling`` and ``bootstrap``."""
    if not (isinstance(config.prior_scale, (int, float)) and math.isfinite(config.prior_scale)
            and config.prior_scale >= 0):
        raise ValueError(f"prior_scale must be a finite number >= 0, got {config.prior_scale!r}")
    _check_choice("temperature_scaling", config.temperature_scaling, TemperatureScaling)
    check_bootstrap(config.bootstrap)
