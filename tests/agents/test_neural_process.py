"""The np and anp agents: a context summarised whatever its order and blind to padding,
meta-training that predicts held-out functions from the prior better than the prior's
mean, belief samples that are the latent mixture (correlated across inputs, unlike
cnp's), and their configs' one-line refusals (their contract is in test_contract.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, gaussian_process
from neural_testbed.agents import cnp
from neural_testbed.agents import neural_process as npr

# Small networks, so that each program compiles in seconds; 150 steps of meta-training
# are enough to beat the prior's mean by over 10 standard errors (the test below).
CONFIGS = {
    "np": npr.NPConfig(num_steps=150, encoder=(16, 16), latent_encoder=(16, 16), latent_dim=8,
                       decoder=(16, 16)),
    "anp": npr.ANPConfig(num_steps=150, encoder=(16, 16), latent_encoder=(16, 16),
                         latent_dim=8, decoder=(16, 16), query_encoder=(16,), num_heads=4),
}
MAKE = {"np": npr.make_np_agent, "anp": npr.make_anp_agent}
PATH = {"np": npr.init_mean_path, "anp": npr.init_attention_path}

# The 1-d prior of regression-quick's T = 10 problems: contexts of 1 to 20 pairs.
NOISE = 0.01
PRIOR_1D = base.RegressionPriorKnowledge(input_dim=1, kernel="relu_nngp",
                                         noise_variance=jnp.float32(NOISE))


def _context(key, num, input_dim):
    x_key, y_key = jax.random.split(key)
    return base.Data(jax.random.normal(x_key, (num, input_dim)),
                     jax.random.normal(y_key, (num,)))


@jax.jit
def _summaries(params, context, x, z):
    """The latent's mean and std and f's mean and variance at ``x`` given ``z``."""
    state = npr.NPState(params, context)
    return npr.latent_distribution(state), npr.predict(state, x, z)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_context_is_summarised_whatever_its_order_and_inputs_apart(name):
    """A permuted context gives the same latent and predictions (np also the same with
    every pair twice: it averages); changing one pair's target changes them; given z,
    each input is predicted as it is alone."""
    config = CONFIGS[name]
    params = npr.init_np(jax.random.key(0), 3, config, PATH[name])
    context = _context(jax.random.key(1), 8, 3)
    x = jax.random.normal(jax.random.key(2), (5, 3))
    z = jax.random.normal(jax.random.key(3), (config.latent_dim,))
    (mu, std), (mean, variance) = _summaries(params, context, x, z)
    order = jax.random.permutation(jax.random.key(4), 8)
    others = [base.Data(context.x[order], context.y[order])]
    if name == "np":
        others.append(base.Data(jnp.concatenate([context.x, context.x]),
                                jnp.concatenate([context.y, context.y])))
    for other in others:
        got = _summaries(params, other, x, z)
        for a, b in zip(jax.tree.leaves(got), (mu, std, mean, variance)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    changed = base.Data(context.x, context.y.at[0].add(3.0))
    (changed_mu, _), (changed_mean, _) = _summaries(params, changed, x, z)
    assert np.max(np.abs(changed_mu - mu)) > 1e-3 and np.max(np.abs(changed_mean - mean)) > 1e-3
    _, (alone_mean, alone_variance) = _summaries(params, context, x[:2], z)
    np.testing.assert_allclose(alone_mean, mean[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alone_variance, variance[:2], rtol=1e-5, atol=1e-6)
    assert np.all(variance > 0) and np.all((std >= 0.1) & (std <= 1.0))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_pairs_of_weight_zero_are_padding_that_neither_path_sees(name):
    """Meta-training marks each function's context by weights; pairs of weight 0 (here
    huge garbage) change neither the latent nor the deterministic path (anp's attention
    gives them no weight)."""
    config = CONFIGS[name]
    params = npr.init_np(jax.random.key(0), 2, config, PATH[name])
    context = _context(jax.random.key(1), 6, 2)
    garbage = jax.tree.map(lambda a: 1e3 * a, _context(jax.random.key(2), 4, 2))
    padded = base.Data(jnp.concatenate([garbage.x[:2], context.x, garbage.x[2:]]),
                       jnp.concatenate([garbage.y[:2], context.y, garbage.y[2:]]))
    weights = jnp.concatenate([jnp.zeros(2), jnp.ones(6), jnp.zeros(2)])
    x = jax.random.normal(jax.random.key(3), (4, 2))
    z = jax.random.normal(jax.random.key(4), (config.latent_dim,))

    @jax.jit
    def both(context_x, context_y, weights):
        return (npr._latent(params, context_x, context_y, weights),
                npr._decode(params, context_x, context_y, weights, x, z))

    expected = both(context.x, context.y, jnp.ones(6))
    got = both(padded.x, padded.y, weights)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@functools.cache
def _meta_trained(name):
    """The agent meta-trained on PRIOR_1D from key 0 (T = 10: contexts of 1 to 20 pairs)."""
    agent = MAKE[name](CONFIGS[name], base.Shapes(1, 1))
    empty = base.Data(jnp.zeros((10, 1)), jnp.zeros((10,)))
    return agent, jax.jit(agent.train)(jax.random.key(0), empty, PRIOR_1D).params


@functools.cache  # both agents' test: drawn once
def _held_out_functions(seed, num_functions, num_points):
    """Functions from the 1-d prior, drawn apart from the agents' own sampler: x, f and
    noisy y."""
    x_key, f_key, noise_key = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(x_key, (num_functions, num_points, 1))

    def draw(x, key):
        cov = gaussian_process.prior_covariance("relu_nngp", x, x)
        return gaussian_process.joint_sample(key, jnp.zeros(num_points), cov)

    f = jax.jit(jax.vmap(draw))(x, jax.random.split(f_key, num_functions))
    return x, f, f + np.sqrt(NOISE) * jax.random.normal(noise_key, f.shape)


@functools.partial(jax.jit, static_argnums=4)
def _predictive_means(params, key, x, y, num_context):
    """The predictive mean of f at each function's inputs beyond its first ``num_context``
    pairs (its context): the decoder's mean averaged over 64 draws of the latent."""
    def one(x, y):
        state = npr.NPState(params, base.Data(x[:num_context], y[:num_context]))
        mu, std = npr.latent_distribution(state)
        z = mu + std * jax.random.normal(key, (64, mu.size))
        return jax.vmap(lambda z: npr.predict(state, x[num_context:], z)[0])(z).mean(0)
    return jax.vmap(one)(x, y)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_meta_training_predicts_held_out_functions_better_than_the_prior_mean(name):
    """On 300 held-out functions of the 1-d prior, 5 context pairs, 30 targets: the mean
    squared error of the predictive mean against f is below the trivial predictor's (the
    prior's mean, 0: its error is f^2) by more than 4 standard errors of the paired
    per-function differences (seeds fixed; measured: 0.44 and 0.26 against 1.0, by 11 and
    13 standard errors)."""
    _, params = _meta_trained(name)
    x, f, y = _held_out_functions(11, 300, 35)
    mean = _predictive_means(params, jax.random.key(12), x, y, 5)
    error = np.asarray(jnp.mean((f[:, 5:] - mean) ** 2, axis=1), np.float64)
    trivial = np.asarray(jnp.mean(f[:, 5:] ** 2, axis=1), np.float64)
    differences = trivial - error
    stderr = differences.std(ddof=1) / np.sqrt(len(differences))
    assert differences.mean() > 4 * stderr, (error.mean(), trivial.mean(), stderr)


