"""The random-MLP classification environment of the Neural Testbed.

Inputs are ``x ~ N(0, I_d)``; a random ReLU MLP ``d -> 50 -> 50 -> K`` (fan-in
scaled truncated-normal weights, first-layer bias ``N(0, 1/d)``, other biases
zero) gives logits, which are divided by a temperature; labels are drawn from
the softmax of the result. Everything here is a pure function of a PRNG key.
:class:`MLPClassificationProblem` puts the environment behind the problem
protocol of :mod:`neural_testbed.base`.

Reference: Osband et al., "Evaluating predictive distributions: does Bayesian
deep learning work?" (the Neural Testbed), section 3.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base, networks

__all__ = [
    "Environment",
    "MLPClassificationProblem",
    "check_temperature",
    "environment_logits",
    "polyadic_inputs",
    "sample_environment",
    "sample_test_data",
    "sample_train_data",
]


class Environment(NamedTuple):
    """A sampled environment: the MLP's parameters and its temperature."""

    params: networks.MLPParams
    temperature: jax.Array | float  # > 0; logits are divided by it



def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_temperature(temperature) -> None:
    """Raises a clear error for a concrete temperature that is not > 0."""
    if isinstance(temperature, (int, float)) and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def sample_environment(
    key: jax.Array,
    temperature: jax.Array | float,
    input_dim: int = 2,
    num_classes: int = 2,
    hidden: Sequence[int] = (50, 50),
) -> Environment:
    """Draws a random-MLP environment.

    Args:
      key: PRNG key; the same key gives the same environment.
      temperature: logits are divided by it; low temperature = high SNR.
      input_dim: d, the input dimension.
      num_classes: K, the number of classes.
      hidden: widths of the hidden layers.

    Returns:
      The environment.

    Example:
      >>> env = sample_environment(jax.random.key(0), temperature=0.1)
      >>> data = sample_train_data(jax.random.key(1), env, num_train=10)
    """
    _check_positive_int("input_dim", input_dim)
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    check_temperature(temperature)
    params = _draw_network(key, input_dim, (*hidden, num_classes), 1.0 / input_dim**0.5)
    return Environment(params=params, temperature=temperature)


# One program, also when called eagerly (a dozen single operations compiled one by one
# otherwise); inside a traced caller it is inlined.
_draw_network = jax.jit(networks.init_mlp, static_argnums=(1, 2, 3))


def environment_logits(env: Environment, x: jax.Array) -> jax.Array:
    """Tempered logits of the environment: ``[..., input_dim] -> [..., K]``."""
    return networks.apply_mlp(env.params, x) / env.temperature


def _input_dim(env: Environment) -> int:
    return env.params[0]["w"].shape[0]


@functools.partial(jax.jit, static_argnames="num_train")  # one program, also when called eagerly
def sample_train_data(key: jax.Array, env: Environment, num_train: int) -> base.Data:
    """Draws T training pairs ``x ~ N(0, I)``, ``y ~ softmax(env(x))``."""
    _check_positive_int("num_train (T)", num_train)
    x_key, y_key = jax.random.split(key)
    x = jax.random.normal(x_key, (num_train, _input_dim(env)))
    y = jax.random.categorical(y_key, environment_logits(env, x))
    return base.Data(x=x, y=y.astype(jnp.int32))


# Standard deviation of the out-of-distribution inputs; the training and test inputs have 1.
OOD_SCALE = 3.0


def polyadic_inputs(key: jax.Array, num_test: int, tau: int, input_dim: int,
                    kappa: int) -> jax.Array:
    """``x [num_test, tau, input_dim]``: each tau-sample's inputs drawn with replacement
    from its own ``kappa`` anchor points ``~ N(0, I)``, so it holds at most kappa
    distinct inputs (the reference's polyadic sampler; dyadic for kappa = 2).

    Joint predictions are tested where they matter: at repeated inputs, which an
    agent that knows what it does not know predicts as correlated (Osband et al.,
    "Evaluating high-order predictive distributions in deep learning", 2022).
    """
    anchor_key, index_key = jax.random.split(key)
    anchors = jax.random.normal(anchor_key, (num_test, kappa, input_dim))
    index = jax.random.randint(index_key, (num_test, tau), 0, kappa)
    return jnp.take_along_axis(anchors, index[..., None], axis=1)


