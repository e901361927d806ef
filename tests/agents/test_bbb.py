"""The Bayes-by-backprop agent: KL terms, determinism, priors, configs and sweep."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard, networks
from neural_testbed.agents import bbb

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SMALL = bbb.BBBConfig(num_steps=100, init_stddev=0.1)
SHAPES = base.Shapes(input_dim=2, num_outputs=2)

# Jitted once here: called eagerly, every primitive compiles on its own.
_gaussian_kl = jax.jit(bbb.gaussian_kl)


def _normal_pdf(w, mean, stddev):
    return np.exp(-0.5 * ((w - mean) / stddev) ** 2) / (stddev * math.sqrt(2 * math.pi))


def _integrated_kl(mean, stddev, prior_pdf):
    """KL(N(mean, stddev^2) || prior) by the trapezoidal rule in float64 over +-12 stddevs."""
    w = np.linspace(mean - 12 * stddev, mean + 12 * stddev, 200_001)
    q = _normal_pdf(w, mean, stddev)
    return np.trapezoid(q * (np.log(q) - np.log(prior_pdf(w))), w)


def test_gaussian_kl_matches_its_closed_form():
    """Random means and stddevs in a two-leaf tree, against the textbook form in float64:
    KL = 1/2 sum_i (s_i^2 + m_i^2) / s0^2 - 1 - log(s_i^2 / s0^2)."""
    rng = np.random.default_rng(0)
    mean = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=(5,))}
    stddev = {"a": rng.uniform(0.05, 2.0, size=(3, 4)), "b": rng.uniform(0.05, 2.0, size=(5,))}
    s0 = 0.7
    expected = sum(
        0.5 * np.sum((s**2 + m**2) / s0**2 - 1 - np.log(s**2 / s0**2))
        for m, s in zip((mean["a"], mean["b"]), (stddev["a"], stddev["b"])))
    got = _gaussian_kl(jax.tree.map(np.float32, mean), jax.tree.map(np.float32, stddev), s0)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # zero exactly when q is the prior, and equal to the integral for one parameter
    np.testing.assert_allclose(
        _gaussian_kl(np.zeros(7, np.float32), np.full(7, s0, np.float32), s0), 0.0, atol=1e-6)
    one = _gaussian_kl(np.array([0.4], np.float32), np.array([0.2], np.float32), 0.3)
    np.testing.assert_allclose(
        one, _integrated_kl(0.4, 0.2, lambda w: _normal_pdf(w, 0.0, 0.3)), rtol=1e-5)


@pytest.mark.parametrize("pi", [0.0, 0.5, 0.8, 1.0])
def test_monte_carlo_mixture_kl_converges_to_the_integral(pi):
    """One parameter, q = N(0.3, 0.4^2), prior pi N(0, 1) + (1 - pi) N(0, 0.25^2).

    The mean of n = 200,000 one-draw estimates log q(w) - log p(w), w ~ q, must be within 4
    standard errors (their sample stddev / sqrt(n)) of the numerically integrated KL."""
    mean, stddev, s1, s2, n = 0.3, 0.4, 1.0, 0.25, 200_000

    @jax.jit  # the draws and the estimates in one program (pi traced: one for all four)
    def one_draw_estimates(key, pi):
        weights = mean + stddev * jax.random.normal(key, (n,))
        return jax.vmap(
            lambda w: bbb.scale_mixture_kl_estimate(w, jnp.float32(mean), jnp.float32(stddev),
                                                    s1, s2, pi))(weights)

    estimates = np.asarray(one_draw_estimates(jax.random.key(0), pi), np.float64)
    exact = _integrated_kl(
        mean, stddev, lambda w: pi * _normal_pdf(w, 0, s1) + (1 - pi) * _normal_pdf(w, 0, s2))
    stderr = estimates.std(ddof=1) / math.sqrt(n)
    assert abs(estimates.mean() - exact) < 4 * stderr, (estimates.mean(), exact, stderr)
    if pi in (0.0, 1.0):  # a single Gaussian: the integral is also the closed form
        only = s1 if pi == 1.0 else s2
        np.testing.assert_allclose(
            exact, _gaussian_kl(np.float32(mean), np.float32(stddev), only), rtol=1e-5)


@pytest.mark.parametrize("pi", [0.0, 1.0])
def test_mixture_kl_has_finite_gradients_at_the_extreme_weights(pi):
    def estimate(mean, stddev):
        return bbb.scale_mixture_kl_estimate(jnp.array([0.1, -2.0]), mean, stddev, 1.0, 0.5, pi)

    grads = jax.jit(jax.grad(estimate, argnums=(0, 1)))(np.array([0.0, 0.2], np.float32),
                                                        np.array([0.3, 0.3], np.float32))
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_weight_samples_have_the_posterior_moments():
    """2000 draws of a 3-leaf posterior: per-weight sample means within 4 standard errors
    of mu (stddev / sqrt(2000)), sample stddevs within 10% of softplus(rho)."""
    mean = [{"w": np.array([[0.5, -1.0]], np.float32), "b": np.array([2.0], np.float32)}]
    rho = [{"w": np.array([[-1.0, 0.5]], np.float32), "b": np.array([0.0], np.float32)}]
    posterior = bbb.Posterior(mean, rho)
    draws = jax.jit(lambda key: jax.vmap(lambda k: bbb.sample_weights(k, posterior))(
        jax.random.split(key, 2000)))(jax.random.key(0))
    for name in ("w", "b"):
        stddev = np.log1p(np.exp(np.asarray(rho[0][name])))
        samples = np.asarray(draws[0][name])
        assert np.all(np.abs(samples.mean(0) - mean[0][name]) < 4 * stddev / math.sqrt(2000))
        np.testing.assert_allclose(samples.std(0), stddev, rtol=0.1)


@pytest.mark.slow
@pytest.mark.usefixtures("optimised_compiles")  # 1500 training steps: running, not compiling
def test_strong_kl_pulls_the_posterior_to_the_prior():
    """With one training pair the KL / T term dominates: after training, the posterior
    stddevs of the hidden layer sit near sigma_1 and the means near 0 (the Gaussian prior),
    far from their initial 0.01 and fan-in draws."""
    problem = next(p for p in PAPER.values()
                   if p.temperature == 0.5 and p.num_train == 1 and p.seed == 0)
    _, data = leaderboard.load_problem(problem)
    prior = leaderboard.prior_knowledge(problem)
    config = bbb.BBBConfig(num_steps=1500, learning_rate=1e-2, sigma_1=0.5,
                           adaptive_weight_scale=False)
    posterior = jax.jit(bbb.make_bbb_agent(config, SHAPES).train)(jax.random.key(0), data, prior)
    stddev = np.log1p(np.exp(np.asarray(posterior.rho[1]["w"])))
    assert abs(np.median(stddev) - 0.5) < 0.05, np.median(stddev)
    assert np.median(np.abs(posterior.mean[1]["w"])) < 0.05


def test_defaults_are_the_references():
    """The reference's BBB factory config, its ENN's initial stddev and its batch size."""
    config = bbb.BBBConfig()
    assert (config.hidden, config.learning_rate, config.num_steps, config.batch_size,
            config.num_samples, config.weight_prior, config.sigma_1, config.sigma_2,
            config.mixture_pi, config.adaptive_weight_scale, config.init_stddev) == (
        (50, 50), 3e-3, 10_000, 100, 8, "gaussian", 0.3, 0.75, 1.0, True, 0.01)


def test_the_posterior_starts_at_the_references_initialisation():
    """The agent splits its key into (init, train). After one Adam step (each parameter moves
    by at most the step size lr), the stddevs are within lr * softplus'(rho) of 0.01 and the
    means within lr of a fresh init_mlp draw (fan-in scaled weights, zero biases)."""
    x = np.random.default_rng(20).normal(size=(20, 2)).astype(np.float32)
    data = base.Data(x=x, y=(x[:, 0] > 0).astype(np.int32))
    prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50), temperature=0.1)
    config = bbb.BBBConfig(num_steps=1)
    key = jax.random.key(3)
    posterior = jax.jit(bbb.make_bbb_agent(config, SHAPES).train)(key, data, prior)
    lr, rho0 = config.learning_rate, math.log(math.expm1(0.01))
    slope = 1 / (1 + math.exp(-(rho0 + lr)))  # softplus' = sigmoid, increasing
    for rho in jax.tree.leaves(posterior.rho):
        softplus = np.log1p(np.exp(np.asarray(rho, np.float64)))
        np.testing.assert_allclose(softplus, 0.01, rtol=0, atol=lr * slope * 1.01)
    start = jax.jit(lambda key: networks.init_mlp(jax.random.split(key)[0], 2, (50, 50, 2)))(key)
    for mean, fresh in zip(jax.tree.leaves(posterior.mean), jax.tree.leaves(start)):
        np.testing.assert_allclose(mean, fresh, rtol=0, atol=lr * 1.01)


def test_sweep_mixture_configs_train_against_the_mixture():
    sweep = agents.bbb_sweep()
    assert len(sweep) == len(set(sweep)) == 86
    gaussian = [c for c in sweep if c.weight_prior == "gaussian"]
    mixture = [c for c in sweep if c.weight_prior == "scale_mixture"]
    assert {(c.learning_rate, c.sigma_1, c.num_steps) for c in gaussian} >= {
        (lr, s, n) for lr in (1e-3, 3e-3) for s in (0.3, 0.5, 0.7, 1.0, 2.0)
        for n in (500, 1000, 10_000)}
    assert {(c.sigma_1, c.sigma_2, c.mixture_pi, c.num_steps) for c in mixture} == {
        (s1, s2, pi, n) for s1 in (1.0, 2.0, 4.0) for s2 in (0.25, 0.5, 0.75)
        for pi in (0.0, 0.5, 1.0) for n in (1000, 10_000)}
    assert {c.hidden for c in sweep} == {(50, 50), (100, 100), (50, 50, 50)}


@pytest.mark.slow
def test_the_prior_changes_the_trained_posterior():
    """Same seeds, same sigma_1: the mixture prior (pi = 0.5, sigma_2 = 0.25) trains to a
    different posterior than the Gaussian one, so the weight_prior field is really used."""
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    config = dataclasses.replace(SMALL, sigma_1=1.0, num_steps=50, adaptive_weight_scale=False)
    mixture = dataclasses.replace(
        config, weight_prior="scale_mixture", sigma_2=0.25, mixture_pi=0.5)
    a = jax.jit(bbb.make_bbb_agent(config, SHAPES).train)(jax.random.key(0), data, prior)
    b = jax.jit(bbb.make_bbb_agent(mixture, SHAPES).train)(jax.random.key(0), data, prior)
    assert np.abs(np.asarray(a.rho[1]["w"]) - np.asarray(b.rho[1]["w"])).max() > 1e-3


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("bbb")
    assert spec.default == bbb.BBBConfig()
    config = agents.parse_overrides(
        spec, ["weight_prior=scale_mixture", "sigma_1=2", "mixture_pi=0.25"])
    assert config == dataclasses.replace(
        spec.default, weight_prior="scale_mixture", sigma_1=2.0, mixture_pi=0.25)
    with pytest.raises(ValueError, match="allowed values are gaussian, scale_mixture"):
        agents.parse_overrides(spec, ["weight_prior=laplace"])


@pytest.mark.parametrize(
    "field, value, message",
    [("sigma_1", 0.0, "sigma_1 must be > 0, got 0.0"),
     ("sigma_2", -0.5, "sigma_2 must be > 0, got -0.5"),
     ("init_stddev", 0.0, "init_stddev must be > 0"),
     ("mixture_pi", 1.5, r"mixture_pi must be in \[0, 1\], got 1.5"),
     ("weight_prior", "laplace",
      "weight_prior must be one of gaussian, scale_mixture, got 'laplace'"),
     ("num_samples", 0, "num_samples must be >= 1, got 0"),
     ("num_steps", 0, "num_steps must be >= 1, got 0"),
     ("learning_rate", 0.0, "learning_rate must be > 0"),
     ("hidden", (50, 0), "hidden must be one or more widths")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        bbb.BBBConfig(**{field: value})