def _draws(enn, state, x, num):
    draw = jax.jit(jax.vmap(lambda key: enn.apply(state, x, enn.sample_index(key))[:, 0]))
    return np.asarray(draw(jax.random.split(jax.random.key(5), num)), np.float64)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_belief_samples_are_the_latent_mixture_correlated_across_inputs(name):
    """The meta-trained agent given 2 pairs; 20000 belief samples at 3 inputs, and the law
    of total covariance from 20000 other latent draws: Cov_z(mean) + diag(E_z variance).
    The draws' means, variances and correlations match it (4 standard errors of the
    difference of two estimates from 20000 draws: for a mean sqrt(2 var / M), a variance
    var sqrt(2) sqrt(2 / M), a correlation at most sqrt(2 / M)); their correlation is
    above 0 by more than 4 / sqrt(M), where a CNP's draws (the same context and inputs)
    are uncorrelated within 4 / sqrt(M)."""
    agent, params = _meta_trained(name)
    context = base.Data(jnp.array([[-1.0], [0.5]]), jnp.array([0.3, -0.2]))
    x = jnp.array([[-0.5], [0.0], [2.0]])
    state = npr.NPState(params, context)
    num = 20000
    draws = _draws(agent.enn, state, x, num)

    @jax.jit
    def mixture(key):
        mu, std = npr.latent_distribution(state)
        z = mu + std * jax.random.normal(key, (num, mu.size))
        return jax.vmap(lambda z: npr.predict(state, x, z))(z)

    means, variances = (np.asarray(a, np.float64) for a in mixture(jax.random.key(6)))
    cov = np.cov(means.T) + np.diag(variances.mean(0))
    var = np.diag(cov)
    assert np.all(np.abs(draws.mean(0) - means.mean(0)) < 4 * np.sqrt(2 * var / num))
    assert np.all(np.abs(draws.var(0) - var) < 4 * var * np.sqrt(2) * np.sqrt(2 / num))
    upper = np.triu_indices(3, k=1)
    correlation = np.corrcoef(draws.T)[upper]
    expected = (cov / np.sqrt(np.outer(var, var)))[upper]
    assert np.all(np.abs(correlation - expected) < 4 * np.sqrt(2 / num)), (correlation, expected)
    assert correlation[0] > 4 / np.sqrt(num), correlation  # the two nearby inputs

    cnp_config = cnp.CNPConfig(num_steps=1, encoder=(16, 16), decoder=(16, 16))
    cnp_state = cnp.CNPState(cnp.init_cnp(jax.random.key(0), 1, cnp_config), context)
    cnp_draws = _draws(cnp.make_cnp_agent(cnp_config, base.Shapes(1, 1)).enn, cnp_state, x, num)
    assert np.all(np.abs(np.corrcoef(cnp_draws.T)[upper]) < 4 / np.sqrt(num))