@functools.partial(jax.jit, static_argnames=("num_test", "tau", "kappa"))
def sample_test_data(
    key: jax.Array, env: Environment, num_test: int, tau: int, kappa: int | None = None
) -> base.TestSamples:
    """Draws ``num_test`` independent tau-samples and their exact log-likelihoods.

    Each tau-sample is tau inputs, drawn i.i.d. from ``N(0, I)`` (``kappa`` None, the
    2021 paper's protocol) or from kappa anchor points (:func:`polyadic_inputs`),
    with labels drawn independently from the environment at each input; its
    log-likelihood is the sum of ``log P(y_t | env, x_t)``. Its out-of-distribution
    input is drawn from ``N(0, OOD_SCALE^2 I)``: mostly farther from the origin than
    any training input, where the environment still defines labels but the agent
    saw none.
    """
    _check_positive_int("num_test", num_test)
    _check_positive_int("tau", tau)
    if kappa is not None:
        _check_positive_int("kappa", kappa)
    x_key, y_key = jax.random.split(key)
    if kappa is None:
        x = jax.random.normal(x_key, (num_test, tau, _input_dim(env)))
    else:
        x = polyadic_inputs(x_key, num_test, tau, _input_dim(env), kappa)
    logits = environment_logits(env, x)
    y = jax.random.categorical(y_key, logits).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(logits)
    log_lik = jnp.take_along_axis(log_probs, y[..., None], axis=-1)[..., 0].sum(-1)
    chex.assert_shape([y, log_lik], [(num_test, tau), (num_test,)])
    ood_x = OOD_SCALE * jax.random.normal(base.ood_key(key), (num_test, _input_dim(env)))
    return base.TestSamples(x=x, y=y, log_likelihood=log_lik, ood_x=ood_x)


# Changing how a problem's randomness derives from its definition changes every
# number; the results store refuses rows of another problem version.
PROBLEM_VERSION = 2


