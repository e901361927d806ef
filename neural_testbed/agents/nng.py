"""Noisy natural gradient (NNG) with a Kronecker-factored Fisher: noisy K-FAC.

Zhang et al. fit a Gaussian variational posterior over the weights of a Bayesian
neural network by adding weight noise to natural-gradient ascent; with the
Fisher of each layer approximated by a Kronecker product of two small factors
(K-FAC, Martens & Grosse) the posterior of each layer is a matrix-variate
Gaussian. This agent is that algorithm on the BNN of Wang et al.:

- Layer l has one weight matrix ``W_l [V_{l-1} + 1, V_l]`` (the last row is the
  bias). Its input is ``a_l = concat(z_{l-1}, 1) / sqrt(V_{l-1} + 1)``, its
  pre-activation ``s_l = a_l W_l`` and its output ``z_l = relu(s_l)``, except the
  last layer's, which is the logits (one value on regression). The prior is
  ``p(W) = N(0, eta I)``, ``eta = prior_variance``.
- The posterior of layer l is ``MN(mu_l, (lambda / N) A~_l^-1, S~_l^-1)``, i.e.
  ``vec W_l ~ N(vec mu_l, (lambda / N) A~_l^-1 (x) S~_l^-1)``, with
  ``A~ = A + sqrt(gamma_in) I``, ``S~ = S + sqrt(gamma_in) I``,
  ``gamma_in = lambda / (N eta)``, N = T the number of training pairs and
  ``lambda = kl_weight`` (1: the evidence lower bound).

Each step (``num_steps``, one ``lax.scan``):

1. draw ``batch_size`` pairs with replacement;
2. draw ``num_samples`` networks from the current posterior;
3. for each, back-propagate ``sum_i log p(y_i | x_i, W)`` to the pre-activations:
   ``Ds_l [b, V_l]``, one row per pair; the minibatch-mean weight gradient is
   ``DW_l = a_l^T Ds_l / b``. The K-FAC statistics are ``a_l^T a_l / b`` and
   ``Ds~_l^T Ds~_l / b``, ``Ds~_l`` back-propagated likewise from targets drawn from
   the network itself (the Fisher, as K-FAC estimates it); all averaged over the
   networks;
4. ``A_l <- ema_decay A_l + (1 - ema_decay) a_l^T a_l / b``, ``S_l`` likewise;
5. ``mu_l <- mu_l + alpha (A_l + sqrt(gamma) I)^-1 V_l (S_l + sqrt(gamma) I)^-1``,
   ``V_l`` the mean over the networks of ``DW_l - gamma_in W_l``,
   ``gamma = gamma_in + damping`` (the extrinsic damping); ``alpha`` is
   ``learning_rate`` for the first half of the steps and a tenth of it for the
   second (Wang et al.: a decay by 0.1 at 5,000 of 10,000 epochs).

``log p`` is :func:`training.data_loss` negated: the softmax likelihood on
classification, the Gaussian with the known noise variance on regression, so the
agent serves both targets. Its fixed point (``V_l = 0`` in expectation) is where
the expected gradient of the log-likelihood balances the prior's: on a linear
Gaussian model, the exact posterior mean.

A posterior sample is one network: the ENN index is the key of its weight noise,
``W_l = mu_l + P_l E_l Q_l`` with ``E_l`` standard normal, ``P_l P_l^T =
(lambda / N) A~_l^-1`` and ``Q_l^T Q_l = S~_l^-1`` (:class:`Posterior`, computed
once after training).

Where it departs from Zhang et al. and Wang et al.:

- the factor ``S_l`` is the Fisher's, from targets drawn from the network's predictive
  (Martens & Grosse's estimate, which K-FAC implementations use), not the empirical
  Fisher of the observed labels that Wang et al.'s update ``F <- (1 - beta) F +
  beta Dw Dw^T`` writes. With the empirical Fisher the steps shrink where the fit is
  poor: for a Gaussian likelihood ``S`` is the mean squared residual over
  ``sigma^4``, so a step moves ``f`` by about ``alpha sigma^2 / residual``, and with the
  regression problems' small noise the means did not converge in 10,000 steps at
  Wang et al.'s smaller step sizes;
- ``A_l`` and ``S_l`` start as the statistics of one first minibatch at the initial
  means (exact there), not at zero or the identity;
- the damping added to both factors is ``sqrt(gamma)`` itself, without Zhang et
  al.'s trace-norm rebalancing between them (``pi = 1``), and the factors and their
  eigendecompositions are renewed at every step (their ``T_stats = T_inv = 1``);
- steps, not epochs: Wang et al. train 10,000 epochs, which at their batch size of
  100 is 10,000 steps only for T <= 100.

References:
  G. Zhang, S. Sun, D. Duvenaud and R. Grosse, "Noisy natural gradient as
  variational inference", ICML 2018 (Algorithm "Noisy K-FAC").
  J. Martens and R. Grosse, "Optimizing neural networks with Kronecker-factored
  approximate curvature", ICML 2015.
  C. Wang, S. Sun and R. Grosse, "Beyond marginal uncertainty: how accurately can
  Bayesian regression models estimate posterior predictive correlations?",
  AISTATS 2021 (NNG as their baseline, its BNN and Table 3's settings).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base
from neural_testbed.agents import _threefry, training, validation

__all__ = [
    "NNGConfig",
    "Posterior",
    "kronecker_posterior",
    "make_nng_agent",
    "nng_sweep",
    "sample_weights",
    "spectral_factors",
]


@dataclasses.dataclass(frozen=True)
class NNGConfig:
    """Hyperparameters of the noisy K-FAC agent.

    The defaults are Wang et al.'s NNG settings (Table 3: batch 100, 10 training
    particles, damping 1e-5, factor decay 0.999, eta = 1, 10,000 steps) on the
    testbed's (50, 50) network; the learning rate is from their grid.
    """

    hidden: tuple[int, ...] = (50, 50)  # hidden layer widths, ReLU; () is a linear model
    learning_rate: float = 1e-2  # alpha, the step size; a tenth of it for the second half
    num_steps: int = 10_000  # natural-gradient steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    num_samples: int = 10  # weight draws (training particles) averaged in each step
    prior_variance: float = 1.0  # eta: the prior is N(0, eta I) on every weight and bias
    kl_weight: float = 1.0  # lambda: the KL's weight in the objective (1: the ELBO)
    damping: float = 1e-5  # extrinsic damping, added to gamma_in in the mean update only
    ema_decay: float = 0.999  # 1 - beta: the Kronecker factors' moving-average decay

    def __post_init__(self):
        for name in ("learning_rate", "prior_variance", "kl_weight"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not self.damping >= 0:
            raise ValueError(f"damping must be >= 0, got {self.damping!r}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay!r}")
        for name in ("num_steps", "batch_size", "num_samples"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if any(w < 1 for w in self.hidden):
            raise ValueError(f"hidden must be zero or more widths >= 1, got {self.hidden!r}")
        # Then the rules every agent shares: field types, finite floats.
        validation.check_fields(self)


class Posterior(NamedTuple):
    """The matrix-variate Gaussian posterior of every layer, ready to sample.

    Layer l's weights are ``mean[l] + row_factor[l] @ E @ col_factor[l]``, ``E``
    standard normal of the mean's shape: covariance ``P P^T (x) Q^T Q``.
    """

    mean: list[jax.Array]  # mu_l [V_{l-1} + 1, V_l], the bias in the last row
    row_factor: list[jax.Array]  # P_l = sqrt(lambda / N) A~_l^-1/2, symmetric
    col_factor: list[jax.Array]  # Q_l = S~_l^-1/2, symmetric


def _with_bias(z: jax.Array) -> jax.Array:
    """A layer's input: ``concat(z, 1) / sqrt(V + 1)``, unit scale whatever the width V."""
    ones = jnp.ones((*z.shape[:-1], 1), z.dtype)
    return jnp.concatenate([z, ones], axis=-1) / math.sqrt(z.shape[-1] + 1)


