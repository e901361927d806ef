"""The deep_kernel agent: its samples against appendix B.9's closed forms (its contract
is in test_contract.py)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard, networks
from neural_testbed.agents import deep_kernel

SMOKE = leaderboard.get_sweep("smoke")
PROBLEM = next(p for p in SMOKE.values() if p.num_train == 10)
SHAPES = base.Shapes.of(PROBLEM)
TINY = deep_kernel.DeepKernelConfig(num_steps=100, hidden=(16, 6), sigma_squared=0.5)

# Jitted once here: called eagerly, every primitive compiles on its own.
_features_and_logits = jax.jit(deep_kernel.features_and_logits, static_argnums=2)
_posterior_logits = jax.jit(deep_kernel.posterior_logits, static_argnums=3)


@pytest.fixture(scope="module")
def trained():
    """The tiny config trained on a T = 10 problem, its training inputs and 3 test inputs."""
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = agents.make_deep_kernel_agent(TINY, SHAPES)
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    x_test = np.random.default_rng(1).normal(size=(3, PROBLEM.input_dim)).astype(np.float32)
    return agent, state, np.asarray(data.x), x_test


def _features(state, x):
    phi, mu = _features_and_logits(state.params, x, TINY.normalization)
    return np.asarray(phi, np.float64), np.asarray(mu, np.float64)


def test_sample_is_mu_plus_sigma_phi_l_inverse_transpose_zeta(trained):
    """With a fixed zeta, a sample is exactly mu + sigma Phi_* L^-T zeta, with L the
    Cholesky factor of sigma^2 I + Phi^T Phi computed here in float64."""
    _, state, x_train, x_test = trained
    phi, _ = _features(state, x_train)
    phi_test, mu = _features(state, x_test)
    sigma2 = TINY.sigma_squared
    chol = np.linalg.cholesky(sigma2 * np.eye(phi.shape[1]) + phi.T @ phi)
    zeta = np.random.default_rng(2).normal(size=(phi.shape[1], 2)).astype(np.float32)
    expected = mu + np.sqrt(sigma2) * phi_test @ np.linalg.solve(chol.T, zeta.astype(np.float64))
    got = _posterior_logits(state, x_test, zeta, TINY.normalization)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)  # float32 vs float64


def test_cholesky_factor_is_accurate_where_the_direct_one_fails():
    """Sharp, collinear features and a small sigma: sigma^2 I + Phi^T Phi has condition
    number ~5e12, and float32's direct Cholesky of it returns NaN. The QR route gives a
    lower-triangular L whose sampling covariance sigma^2 (L L^T)^-1 matches float64's to
    1e-2 of its largest entry (measured: 7e-4)."""
    rng = np.random.default_rng(0)
    phi = 300.0 * np.abs(rng.normal(size=(1000, 8)))
    phi[:, 7] = phi[:, 6]  # a repeated feature: Phi^T Phi is singular
    sigma = 1e-2
    chol = np.asarray(jax.jit(deep_kernel.cholesky_factor)(phi.astype(np.float32), sigma),
                      np.float64)
    assert np.all(np.isfinite(chol)) and np.all(np.diag(chol) > 0)
    np.testing.assert_array_equal(chol, np.tril(chol))
    exact = sigma**2 * np.linalg.inv(sigma**2 * np.eye(8) + phi.T @ phi)
    got = sigma**2 * np.linalg.inv(chol @ chol.T)
    assert np.abs(got - exact).max() < 1e-2 * np.abs(exact).max()


def test_empirical_covariance_of_samples_is_the_gp_posterior(trained):
    """Over 4000 sampled functions, the logits at 3 test inputs have mean mu and, for each
    class, covariance Phi_* Phi_*^T - Phi_* Phi^T (sigma^2 I + Phi Phi^T)^-1 Phi Phi_*^T: the
    appendix's conditional covariance in its T x T form (not the Woodbury form the agent
    uses); the two classes are independent."""
    agent, state, x_train, x_test = trained
    num = 4000
    sample = jax.jit(lambda key: jax.vmap(lambda k: agent.enn.apply(
        state, x_test, agent.enn.sample_index(k)))(jax.random.split(key, num)))
    samples = np.asarray(sample(jax.random.key(3)), np.float64)  # [num, 3, K]
    phi, _ = _features(state, x_train)
    phi_test, mu = _features(state, x_test)
    gram = TINY.sigma_squared * np.eye(len(phi)) + phi @ phi.T
    cov = phi_test @ phi_test.T - phi_test @ phi.T @ np.linalg.solve(gram, phi @ phi_test.T)
    # Standard errors of a Gaussian sample mean and covariance over `num` draws:
    # sd(mean_i) = sqrt(C_ii / num), sd(C^_ij) = sqrt((C_ii C_jj + C_ij^2) / num).
    # 5 SE per entry: a false failure among the 30 entries has probability < 1e-5.
    diag = np.diag(cov)
    mean_se = np.sqrt(diag / num)
    cov_se = np.sqrt((np.outer(diag, diag) + cov**2) / num)
    np.testing.assert_array_less(np.abs(samples.mean(0) - mu),
                                 np.broadcast_to(5 * mean_se[:, None] + 1e-6, mu.shape))
    for k in range(2):
        empirical = np.cov(samples[:, :, k], rowvar=False)
        np.testing.assert_array_less(np.abs(empirical - cov), 5 * cov_se + 1e-6)
    # Across classes: covariance 0, with sd sqrt(C_ii C_jj / num).
    cross = (samples[:, :, 0] - samples[:, :, 0].mean(0)).T @ (
        samples[:, :, 1] - samples[:, :, 1].mean(0)) / (num - 1)
    np.testing.assert_array_less(np.abs(cross), 5 * np.sqrt(np.outer(diag, diag) / num) + 1e-6)


def test_temperature_scaled_sigma_uses_sigma_squared_times_temperature():
    """The reference's option: sigma^2 * temperature gives the same state as that sigma^2."""
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    tied = dataclasses.replace(TINY, sigma_squared=2.0, temperature_scaled_sigma=True)
    plain = dataclasses.replace(TINY, sigma_squared=2.0 * prior.temperature)
    a, b = (jax.jit(agents.make_deep_kernel_agent(c, SHAPES).train)(jax.random.key(0), data, prior)
            for c in (tied, plain))
    np.testing.assert_allclose(a.sample_matrix, b.sample_matrix, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("normalization", ["during_training", "only_output"])
def test_normalised_features_have_unit_length(normalization):
    config = dataclasses.replace(TINY, normalization=normalization)
    _, data = leaderboard.load_problem(PROBLEM)
    agent = agents.make_deep_kernel_agent(config, SHAPES)
    state = jax.jit(agent.train)(jax.random.key(0), data, leaderboard.prior_knowledge(PROBLEM))
    phi, _ = _features_and_logits(state.params, data.x, normalization)
    norms = np.linalg.norm(phi, axis=-1)
    np.testing.assert_allclose(norms[norms > 1e-3], 1.0, rtol=1e-4)


def test_normalisation_has_finite_gradients_where_every_unit_is_off():
    """An input that switches off the whole last hidden layer (phi = 0) must not
    give NaN gradients while training with normalised features."""
    normalizations = ("during_training", "only_output")

    @jax.jit  # one program for both, rather than every primitive compiled on its own
    def gradients():
        params = networks.init_mlp(jax.random.key(0), 2, (4, 3, 2))
        params[1]["b"] = jnp.full((3,), -100.0)  # every unit of the last hidden layer off
        x = jnp.ones((5, 2))
        return [jax.grad(lambda p: sum(
            out.sum() for out in deep_kernel.features_and_logits(p, x, normalization)))(params)
            for normalization in normalizations]

    for normalization, grads in zip(normalizations, gradients()):
        assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads)), normalization


