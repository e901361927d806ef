"""Gaussian-process regression problems with an exact oracle.

A function ``f`` is drawn from a Gaussian process with the kernel of an
infinitely wide one-hidden-layer ReLU network
(:func:`neural_testbed.kernels.relu_nngp_kernel`), jointly at the T training inputs and a
pool of P test inputs, all ``x ~ N(0, I_d)``; targets are ``y = f(x) + e``
with ``e ~ N(0, noise_variance)``. A test tau-sample is tau inputs drawn with
replacement from the pool, with fresh noise, so its exact log-likelihood under
``f`` is known: the regression analogue of the classification testbed, scored
against the fixed sampled function (as the reference testbed's regression
environment does). The pool makes ``f`` a finite Gaussian vector that can be
drawn exactly; the posterior given the training data is the oracle
(:mod:`neural_testbed.agents.oracle_gp`). The Gaussian-process algebra is
:mod:`neural_testbed.gaussian_process`, shared with the agents.

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
section 5 (the synthetic setting).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base
from neural_testbed.gaussian_process import (
    KERNELS,
    condition,
    correlation,
    posterior_at,
    prior_covariance,
)
from neural_testbed.likelihood.regression import gaussian_log_density

__all__ = ["GPEnvironment", "GPRegressionProblem", "sample_test_data"]


class GPEnvironment(NamedTuple):
    """A sampled regression environment: ``f`` on the test pool, the noise, and at the
    first Q pool inputs (the probes) noisy targets and the exact posterior of ``f``."""

    pool_x: jax.Array  # [P, d]
    pool_f: jax.Array  # [P]
    noise_variance: jax.Array | float
    probe_correlation: jax.Array  # [Q, Q] the exact posterior's correlations of f
    probe_y: jax.Array  # [Q] f at the probes plus one draw of the noise (for XLL)
    probe_mean: jax.Array  # [Q] the exact posterior's mean of f
    probe_variance: jax.Array  # [Q] the exact posterior's variance of f


@functools.partial(jax.jit, static_argnames=("num_test", "tau"))
def sample_test_data(key: jax.Array, env: GPEnvironment, num_test: int,
                     tau: int) -> base.TestSamples:
    """``num_test`` tau-samples from the pool (with replacement), fresh noise, exact
    log-likelihoods ``sum_t log N(y_t; f(x_t), noise_variance)``."""
    index_key, noise_key = jax.random.split(key)
    index = jax.random.randint(index_key, (num_test, tau), 0, env.pool_x.shape[0])
    noise = jnp.sqrt(env.noise_variance) * jax.random.normal(noise_key, (num_test, tau))
    return base.TestSamples(x=env.pool_x[index], y=env.pool_f[index] + noise,
                            log_likelihood=gaussian_log_density(noise, env.noise_variance),
                            noise_variance=env.noise_variance,
                            probe_x=env.pool_x[:env.probe_correlation.shape[0]],
                            probe_correlation=env.probe_correlation, probe_y=env.probe_y,
                            probe_mean=env.probe_mean, probe_variance=env.probe_variance)


PROBLEM_VERSION = 1
# fold_in data for the noise on the probes' targets: a stream of its own, so adding
# those targets left every other draw of a problem as it was.
_PROBE_NOISE_STREAM = 2**31 - 2


@dataclasses.dataclass(frozen=True)
class GPRegressionProblem:
    """One GP regression problem and its evaluation settings.

    Each (d, noise variance, T, seed) draws its function, training data and
    test data from its own key (a hash of its definition): problems are
    independent.
    """

    problem_id: str  # stable id, e.g. "regression/17"
    input_dim: int  # d
    num_train: int  # T
    seed: int  # replicate index within its (d, noise variance, T) setting
    noise_variance: float = 0.01  # of the Gaussian noise on the targets
    kernel: str = "relu_nngp"  # the Gaussian process f is drawn from
    num_pool: int = 1000  # P, test inputs f is drawn at
    num_probes: int = 100  # Q <= P, pool inputs whose posterior correlations are compared
    taus: tuple[int, ...] = (1, 100)
    num_test: int = 1000  # N, test tau-samples per tau
    num_samples: int = 1000  # M, belief samples per test tau-sample

    metric = "kl"  # the exact likelihood is known
    num_classes = 1  # one real output per input
    num_hyperplanes = 7  # unused: regression has no partition estimator
    max_monte_carlo_tau = 9  # unused: regression has its own estimators
    target = "regression"

    def __post_init__(self):
        for name in ("input_dim", "num_train", "num_pool", "num_test", "num_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{self.problem_id}: {name} must be an integer >= 1, "
                                 f"got {value!r}")
        if not isinstance(self.noise_variance, (int, float)) or not self.noise_variance > 0 \
                or self.noise_variance == float("inf"):
            raise ValueError(f"{self.problem_id}: noise_variance must be a finite number > 0, "
                             f"got {self.noise_variance!r}")
        if not isinstance(self.num_probes, int) or not 2 <= self.num_probes <= self.num_pool:
            raise ValueError(f"{self.problem_id}: num_probes must be an integer from 2 to "
                             f"num_pool ({self.num_pool}), got {self.num_probes!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"{self.problem_id}: unknown kernel {self.kernel!r}; allowed: "
                             f"{', '.join(KERNELS)}")
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ValueError(f"{self.problem_id}: every tau must be an integer >= 1, "
                             f"got {self.taus!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.problem_id}: seed must be an integer >= 0, got {self.seed!r}")

    @property
    def shape(self) -> tuple:
        return ("gp_regression", self.input_dim, self.num_train, self.kernel, self.num_pool,
                self.num_probes, self.taus, self.num_test, self.num_samples)

    # Not paddable: the pool's draws follow the training inputs' and f is drawn
    # jointly over both, so a larger T's first T pairs are not this problem's.
    padding_group = None

    @property
    def stratum(self) -> tuple[tuple[int, float], int]:
        """Problems are stratified by ((d, noise variance), T)."""
        return (self.input_dim, self.noise_variance), self.num_train

    @property
    def stratum_columns(self) -> dict[str, float | int]:
        """The stratum's coordinates by name, as score records carry them."""
        return {"input_dim": self.input_dim, "noise_variance": self.noise_variance,
                "num_train": self.num_train}

    @property
    def key_seed(self) -> int:
        """A 32-bit seed that is a stable hash of what defines the problem's draws."""
        definition = (f"gp_regression/v{PROBLEM_VERSION}/d={self.input_dim}/"
                      f"kernel={self.kernel}/P={self.num_pool}/"
                      f"noise={self.noise_variance!r}/T={self.num_train}/seed={self.seed}")
        return base.definition_seed(definition)

    def build_args(self) -> dict[str, np.ndarray]:
        return {"noise_variance": np.asarray(self.noise_variance, np.float32)}

    def build(self, key: jax.Array, args) -> base.ProblemInstance:
        x_key, f_key, noise_key = jax.random.split(key, 3)
        x = jax.random.normal(x_key, (self.num_train + self.num_pool, self.input_dim))
        chol = jnp.linalg.cholesky(prior_covariance(self.kernel, x, x))
        f = chol @ jax.random.normal(f_key, (x.shape[0],))
        noise_variance = args["noise_variance"]
        noise = jnp.sqrt(noise_variance) * jax.random.normal(noise_key, (self.num_train,))
        data = base.Data(x=x[:self.num_train], y=f[:self.num_train] + noise)
        prior = base.RegressionPriorKnowledge(input_dim=self.input_dim, kernel=self.kernel,
                                              noise_variance=noise_variance)
        pool_x, pool_f = x[self.num_train:], f[self.num_train:]
        probe_mean, probe_cov = posterior_at(
            self.kernel, condition(self.kernel, data, noise_variance), pool_x[:self.num_probes])
        probe_noise = jnp.sqrt(noise_variance) * jax.random.normal(
            jax.random.fold_in(key, _PROBE_NOISE_STREAM), (self.num_probes,))
        env = GPEnvironment(pool_x, pool_f, noise_variance, correlation(probe_cov),
                            probe_y=pool_f[:self.num_probes] + probe_noise,
                            probe_mean=probe_mean, probe_variance=jnp.diag(probe_cov))
        return base.ProblemInstance(data, prior, env)

    def sample_test(self, key: jax.Array, env: GPEnvironment, tau: int) -> base.TestSamples:
        return sample_test_data(key, env, self.num_test, tau)

    def instance(self) -> base.ProblemInstance:
        """The problem's function on the pool, training data and prior knowledge, now."""
        template = dataclasses.replace(self, problem_id="", noise_variance=1.0, seed=0)
        return base.build_instance(self, template)