def _forward(products, x, perturbations):
    """The outputs at ``x [n, d]`` and each layer's input ``a_l``, where ``products[l](a)``
    is ``a W_l`` and ``perturbations[l]`` is added to the pre-activations ``s_l`` (zeros:
    their gradient is the per-pair ``Ds_l``)."""
    inputs, z = [], x
    for i, (times, p) in enumerate(zip(products, perturbations)):
        inputs.append(_with_bias(z))
        s = times(inputs[-1]) + p
        z = s if i == len(products) - 1 else jax.nn.relu(s)
    return z, inputs


def _noise(key: jax.Array, posterior: Posterior) -> list[jax.Array]:
    """One network's standard normal ``E_l``, drawn through :func:`_threefry.fast_key`: the
    same numbers, drawn faster on a CPU (an evaluation draws 10^6 networks)."""
    return optax.tree.random_like(_threefry.fast_key(key), posterior.mean, jax.random.normal)


def sample_weights(key: jax.Array, posterior: Posterior) -> list[jax.Array]:
    """One network from the posterior: ``W_l = mu_l + P_l E_l Q_l``, ``E_l ~ N(0, I)``."""
    return [m + p @ e @ q for m, p, e, q in zip(posterior.mean, posterior.row_factor,
                                                _noise(key, posterior), posterior.col_factor)]


