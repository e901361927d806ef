"""The noisy K-FAC agent: Bayesian linear regression's posterior mean, the matrix-variate
samples, the ENN contract, padding, a classification score, configs and sweep."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, evaluation, generative, leaderboard
from neural_testbed.agents import nng, trivial

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SHAPES = base.Shapes.of(PROBLEM)
SMALL = nng.NNGConfig(hidden=(16,), num_steps=30, num_samples=2, learning_rate=0.01)


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = nng.make_nng_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, data, prior, train, train(jax.random.key(0), data, prior)


def test_one_layer_on_regression_finds_the_exact_posterior_mean():
    """With no hidden layer and a Gaussian likelihood the model is Bayesian linear
    regression on the features a = concat(x, 1) / sqrt(d + 1): the posterior is Gaussian
    with precision I / eta + a^T a / sigma^2 (summed over the pairs) and mean
    precision^-1 a^T y / sigma^2. There the update's fixed point (V = 0 in expectation:
    the mean gradient of the log-likelihood at the posterior mean balances gamma_in mu)
    is that mean, whatever the Kronecker factors are, since the expected gradient is
    linear in the weights.

    Tolerance: the iterate fluctuates about the fixed point by its step noise (the batch
    drawn with replacement, the weight draws) damped to about sqrt(alpha / 2) of it at
    the final step size alpha = 0.01, below 0.06 posterior standard deviations in every
    coordinate over 20 seeds; 0.15 of them is well above that and far below the prior's
    pull (least squares, the answer without the prior, is about one posterior standard
    deviation away, checked first).

    The covariance is not the exact one but NNG's own fixed point, checked too:
    (1 / N) (A + sqrt(gamma_in) I)^-1 / (S + sqrt(gamma_in)), with A = a^T a / T and the
    Fisher S = 1 / sigma^2 (the mean of (y~ - f)^2 / sigma^4 over targets y~ drawn from
    the network, N(f, sigma^2)). The factors are moving averages of minibatch statistics,
    whose noise leaves about 1% (relative, Frobenius; measured over seeds): 5% is the
    tolerance, while the fixed point with the empirical Fisher of the observed targets,
    E[(y - a w)^2] / sigma^4 with w drawn from the posterior, is 13% away here. (The
    damping added to both factors makes this covariance about 0.4 of the exact one, T = 20.)"""
    d, num_train, noise_variance = 2, 20, 0.5
    rng = np.random.default_rng(0)
    x = rng.normal(size=(num_train, d)).astype(np.float32)
    a = np.concatenate([x, np.ones((num_train, 1))], axis=1) / math.sqrt(d + 1)
    y = (a @ np.array([2.0, -1.5, 1.0]) + math.sqrt(noise_variance) * rng.normal(size=num_train))
    precision = np.eye(d + 1) + a.T @ a / noise_variance  # eta = 1
    covariance = np.linalg.inv(precision)
    exact = covariance @ a.T @ y / noise_variance
    stddev = np.sqrt(np.diag(covariance))
    least_squares = np.linalg.lstsq(a, y, rcond=None)[0]
    assert np.all(np.abs(least_squares - exact) > 0.8 * stddev)

    prior = base.RegressionPriorKnowledge(input_dim=d, kernel="relu_nngp",
                                          noise_variance=noise_variance)
    config = nng.NNGConfig(hidden=(), num_steps=1000, learning_rate=0.1, batch_size=80,
                           ema_decay=0.99)
    agent = nng.make_nng_agent(config, base.Shapes(d, 1))
    posterior = jax.jit(agent.train)(jax.random.key(0),
                                     base.Data(jnp.asarray(x), jnp.asarray(y, jnp.float32)),
                                     prior)
    mean = np.asarray(posterior.mean[0][:, 0], np.float64)
    assert np.all(np.abs(mean - exact) < 0.15 * stddev), ((mean - exact) / stddev)

    damping = math.sqrt(1 / num_train)  # sqrt(gamma_in), lambda = eta = 1
    fixed_point = np.linalg.inv(a.T @ a / num_train + damping * np.eye(d + 1)) / (
        num_train * (1 / noise_variance + damping))
    row = np.asarray(posterior.row_factor[0], np.float64)
    col = np.asarray(posterior.col_factor[0], np.float64)
    got = row @ row.T * (col.T @ col).item()
    assert np.linalg.norm(got - fixed_point) < 0.05 * np.linalg.norm(fixed_point), (
        got, fixed_point)


def test_samples_have_the_matrix_variate_covariance():
    """Random SPD factors A [4, 4] and S [3, 3]: 20,000 draws of the layer's weights have
    covariance scale^2 (A + damping I)^-1 (x) (S + damping I)^-1 (row-major vec) and mean
    mu. Each entry of a sample covariance of n draws has standard error
    sqrt((C_ij^2 + C_ii C_jj) / n), of a mean sqrt(C_ii / n): every entry within 5 of them.
    A second layer checks that the draws of layers are independent."""
    rng = np.random.default_rng(1)

    def spd(size):
        m = rng.normal(size=(size, size))
        return (m @ m.T / size).astype(np.float32)

    a_factors, s_factors = [spd(4), spd(2)], [spd(3), spd(2)]
    mean = [rng.normal(size=(4, 3)).astype(np.float32), np.zeros((2, 2), np.float32)]
    scale, damping, n = 0.3, 0.1, 20_000

    @jax.jit
    def draws(key):
        roots, _ = nng.spectral_factors([*a_factors, *s_factors], damping, damping)
        posterior = nng.kronecker_posterior(mean, roots[:2], roots[2:], scale)
        return jax.vmap(nng.sample_weights, in_axes=(0, None))(jax.random.split(key, n),
                                                             posterior)

    samples = [np.asarray(w, np.float64).reshape(n, -1) for w in draws(jax.random.key(2))]
    expected = np.kron(scale**2 * np.linalg.inv(a_factors[0] + damping * np.eye(4)),
                       np.linalg.inv(s_factors[0] + damping * np.eye(3)))
    covariance = np.cov(samples[0], rowvar=False)
    variance = np.diag(expected)
    stderr = np.sqrt((expected**2 + np.outer(variance, variance)) / n)
    assert np.all(np.abs(covariance - expected) < 5 * stderr), np.max(
        np.abs(covariance - expected) / stderr)
    assert np.all(np.abs(samples[0].mean(0) - mean[0].ravel()) < 5 * np.sqrt(variance / n))
    across = np.cov(samples[0], samples[1], rowvar=False)[:12, 12:]
    other = np.var(samples[1], axis=0)
    assert np.all(np.abs(across) < 5 * np.sqrt(np.outer(variance, other) / n))


def _network(weights, x):
    """Wang et al.'s BNN in float64: a_l = concat(z_{l-1}, 1) / sqrt(V_{l-1} + 1),
    s_l = a_l W_l, z_l = relu(s_l) but for the last layer."""
    z = np.asarray(x, np.float64)
    for i, w in enumerate(weights):
        a = np.concatenate([z, np.ones((z.shape[0], 1))], axis=1) / math.sqrt(z.shape[1] + 1)
        z = a @ np.asarray(w, np.float64)
        z = z if i == len(weights) - 1 else np.maximum(z, 0)
    return z


def test_one_network_per_key(trained):
    """The same key gives the same network, a different key a different one; finite
    float32 outputs [n, K]: the network of the key's weights (sample_weights), whether
    apply forms the weights (7 inputs) or carries one input through the factors."""
    agent, *_, posterior = trained
    x = jax.random.normal(jax.random.key(3), (7, 2))
    outputs = jax.jit(agent.enn.apply)
    keys = [agent.enn.sample_index(jax.random.key(i)) for i in range(3)]
    first = outputs(posterior, x, keys[0])
    assert first.shape == (7, 2) and first.dtype == jnp.float32 and np.all(np.isfinite(first))
    np.testing.assert_array_equal(outputs(posterior, x, keys[0]), first)
    for key in keys[1:]:
        assert np.abs(np.asarray(outputs(posterior, x, key)) - first).max() > 1e-3
    expected = _network(jax.jit(nng.sample_weights)(keys[0], posterior), x)
    np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs(posterior, x[:1], keys[0]), expected[:1], rtol=1e-5,
                               atol=1e-5)


def test_padding_changes_nothing(trained):
    """Trained on its pairs with rows of garbage (huge inputs, other labels, mask False)
    among them: the same posterior, to float32 rounding (T traced instead of folded)."""
    _, data, prior, train, posterior = trained
    rows = 2 * data.x.shape[0] + 3
    mask = np.zeros(rows, bool)
    mask[np.sort(np.random.default_rng(0).choice(rows, data.x.shape[0], replace=False))] = True
    garbage = np.random.default_rng(1)
    x = 1e3 * garbage.normal(size=(rows, 2)).astype(np.float32)
    y = garbage.integers(0, 2, size=rows).astype(np.int32)
    x[mask], y[mask] = data.x, data.y
    padded = train(jax.random.key(0), base.Data(jnp.asarray(x), jnp.asarray(y),
                                                jnp.asarray(mask)), prior)
    for got, want in zip(jax.tree.leaves(padded), jax.tree.leaves(posterior)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_beats_the_uniform_agent_on_a_classification_problem():
    """Temperature 0.1, T = 100: d_KL^1 on 200 test inputs (the same for both agents) is
    below the uniform agent's by more than 5 standard errors of their difference."""
    problem = next(p for p in PAPER.values()
                   if p.temperature == 0.1 and p.num_train == 100 and p.seed == 0)
    env, data = leaderboard.load_problem(problem)
    prior = leaderboard.prior_knowledge(problem)
    test = generative.sample_test_data(jax.random.key(2), env, 200, 1)
    config = nng.NNGConfig(hidden=(16,), num_steps=300, num_samples=4, learning_rate=0.03)

    def score(agent):
        state = jax.jit(agent.train)(jax.random.key(0), data, prior)
        evaluate = jax.jit(evaluation.make_evaluator(agent.enn, tau=1, num_classes=2,
                                                     num_test=200, num_samples=50))
        result = evaluate(jax.random.key(1), state, test)
        return float(result.kl), float(result.kl_stderr)

    kl, stderr = score(nng.make_nng_agent(config, SHAPES))
    uniform, uniform_stderr = score(trivial.make_uniform_agent(trivial.TrivialConfig(), SHAPES))
    assert kl + 5 * math.hypot(stderr, uniform_stderr) < uniform, (kl, stderr, uniform)