def test_bad_configs_are_refused_in_one_line_with_the_value_and_what_is_allowed():
    cases = [
        (lambda: npr.NPConfig(latent_dim=0), "latent_dim must be >= 1, got 0"),
        (lambda: npr.NPConfig(latent_encoder=()),
         r"latent_encoder must be one or more widths >= 1, got \(\)"),
        (lambda: npr.NPConfig(batch_size=0), "batch_size must be >= 1, got 0"),
        (lambda: npr.NPConfig(learning_rate=0.0), "learning_rate must be > 0, got 0.0"),
        (lambda: npr.NPConfig(num_steps=2.5), "num_steps must be an integer, got 2.5"),
        (lambda: npr.NPConfig(largest_context_at_most=10),
         r"largest_context_at_most must be >= largest_context_at_least \(20\), got 10"),
        (lambda: npr.ANPConfig(num_heads=3),
         r"num_heads must be >= 1 and divide encoder\[-1\] \(64\), got 3"),
        (lambda: npr.ANPConfig(num_heads=0), "num_heads must be >= 1"),
        (lambda: npr.ANPConfig(query_encoder=(8, 0)),
         r"query_encoder must be one or more widths >= 1, got \(8, 0\)"),
        (lambda: npr.ANPConfig(decoder=(16.5,)), r"decoder must be a tuple of integers"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            make()
        assert "\n" not in str(error.value)
    with pytest.raises(TypeError, match="anp needs an ANPConfig, got NPConfig"):
        npr.make_anp_agent(npr.NPConfig(), base.Shapes(1, 1))


def test_registered_for_regression_with_sweeps_of_four_and_the_defaults():
    for name, config_type in (("np", npr.NPConfig), ("anp", npr.ANPConfig)):
        spec = agents.get_agent(name)
        assert spec.targets == ("regression",) and spec.default == config_type()
        sweep = spec.sweep()
        assert len(set(sweep)) == len(sweep) == 4 and spec.default in sweep, name
        assert all(type(c) is config_type for c in sweep), name
    assert npr.ANPConfig().num_heads == 8 and npr.NPConfig().num_steps == cnp.CNPConfig().num_steps
