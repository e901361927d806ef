"""Grover et al.'s probes: the arithmetic on hand-made cases, and the exact GP posterior's
known behaviour (self-certainty falls with T, its MSE is its mean posterior variance,
uncertainty grows with the distance to the data, inclusion matches what the posterior
expects, uncertainty-reduction equals conditioning on the added pairs in closed form)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from neural_testbed import base, gaussian_process
from neural_testbed.agents import oracle_gp
from neural_testbed.diagnostics import probes
from neural_testbed.generative import gp_regression
from neural_testbed.leaderboard import probing

NOISE = 0.1  # a large noise, so that s and the posterior's spread of f differ clearly

# The probes under test, each compiled as one program (not op by op).
_belief_samples = jax.jit(probes.belief_samples, static_argnums=(1, 4))
_moments = jax.jit(probes.moments)
_self_certainty = jax.jit(probes.self_certainty)
_inclusion = jax.jit(probes.inclusion, static_argnums=3)
_mean_squared_error = jax.jit(probes.mean_squared_error)
_uncertainty_increase = jax.jit(probes.uncertainty_increase, static_argnums=3)
_uncertainty_reduction = jax.jit(probes.uncertainty_reduction)
_nearest_training_input = jax.jit(probes.nearest_training_input)


def _problem(num_train, seed, input_dim=2):
    return gp_regression.GPRegressionProblem(
        "regression/test", input_dim=input_dim, num_train=num_train, seed=seed,
        noise_variance=NOISE, num_pool=200, num_probes=2)


@jax.jit
def _exact_probes_of(instance):
    """The probes of the exact posterior, from its mean and variances (no sampling)."""
    data, prior, env = instance
    posterior = gaussian_process.condition("relu_nngp", data, prior.noise_variance)
    mean, cov = gaussian_process.posterior_at("relu_nngp", posterior, env.pool_x)
    _, train_cov = gaussian_process.posterior_at("relu_nngp", posterior, data.x)
    variance = jnp.diag(cov)
    std = probes.predictive_std(variance, NOISE)
    train_std = probes.predictive_std(jnp.diag(train_cov), NOISE)
    distance, nearest = probes.nearest_training_input(data.x, env.pool_x)
    return dict(pool_f=env.pool_f, mean=mean, variance=variance, std=std, distance=distance,
                self_certainty=probes.self_certainty(train_std, NOISE),
                increase=probes.uncertainty_increase(distance, std, train_std[nearest], 5))


@functools.cache
def _exact_probes(num_train, seed):
    return jax.device_get(_exact_probes_of(_problem(num_train, seed).instance()))


def _mean_and_se(values):
    values = np.asarray(values, dtype=float)
    return values.mean(axis=0), values.std(axis=0, ddof=1) / np.sqrt(len(values))


def test_belief_samples_see_every_input_and_weigh_members_by_their_draws():
    # 300 inputs: two calls of at most 256, the second padded.
    x = np.arange(300.0, dtype=np.float32)[:, None]
    members = base.ENN(lambda state, x, index: x * (index + 1.0),
                       lambda key: jax.random.randint(key, (), 0, 3), num_indices=3)
    key = jax.random.key(0)

    def indices(enn, num):  # the indices belief_samples draws from key
        return jax.jit(lambda key: jax.vmap(enn.sample_index)(jax.random.split(key, num)))(key)

    belief = _belief_samples(key, members, None, x, 1000)
    np.testing.assert_array_equal(belief.values, np.arange(1, 4)[:, None] * np.arange(300.0))
    drawn = indices(members, 1000)
    np.testing.assert_allclose(belief.weights, np.bincount(drawn, minlength=3) / 1000)
    mean, variance = _moments(belief)
    w = np.asarray(belief.weights)
    expected_mean = (w @ np.arange(1, 4)) * np.arange(300.0)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-5)
    np.testing.assert_allclose(variance, (w @ np.arange(1, 4) ** 2 - (w @ np.arange(1, 4)) ** 2)
                               * np.arange(300.0) ** 2, rtol=1e-3, atol=1e-3)
    continuous = base.ENN(lambda state, x, index: x + index, lambda key: jax.random.normal(key))
    # Not jitted whole: there XLA computes one of these normal draws one ulp off the
    # stand-alone draw, which near 0 is above this rtol.
    belief = probes.belief_samples(key, continuous, None, x[:5], 7)
    index = np.asarray(indices(continuous, 7))
    np.testing.assert_allclose(belief.values, index[:, None] + np.arange(5.0, dtype=np.float32),
                               rtol=1e-6)  # x + index in float32, as the ENN adds them
    np.testing.assert_allclose(belief.weights, np.full(7, 1 / 7))


def test_the_probes_arithmetic_on_hand_made_cases():
    sigma = np.sqrt(NOISE)
    assert float(_self_certainty(np.full(4, sigma, np.float32), NOISE)) == 0.0
    np.testing.assert_allclose(_self_certainty(np.array([sigma, 3 * sigma], np.float32), NOISE),
                               2 * NOISE, rtol=1e-6)  # mean of 0 and (2 sigma)^2
    f, std = np.zeros(4, np.float32), np.ones(4, np.float32)
    mean = np.array([0.5, 1.5, 2.5, -3.5], np.float32)
    np.testing.assert_allclose(_inclusion(f, mean, std, (1.0, 2.0, 3.0, 4.0)),
                               [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(_mean_squared_error(f, mean),  # (0.25 + 2.25 + 6.25 + 12.25) / 4
                               5.25, rtol=1e-6)
    np.testing.assert_allclose(_uncertainty_reduction(np.array([2.0, 1.0], np.float32),
                                                      np.array([1.0, 1.5], np.float32)),
                               [0.75, 0.25])
    # Ten inputs at distances 1..10 (shuffled) in two bins: delta = 3 and 8.
    distance = np.array([7.0, 2.0, 9.0, 1.0, 5.0, 10.0, 3.0, 4.0, 8.0, 6.0], np.float32)
    increased = distance % 2 == 1  # odd distances: s above s at the nearest training input
    std = np.where(increased, 2.0, 1.0).astype(np.float32)
    delta, ui = _uncertainty_increase(distance, std, np.full(10, 1.5, np.float32), 2)
    np.testing.assert_allclose(delta, [3.0, 8.0])
    np.testing.assert_allclose(ui, [0.6, 0.4])  # {1, 3, 5} of 1..5, {7, 9} of 6..10
    with pytest.raises(ValueError, match="num_bins must be an integer from 1 to"):
        _uncertainty_increase(distance, std, std, 11)
    x = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]], np.float32)
    distance, nearest = _nearest_training_input(np.array([[0.0, 0.0], [3.0, 0.0]], np.float32),
                                                x)
    np.testing.assert_allclose(distance, [0.0, 4.0, 1.0])
    np.testing.assert_array_equal(nearest, [0, 1, 0])


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_exact_posteriors_self_certainty_falls_as_t_grows():
    # Ten independent problems per T: the means' difference against 4 standard errors
    # of that difference (the problems are independent draws).
    by_t = {t: [float(_exact_probes(t, seed)["self_certainty"]) for seed in range(10)]
            for t in (2, 8, 32)}
    for smaller, larger in ((2, 8), (8, 32)):
        (a, se_a), (b, se_b) = _mean_and_se(by_t[smaller]), _mean_and_se(by_t[larger])
        assert a - b > 4 * np.hypot(se_a, se_b), (smaller, a, se_a, larger, b, se_b)


@pytest.fixture(scope="module")
def thirty_problems():
    return [_exact_probes(10, seed) for seed in range(30)]


def test_the_exact_posteriors_uncertainty_grows_with_the_distance_to_the_data(thirty_problems):
    # d = 2, T = 10, 30 independent problems, 5 equal-count bins of 40 pool inputs. Near
    # the data s is about s at the nearest training input (UI near 1/2); far from it, s is
    # larger almost everywhere. Bounds: 4 standard errors over the problems.
    ui_mean, ui_se = _mean_and_se([p["increase"][1] for p in thirty_problems])
    assert ui_mean[-1] - 0.5 > 4 * ui_se[-1], (ui_mean, ui_se)
    differences = [p["increase"][1][-1] - p["increase"][1][0] for p in thirty_problems]
    mean, se = _mean_and_se(differences)
    assert mean > 4 * se, (mean, se)
    # The mean predictive variance rises from each bin to the next.
    by_bin = []
    for p in thirty_problems:
        rank = np.argsort(np.argsort(np.asarray(p["distance"])))
        by_bin.append([np.mean(np.asarray(p["std"])[rank * 5 // 200 == b] ** 2)
                       for b in range(5)])
    steps_mean, steps_se = _mean_and_se(np.diff(by_bin, axis=1))
    assert np.all(steps_mean > 4 * steps_se), (steps_mean, steps_se)
    deltas = np.mean([p["increase"][0] for p in thirty_problems], axis=0)
    assert np.all(np.diff(deltas) > 0)


def test_the_exact_posteriors_mse_is_its_mean_posterior_variance(thirty_problems):
    # Given the data, f at a pool input is N(mean, v) under the exact posterior, so the
    # expected (f - mean)^2 is v: over 30 independent problems the mean of MSE - mean(v)
    # is 0 within 4 standard errors, while the prior mean's error, mean f^2, is larger by
    # more than 4 (d = 2, T = 10).
    mse = [float(_mean_squared_error(p["pool_f"], p["mean"])) for p in thirty_problems]
    variance = [float(np.mean(p["variance"])) for p in thirty_problems]
    mean, se = _mean_and_se(np.array(mse) - np.array(variance))
    assert abs(mean) < 4 * se, (mean, se)
    trivial = [float(np.mean(np.asarray(p["pool_f"]) ** 2)) for p in thirty_problems]
    mean, se = _mean_and_se(np.array(trivial) - np.array(mse))
    assert mean > 4 * se, (mean, se)


def test_the_exact_posteriors_inclusion_is_what_it_expects(thirty_problems):
    # Given the data, f at a pool input is N(mean, v) under the exact posterior, so
    # P(|f - mean| < k s) = 2 Phi(k s / sqrt(v)) - 1, above the nominal 2 Phi(k) - 1
    # because s includes the noise. Over 30 independent problems the measured inclusion
    # matches the former within 4 standard errors, and exceeds the latter by more.
    ks = (1.0, 2.0)
    measured, expected = [], []
    for p in thirty_problems:
        measured.append(_inclusion(p["pool_f"], p["mean"], p["std"], ks))
        ratio = np.asarray(p["std"]) / np.sqrt(np.asarray(p["variance"]))
        expected.append(np.mean(2 * norm.cdf(np.array(ks)[:, None] * ratio) - 1, axis=1))
    mean, se = _mean_and_se(np.array(measured) - np.array(expected))
    assert np.all(np.abs(mean) < 4 * se), (mean, se)
    mean, se = _mean_and_se(np.array(measured) - (2 * norm.cdf(ks) - 1))
    assert mean[0] > 4 * se[0], (mean, se)


@functools.partial(jax.jit, static_argnames="k")
def _retrained_and_closed_form(instance, added, k):
    """The exact posterior's variance of f at the pool: given D, given D and the first k
    added pairs (the oracle trained again), and the latter in closed form from the former."""
    data, prior, env = instance
    agent = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(),
                                           base.Shapes(prior.input_dim, 1))
    state = agent.train(jax.random.key(0), data, prior)
    before = jnp.diag(oracle_gp.posterior(state, env.pool_x)[1])
    more = base.Data(jnp.concatenate([data.x, added.x[:k]]),
                     jnp.concatenate([data.y, added.y[:k]]))
    retrained = agent.train(jax.random.key(0), more, prior)
    after = jnp.diag(oracle_gp.posterior(retrained, env.pool_x)[1])
    # Closed form: the posterior given D, conditioned on the k noisy pairs.
    num_pool = env.pool_x.shape[0]
    _, cov = oracle_gp.posterior(state, jnp.concatenate([env.pool_x, added.x[:k]]))
    cross, added_cov = cov[:num_pool, num_pool:], cov[num_pool:, num_pool:] + NOISE * jnp.eye(k)
    closed = before - jnp.sum(cross * jnp.linalg.solve(added_cov, cross.T).T, axis=1)
    return before, after, closed


@jax.jit
def _reductions(before, after, closed):
    """Uncertainty-reduction from ``before`` to ``after`` (retrained) and to ``closed``."""
    std = probes.predictive_std(before, NOISE)
    return (probes.uncertainty_reduction(std, probes.predictive_std(after, NOISE)),
            probes.uncertainty_reduction(std, probes.predictive_std(closed, NOISE)))


def test_retraining_the_exact_posterior_on_k_more_pairs_is_conditioning_on_them():
    instance = _problem(10, 0).instance()
    added = jax.jit(probing.added_data, static_argnums=2)(jax.random.key(5), instance.env, 10)
    assert len(set(map(tuple, np.asarray(added.x)))) == 10  # distinct pool inputs
    for k in (1, 5, 10):
        before, after, closed = _retrained_and_closed_form(instance, added, k)
        # float32: the two routes factorise different matrices (condition numbers up to
        # about 1e3), so they agree to about 1e-4 of the prior variance, not bit for bit.
        np.testing.assert_allclose(after, closed, atol=3e-4)
        reduction, exact = _reductions(before, after, closed)
        np.testing.assert_allclose(reduction, exact, rtol=1e-3)
        assert float(reduction[1]) == pytest.approx(float(reduction[0]), rel=1e-3)  # never rises
        assert float(reduction[0]) > 0