@dataclasses.dataclass(frozen=True)
class MLPClassificationProblem:
    """One random-MLP classification problem and its evaluation settings.

    Every (temperature, T, seed) draws its environment, training data and test
    data from its own key (a hash of its definition), so the problems of a
    sweep are independent: no two share an environment, and the training
    inputs of one T are not a prefix of another's.
    """

    problem_id: str  # stable id, e.g. "classification_2d/17"
    temperature: float  # > 0; 0.01, 0.1, 0.5 = high, medium, low SNR
    num_train: int  # T, number of training pairs
    seed: int  # replicate index within its (temperature, T) setting
    input_dim: int = 2  # d
    num_classes: int = 2  # K
    env_hidden: tuple[int, ...] = (50, 50)  # environment MLP hidden widths
    taus: tuple[int, ...] = (1, 100)  # joint sizes it is evaluated at
    num_test: int = 1000  # N, test tau-samples per tau
    num_samples: int = 1000  # M, samples drawn from the agent's belief per test sample
    # Test inputs: None draws them i.i.d. (the 2021 paper); kappa >= 1 draws each
    # tau-sample's from kappa anchor points (the reference's current, polyadic protocol).
    kappa: int | None = None
    # "auto" estimates with Monte Carlo up to this tau and random partitioning above: 9
    # in the reference the paper ran, 10 in its current one.
    max_monte_carlo_tau: int = 9

    metric = "kl"  # the exact likelihood is known
    num_hyperplanes = 7  # Algorithm 4's d on the testbed (paper, appendix A.3)
    target = "classification"

    def __post_init__(self):
        check_temperature(self.temperature)
        for name in ("num_train", "input_dim", "num_test", "num_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                label = "num_train (T)" if name == "num_train" else name
                raise ValueError(f"{self.problem_id}: {label} must be an integer >= 1, "
                                 f"got {value!r}")
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise ValueError(f"{self.problem_id}: num_classes must be an integer >= 2, "
                             f"got {self.num_classes!r}")
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ValueError(f"{self.problem_id}: every tau must be an integer >= 1, "
                             f"got {self.taus!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.problem_id}: seed must be an integer >= 0, got {self.seed!r}")
        if self.kappa is not None and (not isinstance(self.kappa, int) or self.kappa < 1):
            raise ValueError(f"{self.problem_id}: kappa must be None (i.i.d. test inputs) "
                             f"or an integer >= 1, got {self.kappa!r}")
        if not isinstance(self.max_monte_carlo_tau, int) or self.max_monte_carlo_tau < 0:
            raise ValueError(f"{self.problem_id}: max_monte_carlo_tau must be an integer "
                             f">= 0, got {self.max_monte_carlo_tau!r}")

    @property
    def shape(self) -> tuple:
        return ("mlp_classification", self.input_dim, self.num_classes, self.num_train,
                self.env_hidden, self.taus, self.num_test, self.num_samples, self.kappa,
                self.max_monte_carlo_tau)

    @property
    def padding_group(self) -> tuple:
        """The shape but T: training pairs are drawn row by row from counters, so the
        first T of a larger draw are the T-pair draw (tested)."""
        return ("mlp_classification", self.input_dim, self.num_classes, self.env_hidden,
                self.taus, self.num_test, self.num_samples, self.kappa,
                self.max_monte_carlo_tau)

    @property
    def stratum(self) -> tuple:
        """Problems are stratified by (temperature, T) in every standard error, and by d
        too where it is not the paper's 2: the current sweep's T = ratio x d repeats a T
        across d (T = 100 is d = 10 at ratio 10 and d = 100 at ratio 1)."""
        if self.input_dim == 2:
            return self.temperature, self.num_train
        return self.temperature, self.num_train, self.input_dim

    @property
    def stratum_columns(self) -> dict[str, float | int]:
        """The stratum's coordinates by name, as score records carry them."""
        return dict(zip(("temperature", "num_train", "input_dim"), self.stratum))

    @property
    def key_seed(self) -> int:
        """A 32-bit seed that is a stable hash of what defines the problem's draws."""
        definition = (f"mlp_classification/v{PROBLEM_VERSION}/d={self.input_dim}/"
                      f"K={self.num_classes}/hidden={self.env_hidden}/"
                      f"temperature={self.temperature!r}/T={self.num_train}/seed={self.seed}")
        return base.definition_seed(definition)

    def build_args(self) -> dict[str, np.ndarray]:
        return {"temperature": np.asarray(self.temperature, np.float32)}

    def build(self, key: jax.Array, args) -> base.ProblemInstance:
        env_key, train_key = jax.random.split(key)
        env = sample_environment(env_key, args["temperature"], self.input_dim,
                                 self.num_classes, self.env_hidden)
        prior = base.PriorKnowledge(
            input_dim=self.input_dim, num_classes=self.num_classes,
            env_hidden=self.env_hidden, temperature=args["temperature"])
        return base.ProblemInstance(sample_train_data(train_key, env, self.num_train), prior, env)

    def sample_test(self, key: jax.Array, env: Environment, tau: int) -> base.TestSamples:
        return sample_test_data(key, env, self.num_test, tau, self.kappa)

    def instance(self) -> base.ProblemInstance:
        """The problem's environment, training data and prior knowledge, computed now.

        Example:
          >>> problem = leaderboard.get_sweep("paper")["classification_2d/17"]
          >>> data, prior, env = problem.instance()
        """
        template = dataclasses.replace(self, problem_id="", temperature=1.0, seed=0)
        return base.build_instance(self, template)
