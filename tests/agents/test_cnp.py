"""The cnp agent: mean aggregation over its context, meta-training that sees only the prior,
learning from it, and its self-certainty falling with T (its contract is in
test_contract.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, gaussian_process, leaderboard
from neural_testbed.agents import cnp

# The contract test's regression problem and small config, so their programs compile once.
PROBLEM = leaderboard.get_sweep("regression-quick")["regression/60"]
SMALL = cnp.CNPConfig(num_steps=20, encoder=(16, 16), decoder=(16,))
SHAPES = base.Shapes.of(PROBLEM)


def _context(key, num, input_dim):
    x_key, y_key = jax.random.split(key)
    return base.Data(jax.random.normal(x_key, (num, input_dim)),
                     jax.random.normal(y_key, (num,)))


def test_the_context_is_averaged_over_pairs_whatever_their_order():
    """Mean aggregation: a permuted context, or every pair twice, gives the same prediction;
    changing one pair's target changes it; inputs are predicted independently."""
    params = cnp.init_cnp(jax.random.key(0), 3, SMALL)
    context = _context(jax.random.key(1), 8, 3)
    x = jax.random.normal(jax.random.key(2), (5, 3))
    predict = jax.jit(cnp.predict)
    mean, variance = predict(cnp.CNPState(params, context), x)
    order = jax.random.permutation(jax.random.key(3), 8)
    for other in (base.Data(context.x[order], context.y[order]),
                  base.Data(jnp.concatenate([context.x, context.x]),
                            jnp.concatenate([context.y, context.y]))):
        other_mean, other_variance = predict(cnp.CNPState(params, other), x)
        np.testing.assert_allclose(other_mean, mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(other_variance, variance, rtol=1e-5, atol=1e-6)
    changed = base.Data(context.x, context.y.at[0].add(3.0))
    assert np.max(np.abs(predict(cnp.CNPState(params, changed), x)[0] - mean)) > 1e-3
    alone_mean, alone_variance = predict(cnp.CNPState(params, context), x[:2])
    np.testing.assert_allclose(alone_mean, mean[:2], rtol=1e-5, atol=1e-6)
    assert np.all(variance > 0)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_meta_training_sees_the_key_the_prior_and_t_only():
    """Training on T pairs and on T other pairs under one key gives the same networks:
    other pairs condition the same CNP (so do more, while 2 T stays at most
    largest_context_at_least); another key meta-trains another."""
    data, prior, _ = PROBLEM.instance()
    train = jax.jit(cnp.make_cnp_agent(SMALL, SHAPES).train)
    state = train(jax.random.key(0), data, prior)
    num_train = PROBLEM.num_train
    other_pairs = train(jax.random.key(0), _context(jax.random.key(5), num_train,
                                                    PROBLEM.input_dim), prior)
    jax.tree.map(np.testing.assert_array_equal, state.params, other_pairs.params)
    assert not np.array_equal(other_pairs.context.x, state.context.x)
    np.testing.assert_array_equal(state.context.y, data.y)
    other = train(jax.random.key(1), data, prior)
    assert not np.allclose(other.params.decoder[-1]["w"], state.params.decoder[-1]["w"])


def test_a_belief_sample_is_an_independent_normal_draw_at_each_input():
    """4000 draws at 3 inputs: per input, mean and variance are predict's (4 standard errors:
    var / sqrt(M) for the mean, var sqrt(2 / M) for the variance); the correlation between
    inputs is 0 within 4 / sqrt(M)."""
    params = cnp.init_cnp(jax.random.key(0), 3, SMALL)
    state = cnp.CNPState(params, _context(jax.random.key(1), 8, 3))
    x = jax.random.normal(jax.random.key(2), (3, 3))
    enn = cnp.make_cnp_agent(SMALL, base.Shapes(3, 1)).enn
    num = 4000
    draws = jax.jit(jax.vmap(lambda key: enn.apply(state, x, enn.sample_index(key))))(
        jax.random.split(jax.random.key(4), num))[..., 0]
    mean, variance = cnp.predict(state, x)
    draws, mean, variance = (np.asarray(a, np.float64) for a in (draws, mean, variance))
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * np.sqrt(variance / num))
    assert np.all(np.abs(draws.var(0) - variance) < 4 * variance * np.sqrt(2 / num))
    correlation = np.corrcoef(draws.T)[np.triu_indices(3, k=1)]
    assert np.all(np.abs(correlation) < 4 / np.sqrt(num))


# The 1-d prior of regression-quick's T = 10 problems: contexts of 1 to 20 pairs.
PRIOR_1D = base.RegressionPriorKnowledge(input_dim=1, kernel="relu_nngp",
                                         noise_variance=jnp.float32(0.01))
NOISE = 0.01


def _meta_train(config):
    """The CNP meta-trained on PRIOR_1D from key 0, and the untrained networks it started from."""
    key = jax.random.key(0)
    empty = base.Data(jnp.zeros((10, 1)), jnp.zeros((10,)))
    state = jax.jit(cnp.make_cnp_agent(config, base.Shapes(1, 1)).train)(key, empty, PRIOR_1D)
    return state.params, cnp.init_cnp(jax.random.split(key)[0], 1, config)  # train's own start


