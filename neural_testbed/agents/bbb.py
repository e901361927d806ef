"""Bayes by backprop: a factorised Gaussian posterior over every weight of an MLP.

Blundell et al. fit ``q(w) = prod_i N(w_i; mu_i, sigma_i^2)``,
``sigma_i = softplus(rho_i)``, by stochastic gradient ascent on the evidence
lower bound, drawing weights with the reparameterisation
``w = mu + sigma * eps``, ``eps ~ N(0, I)``. Per training pair the loss is

    mean over the minibatch and over ``num_samples`` weight draws of the
    cross-entropy  +  c * KL(q || prior) / T,

with ``c = d * sqrt(temperature)`` when ``adaptive_weight_scale`` (the testbed's
default) and ``c = 1`` otherwise. The prior is either a Gaussian
``N(0, sigma_1^2)`` on every weight, whose KL is computed in closed form, or
the paper's scale mixture ``pi N(0, sigma_1^2) + (1 - pi) N(0, sigma_2^2)``,
whose KL has no closed form and is estimated by Monte Carlo with the same
weight draws as the likelihood (``log q(w) - log p(w)``, as in the paper).
The posterior starts with the means of a freshly initialised MLP (fan-in
scaled weights, zero biases) and stddev ``init_stddev`` everywhere, as in the
reference testbed; ``docs/differences.md`` lists what still differs.

On regression problems the network has one output, ``f(x)``, and in place of
the cross-entropy is the Gaussian negative log-likelihood
``-log N(y; f(x), noise_variance)`` with the known noise, up to its constant
(:func:`training.data_loss`); the adaptive ``c`` is ``d`` alone, the
temperature being 1 there (:func:`training.temperature`) since the noise
variance is already in the data term. With ``c = 1`` the loss estimates the
negative ELBO divided by T, up to that constant.

A posterior sample is one network: the ENN index is the key of its weight
noise ``eps``, drawn once for all inputs of a call.

Reference:
  C. Blundell, J. Cornebise, K. Kavukcuoglu and D. Wierstra, "Weight
  uncertainty in neural networks", ICML 2015.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, networks
from neural_testbed.agents import _threefry, training, validation

__all__ = [
    "BBBConfig",
    "Posterior",
    "bbb_appendix_b_sweep",
    "bbb_sweep",
    "gaussian_kl",
    "make_bbb_agent",
    "sample_weights",
    "scale_mixture_kl_estimate",
]

WeightPrior = Literal["gaussian", "scale_mixture"]
_WEIGHT_PRIORS = ("gaussian", "scale_mixture")


@dataclasses.dataclass(frozen=True)
class BBBConfig:
    """Hyperparameters of the Bayes-by-backprop agent.

    Every default is the reference testbed's: its BBB factory's config, the
    initial posterior stddev of its ENN (0.01) and its trainer's batch size.
    """

    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU
    learning_rate: float = 3e-3  # Adam step size
    num_steps: int = 10_000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    num_samples: int = 8  # weight draws averaged in each step's loss
    weight_prior: WeightPrior = "gaussian"  # "gaussian": analytic KL; "scale_mixture": MC KL
    sigma_1: float = 0.3  # stddev of the Gaussian prior, or of the mixture's first component
    sigma_2: float = 0.75  # stddev of the mixture's second component (scale_mixture only)
    mixture_pi: float = 1.0  # weight pi of the first component, in [0, 1] (scale_mixture only)
    adaptive_weight_scale: bool = True  # multiply the KL term by d * sqrt(temperature)
    init_stddev: float = 0.01  # posterior stddev of every weight and bias at initialisation

    def __post_init__(self):
        if self.weight_prior not in _WEIGHT_PRIORS:
            raise ValueError(f"weight_prior must be one of {', '.join(_WEIGHT_PRIORS)}, "
                             f"got {self.weight_prior!r}")
        for name in ("sigma_1", "sigma_2", "init_stddev", "learning_rate"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not 0 <= self.mixture_pi <= 1:
            raise ValueError(f"mixture_pi must be in [0, 1], got {self.mixture_pi!r}")
        for name in ("num_steps", "batch_size", "num_samples"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if not self.hidden or any(w < 1 for w in self.hidden):
            raise ValueError(f"hidden must be one or more widths >= 1, got {self.hidden!r}")
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


class Posterior(NamedTuple):
    """The variational posterior: an independent Gaussian on every MLP parameter."""

    mean: networks.MLPParams  # mu, same tree as the network's parameters
    rho: networks.MLPParams  # stddev = softplus(rho), same tree


def sample_weights(key: jax.Array, posterior: Posterior) -> networks.MLPParams:
    """One network from the posterior: ``mu + softplus(rho) * eps``, ``eps ~ N(0, I)``.

    ``eps`` is drawn through :func:`_threefry.fast_key`: the same numbers, drawn faster
    on a CPU (an evaluation draws 10^6 networks)."""
    eps = optax.tree.random_like(_threefry.fast_key(key), posterior.mean, jax.random.normal)
    return jax.tree.map(
        lambda mu, rho, e: mu + jax.nn.softplus(rho) * e, posterior.mean, posterior.rho, eps
    )


def gaussian_kl(mean, stddev, prior_stddev: float) -> jax.Array:
    """``KL(prod_i N(mean_i, stddev_i^2) || prod_i N(0, prior_stddev^2))`` in nats.

    The closed form, summed over every leaf of the trees ``mean`` and
    ``stddev``: ``sum_i log(s0 / s_i) + (s_i^2 + m_i^2) / (2 s0^2) - 1/2``.
    """

    def leaf_kl(m, s):
        return jnp.sum(
            jnp.log(prior_stddev / s) + (s**2 + m**2) / (2 * prior_stddev**2) - 0.5
        )

    return sum(jax.tree.leaves(jax.tree.map(leaf_kl, mean, stddev)))


def _gaussian_log_prob(x, mean, stddev) -> jax.Array:
    """``sum_i log N(x_i; mean_i, stddev_i^2)`` over every leaf of the trees."""

    def leaf(x, m, s):
        return jnp.sum(-0.5 * ((x - m) / s) ** 2 - jnp.log(s) - 0.5 * math.log(2 * math.pi))

    return sum(jax.tree.leaves(jax.tree.map(leaf, x, mean, stddev)))


def _scale_mixture_log_prob(x, sigma_1: float, sigma_2: float, pi: float) -> jax.Array:
    """``sum_i log(pi N(x_i; 0, sigma_1^2) + (1 - pi) N(x_i; 0, sigma_2^2))`` over the tree.

    Computed with a weighted logsumexp, so ``pi = 0`` and ``pi = 1`` give the
    single Gaussians exactly (and finite gradients).
    """
    log_norm = -0.5 * math.log(2 * math.pi)
    weights = jnp.array([pi, 1.0 - pi])
    # jnp.log: the stddevs are arrays when configs are batched (AgentSpec.batchable).
    log_sigma_1, log_sigma_2 = jnp.log(sigma_1), jnp.log(sigma_2)

    def leaf(x):
        log_n1 = log_norm - log_sigma_1 - 0.5 * (x / sigma_1) ** 2
        log_n2 = log_norm - log_sigma_2 - 0.5 * (x / sigma_2) ** 2
        both = jnp.stack([log_n1, log_n2], axis=-1)  # [..., 2]
        return jnp.sum(jax.nn.logsumexp(both, axis=-1, b=weights))

    return sum(jax.tree.leaves(jax.tree.map(leaf, x)))


def scale_mixture_kl_estimate(
    weights, mean, stddev, sigma_1: float, sigma_2: float, pi: float
) -> jax.Array:
    """A one-draw Monte Carlo estimate of ``KL(q || scale-mixture prior)``.

    With ``weights ~ q = prod_i N(mean_i, stddev_i^2)``, returns
    ``log q(weights) - log p(weights)``: its expectation under q is the KL, so
    the mean over draws converges to it. The KL itself has no closed form.
    """
    return _gaussian_log_prob(weights, mean, stddev) - _scale_mixture_log_prob(
        weights, sigma_1, sigma_2, pi
    )


def _inverse_softplus(y: float) -> float:
    return math.log(math.expm1(y))


def make_bbb_agent(config: BBBConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the Bayes-by-backprop agent.

    Example:
      >>> config = BBBConfig(weight_prior="scale_mixture", sigma_1=1.0, sigma_2=0.25)
      >>> agent = make_bbb_agent(config, base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(jax.random.key(1)))

    References:
      Blundell et al., "Weight uncertainty in neural networks", ICML 2015.
    """

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge) -> Posterior:
        init_key, train_key = jax.random.split(key)
        mean = networks.init_mlp(
            init_key, shapes.input_dim, (*config.hidden, shapes.num_outputs))
        rho0 = _inverse_softplus(config.init_stddev)
        posterior = Posterior(mean, jax.tree.map(lambda m: jnp.full_like(m, rho0), mean))
        kl_weight = 1.0 / base.num_pairs(data)
        if config.adaptive_weight_scale:
            kl_weight = kl_weight * prior.input_dim * jnp.sqrt(training.temperature(prior))

        def loss_fn(key, posterior, batch):
            stddev = jax.tree.map(jax.nn.softplus, posterior.rho)

            def one_draw(draw_key):
                weights = sample_weights(draw_key, posterior)
                outputs = networks.apply_mlp(weights, batch.x)  # [batch, K] or [batch, 1]
                nll = training.data_loss(outputs, batch.y, prior).mean()
                if config.weight_prior == "gaussian":
                    return nll, jnp.zeros(())
                return nll, scale_mixture_kl_estimate(
                    weights, posterior.mean, stddev,
                    config.sigma_1, config.sigma_2, config.mixture_pi,
                )

            draw_keys = jax.random.split(key, config.num_samples)
            nll, kl_draws = jax.vmap(one_draw)(draw_keys)  # [num_samples] each
            if config.weight_prior == "gaussian":
                kl = gaussian_kl(posterior.mean, stddev, config.sigma_1)
            else:
                kl = jnp.mean(kl_draws)
            return jnp.mean(nll) + kl_weight * kl

        posterior, _ = training.train_minibatch(
            train_key, loss_fn, posterior, data, optax.adam(config.learning_rate),
            config.num_steps, config.batch_size)
        return posterior

    def apply(posterior: Posterior, x, index):
        return networks.apply_mlp(sample_weights(index, posterior), x)

    def sample_index(key):
        return key  # the key of one network's weight noise

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=None),
                      accepts_padding=True)