def _sampled_product(a, mean, row, noise, col):
    """``a (mu + P E Q)`` for ``a [n, V + 1]`` and ``mu [V + 1, V']``, in the cheaper order.

    Beside ``a mu``, forming the weights costs ``(V + 1) V' (V + 1 + V')`` multiply-adds
    and carrying the n rows through the factors ``n ((V + 1)^2 + (V + 1) V' + V'^2)``: the
    latter is far cheaper for the few inputs of an evaluation at tau = 1. The same network
    either way, to float32 rounding.
    """
    (fan_in, fan_out), n = mean.shape, a.shape[0]
    if n * (fan_in**2 + fan_in * fan_out + fan_out**2) < fan_in * fan_out * (fan_in + fan_out):
        return a @ mean + ((a @ row) @ noise) @ col
    return a @ (mean + row @ noise @ col)


def _model_targets(key: jax.Array, outputs: jax.Array, prior) -> jax.Array:
    """Targets drawn from the network's own predictive at its ``outputs [b, V_L]``: a class
    from the softmax, or on regression ``f`` plus Gaussian noise of the known variance."""
    if training.is_regression(prior):
        noise = jax.random.normal(key, outputs.shape[:1], outputs.dtype)
        return outputs[:, 0] + jnp.sqrt(prior.noise_variance) * noise
    return jax.random.categorical(key, outputs)


def spectral_factors(factors: list[jax.Array], sample_damping, update_damping
                     ) -> tuple[list[jax.Array], list[jax.Array]]:
    """``(F + sample_damping I)^-1/2`` and ``(F + update_damping I)^-1`` of each symmetric
    factor F, from one eigendecomposition of them all.

    The factors are stacked, each padded with an identity block to the largest's size: a
    spectral function of the padded matrix has the factor's own in its top-left block,
    whatever the eigenvalues. One LAPACK call, because on a CPU JAX 0.10's batched
    LAPACK kernels queue work on XLA's thread pool and wait for it, and deadlock when as
    many run at once as the pool has threads: independent decompositions of a vmapped
    step did, on 2 cores. The symmetric square root, unlike ``V diag(lambda)^-1/2``, does
    not depend on the eigenvectors' signs, which rounding may flip, so one key draws the
    same network from equal factors.
    """
    size = max(factor.shape[-1] for factor in factors)
    padded = jnp.stack([jnp.eye(size, dtype=factor.dtype).at[:n, :n].set(factor)
                        for factor, n in zip(factors, (f.shape[-1] for f in factors))])
    values, vectors = jnp.linalg.eigh(padded)
    values = jnp.clip(values, 0.0)

    def spectral(function):
        matrices = (vectors * function(values)[:, None, :]) @ jnp.swapaxes(vectors, -1, -2)
        return [m[:f.shape[-1], :f.shape[-1]] for m, f in zip(matrices, factors)]

    return (spectral(lambda v: jax.lax.rsqrt(v + sample_damping)),
            spectral(lambda v: 1 / (v + update_damping)))


def kronecker_posterior(mean, a_roots, s_roots, scale) -> Posterior:
    """The posterior ``MN(mu_l, scale^2 A~_l^-1, S~_l^-1)`` of each layer, as the factors
    that sample it: ``P = scale A~_l^-1/2`` and ``Q = S~_l^-1/2`` from ``a_roots`` and
    ``s_roots`` (:func:`spectral_factors`). NNG samples with ``scale = sqrt(lambda / N)``
    and the damping ``sqrt(gamma_in)``."""
    return Posterior(list(mean), [scale * root for root in a_roots], list(s_roots))