def _held_out_functions(key, num_functions, num_points):
    """Functions from the 1-d prior (independently of the agent's sampler): x, noisy y."""
    x_key, f_key, noise_key = jax.random.split(key, 3)
    x = jax.random.normal(x_key, (num_functions, num_points, 1))

    def draw(x, key):
        cov = gaussian_process.prior_covariance("relu_nngp", x, x)
        return gaussian_process.joint_sample(key, jnp.zeros(num_points), cov)

    f = jax.jit(jax.vmap(draw))(x, jax.random.split(f_key, num_functions))
    return x, f + np.sqrt(NOISE) * jax.random.normal(noise_key, f.shape)


@functools.partial(jax.jit, static_argnums=3)
def _predict_all(params, x, y, num_context):
    """Mean and variance of f at every input of each function, given its first pairs."""
    return jax.vmap(lambda x, y: cnp.predict(
        cnp.CNPState(params, base.Data(x[:num_context], y[:num_context])), x))(x, y)


@pytest.fixture(scope="module")
def default_meta_trained():
    """The default CNP meta-trained on PRIOR_1D and its untrained start, for both tests
    below: 10000 steps, so compiled with XLA's optimisations on (running, not compiling)."""
    before = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        return _meta_train(cnp.CNPConfig())
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.mark.slow  # the default's meta-training
def test_meta_training_lowers_the_held_out_negative_log_likelihood(default_meta_trained):
    """On 300 held-out functions, 5 context pairs, 30 targets: the mean per-function NLL of
    the targets under the meta-trained CNP is below the untrained one's by more than 4
    standard errors of the paired differences (seeds fixed)."""
    params, untrained = default_meta_trained
    x, y = _held_out_functions(jax.random.key(11), 300, 35)

    def nll(params):
        mean, variance = _predict_all(params, x, y, 5)
        variance = variance + NOISE
        per_target = 0.5 * (jnp.log(2 * jnp.pi * variance) + (y - mean) ** 2 / variance)
        return np.asarray(per_target[:, 5:].mean(1), np.float64)

    differences = nll(untrained) - nll(params)
    stderr = differences.std(ddof=1) / np.sqrt(len(differences))
    assert differences.mean() > 4 * stderr, (differences.mean(), stderr)


@pytest.mark.slow  # the default's meta-training
def test_self_certainty_falls_as_the_context_grows(default_meta_trained):
    """The default CNP on the 1-d prior. Grover et al.'s self-certainty at the observed
    inputs, as a mean over them: (sqrt(var_f + noise) - sqrt(noise))^2, the predictive
    standard deviation of y against the noise's. Over 3000 held-out functions whose
    contexts are nested (their first 1, 3, 10 pairs: the T of the 1-d regression problems)
    it falls from each T to the next by more than 4 standard errors of the paired
    differences (seeds fixed). Not everywhere between: from 5 to 10 pairs it rises a little
    (by about 3.5 standard errors); after 4000 steps it was flat from 3 to 10."""
    params, _ = default_meta_trained
    x, y = _held_out_functions(jax.random.key(12), 3000, 10)
    certainty = {}
    for t in (1, 3, 10):
        _, variance = _predict_all(params, x, y, t)
        scores = (jnp.sqrt(variance[:, :t] + NOISE) - np.sqrt(NOISE)) ** 2
        certainty[t] = np.asarray(scores.mean(1), np.float64)
    for smaller, larger in ((1, 3), (3, 10)):
        differences = certainty[smaller] - certainty[larger]
        stderr = differences.std(ddof=1) / np.sqrt(len(differences))
        assert differences.mean() > 4 * stderr, (smaller, larger, differences.mean(), stderr)


def test_bad_configs_are_refused_with_the_value_and_what_is_allowed():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        cnp.CNPConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"encoder must be one or more widths >= 1, got \(\)"):
        cnp.CNPConfig(encoder=())
    with pytest.raises(ValueError, match="learning_rate must be > 0, got -1"):
        cnp.CNPConfig(learning_rate=-1)
    with pytest.raises(ValueError, match="num_steps must be an integer, got 2.5"):
        cnp.CNPConfig(num_steps=2.5)
    with pytest.raises(ValueError, match=r"largest_context_at_most must be >= "
                                         r"largest_context_at_least \(20\), got 10"):
        cnp.CNPConfig(largest_context_at_most=10)


def test_registered_for_regression_and_sized_by_its_largest_context():
    spec = agents.get_agent("cnp")
    assert spec.targets == ("regression",) and spec.default == cnp.CNPConfig()
    assert len(set(spec.sweep())) == len(spec.sweep()) == 4
    assert [cnp.max_context(cnp.CNPConfig(), t) for t in (1, 10, 30, 100, 1000)] == [
        20, 20, 60, 200, 200]