def bbb_sweep() -> tuple[BBBConfig, ...]:
    """The paper's sweep: 86 distinct configs.

    Gaussian prior: learning rate {1e-3, 3e-3} x sigma_1 {0.3, 0.5, 0.7, 1, 2}
    x steps {500, 1000, 10000}; scale-mixture prior: sigma_1 {1, 2, 4} x
    sigma_2 {0.25, 0.5, 0.75} x pi {0, 0.5, 1} x steps {1000, 10000};
    hidden {(50, 50), (100, 100), (50, 50, 50)}. The mixture configs set
    ``weight_prior="scale_mixture"``, so they train against the mixture. A config
    that two grids share (the default) appears once. The grid the paper prints
    is :func:`bbb_appendix_b_sweep`.
    """
    gaussian = tuple(
        BBBConfig(learning_rate=lr, sigma_1=s1, num_steps=n)
        for lr, s1, n in itertools.product((1e-3, 3e-3), (0.3, 0.5, 0.7, 1.0, 2.0),
                                           (500, 1000, 10_000))
    )
    mixture = tuple(
        BBBConfig(weight_prior="scale_mixture", sigma_1=s1, sigma_2=s2, mixture_pi=pi, num_steps=n)
        for s1, s2, pi, n in itertools.product((1.0, 2.0, 4.0), (0.25, 0.5, 0.75),
                                               (0.0, 0.5, 1.0), (1000, 10_000))
    )
    network = tuple(BBBConfig(hidden=h) for h in ((50, 50), (100, 100), (50, 50, 50)))
    return tuple(dict.fromkeys(gaussian + mixture + network))