@pytest.mark.slow  # training and evaluating through the runner (the contract tests cover its parts)
def test_runs_through_the_leaderboard_with_finite_kls():
    """Two smoke problems, N and M cut to 100 so that it takes seconds."""
    problems = [dataclasses.replace(p, num_test=100, num_samples=100)
                for p in list(SMOKE.values())[:2]]
    rows = leaderboard.run_agent(functools.partial(agents.make_deep_kernel_agent, TINY), problems,
                                 "deep_kernel", config=TINY, progress=False)
    assert len(rows) == 4 and all(r.status == "ok" for r in rows), rows
    assert all(np.isfinite(r.kl) and r.kl > -0.5 for r in rows), [r.kl for r in rows]


def test_sweep_covers_sigma_and_weight_decay():
    sweep = agents.deep_kernel_sweep()
    assert len(sweep) == 20 and len(set(sweep)) == 20
    assert sorted({c.sigma_squared for c in sweep}) == [0.01, 0.1, 1.0, 10.0, 100.0]
    assert sorted({c.l2_weight_decay for c in sweep}) == [1e-6, 1e-5, 1e-4, 1.0]


@pytest.mark.parametrize(
    "field, value, message",
    [("sigma_squared", 0.0, "sigma_squared must be > 0"),
     ("sigma_squared", float("nan"), "sigma_squared must be"),
     ("normalization", "batch", "normalization must be one of"),
     ("num_steps", 0, "num_steps must be >= 1"),
     ("hidden", (), "hidden must be one or more widths")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        agents.DeepKernelConfig(**{field: value})