def test_sweep_is_wang_et_als_grid():
    sweep = nng.nng_sweep()
    assert len(sweep) == len(set(sweep)) == 6
    assert {(c.learning_rate, c.hidden) for c in sweep} == {
        (lr, h) for lr in (1e-3, 3e-3, 1e-2) for h in ((50,), (400,))}
    assert {(c.num_steps, c.batch_size, c.num_samples, c.damping, c.ema_decay)
            for c in sweep} == {(10_000, 100, 10, 1e-5, 0.999)}


@pytest.mark.parametrize(
    "field, value, message",
    [("learning_rate", 0.0, "learning_rate must be > 0, got 0.0"),
     ("prior_variance", -1.0, "prior_variance must be > 0, got -1.0"),
     ("kl_weight", 0.0, "kl_weight must be > 0, got 0.0"),
     ("damping", -1e-5, "damping must be >= 0, got -1e-05"),
     ("ema_decay", 1.0, r"ema_decay must be in \[0, 1\), got 1.0"),
     ("ema_decay", -0.1, r"ema_decay must be in \[0, 1\), got -0.1"),
     ("num_steps", 0, "num_steps must be >= 1, got 0"),
     ("batch_size", 0, "batch_size must be >= 1, got 0"),
     ("num_samples", 0, "num_samples must be >= 1, got 0"),
     ("hidden", (50, 0), "hidden must be zero or more widths >= 1"),
     ("num_samples", 2.5, "num_samples must be an integer, got 2.5")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        nng.NNGConfig(**{field: value})
    assert "\n" not in str(error.value)