def bbb_appendix_b_sweep() -> tuple[BBBConfig, ...]:
    """The grid of the paper's appendix B.4 (1,584 distinct configs of its 2,160 points):
    the scale-mixture prior with sigma_1 in {1, 2, 4} x sigma_2 in {0.25, 0.5, 0.75} x pi
    in {0, 0.25, 0.5, 0.75, 1} x learning rate {1e-3, 3e-3} x steps {500, 1000, 10000} x 2
    or 3 hidden layers of 50 or 100 units x the KL's weight 1 or ``d sqrt(temperature)``
    (``adaptive_weight_scale``); every other field at its default.

    With pi = 1 the mixture is N(0, sigma_1^2) and sigma_2 changes nothing (pi = 0:
    N(0, sigma_2^2), sigma_1), exactly (:func:`scale_mixture_kl_estimate`), so those
    points are listed once, with the idle stddev at its grid's first value. The default
    config (a Gaussian prior of stddev 0.3) is not among them. Run it with
    ``neural-testbed sweep --agent bbb --configs appendix-b``.
    """
    sigmas_1, sigmas_2 = (1.0, 2.0, 4.0), (0.25, 0.5, 0.75)
    layers = tuple((width,) * depth for depth, width in itertools.product((2, 3), (50, 100)))
    configs = (
        BBBConfig(weight_prior="scale_mixture", mixture_pi=pi,
                  sigma_1=s1 if pi > 0 else sigmas_1[0], sigma_2=s2 if pi < 1 else sigmas_2[0],
                  learning_rate=lr, num_steps=n, hidden=h, adaptive_weight_scale=adaptive)
        for h, adaptive, lr, n, pi, s1, s2 in itertools.product(
            layers, (True, False), (1e-3, 3e-3), (500, 1000, 10_000),
            (0.0, 0.25, 0.5, 0.75, 1.0), sigmas_1, sigmas_2)
    )
    return tuple(dict.fromkeys(configs))
