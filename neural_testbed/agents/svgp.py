"""svgp: a sparse variational Gaussian process (Titsias 2009; Hensman et al. 2013, 2015).

Wang et al. score (SV)GP-RBF beside the BNNs: a GP with an RBF kernel whose
lengthscales (one per input dimension, ARD), signal variance and ``M`` inducing
inputs ``Z`` are fitted with Adam on the evidence lower bound. Each output
(the one regression value, or each of the K class logits) is a GP ``f_k`` with
that shared kernel and its own whitened variational posterior: with
``K_ZZ = L_Z L_Z^T``, ``u_k = f_k(Z) = L_Z v_k`` and ``q(v_k) = N(m_k, L_k L_k^T)``,
``L_k`` lower triangular (so ``q(v_k) = N(0, I)`` is the prior). Per training pair
the loss is

    mean over a minibatch of  E_q[-log p(y | f(x))]  +  sum_k KL(q(v_k) || N(0, I)) / T,

the negative ELBO divided by T. At an input, with ``a(x) = L_Z^-1 k_Z(x)``, the
marginal of ``f_k`` is Gaussian with mean ``a^T m_k`` and variance
``k(x, x) - |a|^2 + |L_k^T a|^2``: on regression the expectation of the Gaussian
likelihood of the known noise is then in closed form; on classification it is
estimated with ``num_samples`` draws of the K logits per pair (Hensman et al.
2015), by reparameterisation.

A belief sample is one joint draw of every output at the call's inputs ``X``:
with ``A = K_XZ L_Z^-T``,

    f_k = A m_k + A L_k eps_k + R zeta_k,   R R^T = K_XX - A A^T,

the sum of the draw of ``u_k`` carried through the GP's conditional mean and the
conditional's own spread (the same for every k). ``A``, ``A L_k`` and ``R`` depend
on the inputs only, so when the evaluator draws many samples at one set of
inputs they are computed once. The index is the key of ``eps`` and ``zeta``; the
draw is one function over the inputs of one call, as the gp agent's.

Where it departs from Wang et al.: the inducing inputs start at the first M
training inputs (the pairs come in random order, so a random subset; Wang et al.
seed them with k-means; with T < M pairs only T are used), and the noise variance
of a regression problem is the one the agent is told, not fitted (the gp agent's
choice). Their full GP for small data sets is the gp agent.

References:
  M. Titsias, "Variational learning of inducing variables in sparse Gaussian
  processes", AISTATS 2009. J. Hensman, N. Fusi and N. Lawrence, "Gaussian
  processes for big data", UAI 2013. J. Hensman, A. Matthews and Z. Ghahramani,
  "Scalable variational Gaussian process classification", AISTATS 2015.
  Wang et al., "Beyond marginal uncertainty: how accurately can Bayesian
  regression models estimate posterior predictive correlations?", AISTATS 2021.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from neural_testbed import base, gaussian_process, kernels
from neural_testbed.agents import _threefry, training, validation

__all__ = ["Parameters", "SVGPConfig", "SVGPState", "inverse_cholesky_factor",
           "make_svgp_agent", "marginals", "negative_elbo", "svgp_sweep", "whitened_kl"]

JITTER = 1e-4  # added to K_ZZ, relative to the signal variance, for its Cholesky factor


@dataclasses.dataclass(frozen=True)
class SVGPConfig:
    """Hyperparameters of the svgp agent (Wang et al.'s Adam, step size and ARD)."""

    num_inducing: int = 50  # M, the inducing inputs
    ard: bool = True  # one lengthscale per input dimension; False: one for all
    learning_rate: float = 3e-3  # Adam step size on every variational and kernel parameter
    num_steps: int = 5000  # Adam steps
    batch_size: int = 100  # minibatch size, drawn with replacement from the T pairs
    num_samples: int = 8  # draws of the logits per pair estimating E_q[log p] (classes only)
    lengthscale: float = 1.0  # starting lengthscale, in units of sqrt(d)
    signal_variance: float = 1.0  # starting k(x, x)

    def __post_init__(self):
        for name in ("num_inducing", "num_steps", "batch_size", "num_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("learning_rate", "lengthscale", "signal_variance"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        validation.check_fields(self)


class Parameters(NamedTuple):
    """What Adam fits: the kernel, the inducing inputs and the whitened posterior."""

    log_signal_variance: jax.Array  # scalar
    log_lengthscale: jax.Array  # [d] (ARD) or [1]
    inducing: jax.Array  # Z [M, d]
    active: jax.Array  # [M] 1.0, or 0.0 for an inducing variable left out (T < M); not fitted
    mean: jax.Array  # m [M, outputs]
    scale: jax.Array  # [outputs, M, M]; L_k = strict lower part + diag(exp(diagonal))


class SVGPState(NamedTuple):
    """A trained svgp agent: its parameters and the factors prediction reuses."""

    params: Parameters
    inverse_inducing: jax.Array  # L_Z^-1 [M, M], K_ZZ + jitter = L_Z L_Z^T
    scale: jax.Array  # L_k [outputs, M, M], lower triangular


def _kernel(params: Parameters, x1: jax.Array, x2: jax.Array) -> jax.Array:
    """The RBF kernel with one lengthscale per input dimension (or one for all)."""
    lengthscale = jnp.exp(params.log_lengthscale)
    return kernels.rbf_kernel(x1 / lengthscale, x2 / lengthscale,
                              jnp.exp(params.log_signal_variance))


def _lower(scale: jax.Array) -> jax.Array:
    """``L_k`` from its unconstrained form: positive diagonal, zeros above it."""
    diagonal = jnp.exp(jnp.diagonal(scale, axis1=-2, axis2=-1))
    return jnp.tril(scale, -1) + diagonal[..., None] * jnp.eye(scale.shape[-1], dtype=scale.dtype)


@jax.custom_vjp
def inverse_cholesky_factor(matrix: jax.Array) -> jax.Array:
    """``L^-1`` of the Cholesky factor ``L`` of a positive definite ``matrix [M, M]``.

    Two LAPACK calls, the second reading the first's result, and a gradient of matrix
    products alone. On a CPU, JAX 0.10's batched LAPACK kernels wait for work they queue
    on XLA's thread pool, and deadlock when as many run at once as the pool has threads
    (a vmapped training step's triangular solves and their gradients did, on 2 cores);
    here no two can run at once.
    """
    return _inverse_cholesky_factor_fwd(matrix)[0]


def _inverse_cholesky_factor_fwd(matrix):
    low = jnp.linalg.cholesky(matrix)
    inverse = jax.scipy.linalg.solve_triangular(
        low, jnp.eye(matrix.shape[-1], dtype=matrix.dtype), lower=True)
    return inverse, (low, inverse)


def _inverse_cholesky_factor_bwd(saved, g_inverse):
    low, inverse = saved
    # d(L^-1) = -L^-1 dL L^-1, so dL's cotangent is -L^-T g L^-T, on the lower triangle.
    g_low = jnp.tril(-inverse.T @ g_inverse @ inverse.T)
    # Then the Cholesky factor's (Murray 2016): L^-T Phi(L^T g_L) L^-1, symmetrised,
    # Phi the lower triangle with its diagonal halved.
    phi = jnp.tril(low.T @ g_low)
    phi = phi - 0.5 * jnp.diag(jnp.diagonal(phi))
    g_matrix = inverse.T @ phi @ inverse
    return (0.5 * (g_matrix + g_matrix.T),)


inverse_cholesky_factor.defvjp(_inverse_cholesky_factor_fwd, _inverse_cholesky_factor_bwd)


def _inverse_inducing_factor(params: Parameters) -> jax.Array:
    """``L_Z^-1``, with ``K_ZZ + jitter = L_Z L_Z^T``.

    An inducing variable left out (``active`` 0) is independent of every other and of f,
    with variance k(x, x): with fewer pairs than inducing inputs, copies of one input
    would make K_ZZ singular but for the jitter, and its float32 factor fail (NaN).
    """
    z, active = params.inducing, jax.lax.stop_gradient(params.active)
    signal = jnp.exp(params.log_signal_variance)
    eye = jnp.eye(z.shape[0], dtype=z.dtype)
    k_zz = active[:, None] * active[None, :] * _kernel(params, z, z) + signal * (1 - active) * eye
    return inverse_cholesky_factor(k_zz + JITTER * signal * eye)


def _projection(params: Parameters, inverse_inducing: jax.Array, x: jax.Array) -> jax.Array:
    """``A = K_XZ L_Z^-T``, ``[n, M]``."""
    active = jax.lax.stop_gradient(params.active)
    return (_kernel(params, x, params.inducing) * active) @ inverse_inducing.T


def marginals(params: Parameters, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The posterior mean and variance of every output at each input, ``[n, outputs]`` each."""
    a = _projection(params, _inverse_inducing_factor(params), x)
    spread = jnp.einsum("nm,kml->nkl", a, _lower(params.scale))  # rows of A L_k
    variance = (jnp.exp(params.log_signal_variance) - jnp.sum(a**2, axis=-1))[:, None]
    variance = variance + jnp.sum(spread**2, axis=-1)
    return a @ params.mean, jnp.clip(variance, 0.0)


def whitened_kl(mean: jax.Array, lower: jax.Array) -> jax.Array:
    """``sum_k KL(N(m_k, L_k L_k^T) || N(0, I))``: ``mean [M, K]``, ``lower [K, M, M]``."""
    m = mean.shape[0]
    log_det = jnp.sum(jnp.log(jnp.abs(jnp.diagonal(lower, axis1=-2, axis2=-1))), axis=-1)
    per_output = 0.5 * (jnp.sum(lower**2, axis=(-2, -1)) + jnp.sum(mean**2, axis=0) - m) - log_det
    return jnp.sum(per_output)


def negative_elbo(key: jax.Array, params: Parameters, batch: base.Data, prior,
                  num_train, num_samples: int) -> jax.Array:
    """The loss: the negative ELBO per training pair, its data term estimated on ``batch``.

    Up to the likelihood's constant (``training.data_loss`` drops it): on regression,
    ``T`` times this plus ``T/2 log(2 pi noise_variance)`` is minus the ELBO, which is the
    log marginal likelihood when ``q`` is the exact posterior and ``Z`` the inputs.
    ``key`` draws the logits of the classification term's estimate.
    """
    mean, variance = marginals(params, batch.x)  # [b, outputs] each
    if training.is_regression(prior):
        expected = ((batch.y - mean[:, 0]) ** 2 + variance[:, 0]) / (2 * prior.noise_variance)
    else:
        eps = jax.random.normal(key, (num_samples, *mean.shape))
        logits = mean + jnp.sqrt(variance) * eps
        expected = training.data_loss(logits, batch.y, prior).mean(axis=0)
    return jnp.mean(expected) + whitened_kl(params.mean, _lower(params.scale)) / num_train


def make_svgp_agent(config: SVGPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the svgp agent; its belief index is a PRNG key (one joint draw per call).

    Example:
      >>> agent = make_svgp_agent(SVGPConfig(num_inducing=20), base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))  # [n, 2]
    """
    num_inducing, outputs = config.num_inducing, shapes.num_outputs

    def train(key: jax.Array, data: base.Data, prior) -> SVGPState:
        num_train = base.num_pairs(data)
        rows = jnp.arange(data.x.shape[0])
        if data.mask is not None:
            rows = jnp.nonzero(data.mask, size=data.mask.shape[0], fill_value=0)[0]
        # The first M pairs: a random subset, since pairs are in random order, and the
        # same with or without padding. With T < M, the rest are left out (``active``).
        inducing = data.x[rows[jnp.arange(num_inducing) % num_train]]
        active = (jnp.arange(num_inducing) < num_train).astype(jnp.float32)
        scale_dims = shapes.input_dim if config.ard else 1
        params = Parameters(
            log_signal_variance=jnp.log(jnp.asarray(config.signal_variance, jnp.float32)),
            log_lengthscale=jnp.full((scale_dims,), jnp.log(
                jnp.asarray(config.lengthscale, jnp.float32) * math.sqrt(shapes.input_dim))),
            inducing=inducing,
            active=active,
            mean=jnp.zeros((num_inducing, outputs)),
            scale=jnp.zeros((outputs, num_inducing, num_inducing)),  # L_k = I: the prior
        )

        def loss_fn(key, params, batch):
            return negative_elbo(key, params, batch, prior, num_train, config.num_samples)

        params, _ = training.train_minibatch(
            key, loss_fn, params, data, optax.adam(config.learning_rate), config.num_steps,
            config.batch_size)
        return SVGPState(params, _inverse_inducing_factor(params), _lower(params.scale))

    def apply(state: SVGPState, x: jax.Array, key: jax.Array) -> jax.Array:
        params = state.params
        a = _projection(params, state.inverse_inducing, x)  # [n, M]
        spread = jnp.einsum("nm,kml->knl", a, state.scale)  # A L_k, [outputs, n, M]
        root = gaussian_process.covariance_root(_kernel(params, x, x) - a @ a.T)
        eps_key, zeta_key = jax.random.split(_threefry.fast_key(key))
        eps = jax.random.normal(eps_key, (outputs, num_inducing))
        zeta = jax.random.normal(zeta_key, (x.shape[0], outputs))
        return a @ params.mean + jnp.einsum("knl,kl->nk", spread, eps) + root @ zeta

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key),
                      accepts_padding=True)


def svgp_sweep() -> tuple[SVGPConfig, ...]:
    """M in {10, 50, 200} inducing inputs x ARD on and off (6 configs). Wang et al. fix
    the step size (3e-3) and ARD and give no grid; M is what the sparse approximation
    trades, and ARD what T = d pairs may be too few for."""
    return tuple(SVGPConfig(num_inducing=m, ard=ard)
                 for m, ard in itertools.product((10, 50, 200), (True, False)))