def make_nng_agent(config: NNGConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the noisy K-FAC agent; its belief index is a PRNG key (one network).

    Example:
      >>> agent = make_nng_agent(NNGConfig(hidden=(50,), learning_rate=3e-3),
      ...                        base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(jax.random.key(1)))

    References:
      Zhang et al., "Noisy natural gradient as variational inference", ICML 2018.
    """
    widths = (shapes.input_dim, *config.hidden, shapes.num_outputs)

    def train(key: jax.Array, data: base.Data,
              prior: base.PriorKnowledge | base.RegressionPriorKnowledge) -> Posterior:
        init_key, first_key, train_key = jax.random.split(key, 3)
        num_train = base.num_pairs(data)
        gamma_in = config.kl_weight / (num_train * config.prior_variance)
        sample_damping = jnp.sqrt(gamma_in)
        update_damping = jnp.sqrt(gamma_in + config.damping)
        scale = jnp.sqrt(config.kl_weight / num_train)
        beta = 1 - config.ema_decay
        draw_batch = training.minibatch_sampler(data, config.batch_size)
        # Standard normal means: a draw from the prior at eta = 1. Under the
        # 1 / sqrt(V + 1) input scaling every pre-activation then has unit scale, as the
        # environments' functions do, and every layer back-propagates a non-zero
        # gradient, so no factor S_l starts degenerate.
        layer_keys = jax.random.split(init_key, len(widths) - 1)
        mean = [jax.random.normal(k, (fan_in + 1, fan_out))
                for k, fan_in, fan_out in zip(layer_keys, widths[:-1], widths[1:])]

        def statistics(key, weights, batch):
            """Per layer: DW_l, a_l^T a_l / b and Ds~_l^T Ds~_l / b on the batch: the gradient
            with the data's targets, the factor with targets drawn from the network."""
            products = [functools.partial(jnp.matmul, b=w) for w in weights]
            zeros = [jnp.zeros((config.batch_size, w.shape[1]), w.dtype) for w in weights]
            outputs, pullback, inputs = jax.vjp(
                lambda perturbations: _forward(products, batch.x, perturbations), zeros,
                has_aux=True)

            def per_pair_gradients(targets):  # Ds_l of log p(targets_i | x_i, W), [b, V_l]
                def log_likelihood(outputs):
                    return -jnp.sum(training.data_loss(outputs, targets, prior))
                return pullback(jax.grad(log_likelihood)(outputs))[0]

            def batch_mean(u, v):  # the minibatch mean of u_i v_i^T
                return u.T @ v / config.batch_size

            grads = per_pair_gradients(batch.y)
            fisher = per_pair_gradients(_model_targets(key, outputs, prior))
            return ([batch_mean(a, g) for a, g in zip(inputs, grads)],
                    [batch_mean(a, a) for a in inputs],
                    [batch_mean(g, g) for g in fisher])

        def spectra(a_factors, s_factors):
            """((A~^-1/2, S~^-1/2) at the sampling damping, (A^-1, S^-1) at the update's)."""
            roots, inverses = spectral_factors([*a_factors, *s_factors], sample_damping,
                                               update_damping)
            layers = len(a_factors)
            return (roots[:layers], roots[layers:]), (inverses[:layers], inverses[layers:])

        # The factors start as the statistics of a first minibatch at the initial means.
        batch_key, target_key = jax.random.split(first_key)
        _, a_factors, s_factors = statistics(target_key, mean, draw_batch(batch_key))

        def step(carry, xs):
            # The square roots are carried: those made with one step's update sample the
            # next step's networks.
            index, step_key = xs
            mean, a_factors, s_factors, (a_roots, s_roots) = carry
            batch_key, noise_key, target_key = jax.random.split(step_key, 3)
            batch = draw_batch(batch_key)
            posterior = kronecker_posterior(mean, a_roots, s_roots, scale)
            weights = jax.vmap(sample_weights, in_axes=(0, None))(
                jax.random.split(noise_key, config.num_samples), posterior)
            grads, a_stats, s_stats = jax.vmap(statistics, in_axes=(0, 0, None))(
                jax.random.split(target_key, config.num_samples), weights, batch)
            a_factors = [(1 - beta) * f + beta * st.mean(0) for f, st in zip(a_factors, a_stats)]
            s_factors = [(1 - beta) * f + beta * st.mean(0) for f, st in zip(s_factors, s_stats)]
            roots, (a_inverses, s_inverses) = spectra(a_factors, s_factors)
            alpha = jnp.where(index < config.num_steps // 2, 1.0, 0.1) * config.learning_rate
            mean = [m + alpha * a_inv @ jnp.mean(g - gamma_in * w, axis=0) @ s_inv
                    for m, g, w, a_inv, s_inv in zip(mean, grads, weights, a_inverses,
                                                     s_inverses)]
            return (mean, a_factors, s_factors, roots), None

        (mean, _, _, (a_roots, s_roots)), _ = jax.lax.scan(
            step, (mean, a_factors, s_factors, spectra(a_factors, s_factors)[0]),
            (jnp.arange(config.num_steps), jax.random.split(train_key, config.num_steps)))
        return kronecker_posterior(mean, a_roots, s_roots, scale)

    def apply(posterior: Posterior, x, index):
        products = [functools.partial(_sampled_product, mean=m, row=p, noise=e, col=q)
                    for m, p, e, q in zip(posterior.mean, posterior.row_factor,
                                          _noise(index, posterior), posterior.col_factor)]
        return _forward(products, x, [0.0] * len(products))[0]

    def sample_index(key):
        return key  # the key of one network's weight noise

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=None),
                      accepts_padding=True)


def nng_sweep() -> tuple[NNGConfig, ...]:
    """Wang et al.'s grid for NNG (their Table 3): 6 configs.

    Learning rate {0.001, 0.003, 0.01} x one hidden layer of {50, 400} units; the
    other fields are the defaults (their NNG settings).
    """
    return tuple(NNGConfig(learning_rate=lr, hidden=h)
                 for lr, h in itertools.product((1e-3, 3e-3, 1e-2), ((50,), (400,))))
