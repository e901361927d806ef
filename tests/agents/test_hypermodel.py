"""The hypermodel agent: index, fixed prior, bootstrap, learning, configs and sweep."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, leaderboard, networks
from neural_testbed.agents import hypermodel

PAPER = leaderboard.get_sweep("paper")
# temperature 0.01 (labels almost noiseless), T = 10, seed 1
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.01 and p.num_train == 10 and p.seed == 1)
SMALL = hypermodel.HypermodelConfig(num_steps=300, num_index_samples=8)


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = hypermodel.make_hypermodel_agent(SMALL)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def _indices(agent, seed, n):
    return jax.vmap(agent.enn.sample_index)(jax.random.split(jax.random.key(seed), n))


def test_same_seed_same_networks_and_different_indices_differ(trained):
    agent, data, prior, state, train = trained
    again = train(jax.random.key(0), data, prior)
    x = jax.random.normal(jax.random.key(2), (50, 2))
    zs = _indices(agent, 3, 4)
    logits = [np.asarray(agent.enn.apply(state, x, z)) for z in zs]
    for i, z in enumerate(zs):
        np.testing.assert_array_equal(logits[i], agent.enn.apply(again, x, z))
        for j in range(i):
            assert np.abs(logits[i] - logits[j]).max() > 1e-2, (i, j)


def test_index_is_gaussian_with_unit_expected_squared_norm():
    agent = hypermodel.make_hypermodel_agent(SMALL)
    n, k = 4000, SMALL.index_dim
    zs = np.asarray(_indices(agent, 4, n))
    assert zs.shape == (n, k) and zs.dtype == np.float32
    # Each coordinate is N(0, 1/k): its sample mean has standard error
    # sqrt(1/(k n)) and its sample variance sqrt(2/n) / k.
    assert np.all(np.abs(zs.mean(axis=0)) < 4 * np.sqrt(1 / (k * n)))
    assert np.all(np.abs(zs.var(axis=0) - 1 / k) < 4 * np.sqrt(2 / n) / k)


def test_initial_networks_are_init_mlp_draws_mixed_by_the_index():
    key, k = jax.random.key(5), 3
    hyper = hypermodel.init_linear_hypermodel(key, 2, (50, 50, 2), k, first_bias_stddev=0.5)
    for j, column_key in enumerate(jax.random.split(key, k)):
        column = networks.init_mlp(column_key, 2, (50, 50, 2), 0.5)
        for a, leaf in zip(jax.tree.leaves(hyper.a), jax.tree.leaves(column)):
            np.testing.assert_allclose(a[..., j], leaf, rtol=1e-6, atol=1e-7)
    assert all(not np.any(b) for b in jax.tree.leaves(hyper.b))
    z = jnp.array([0.5, -1.0, 2.0])
    generated = hypermodel.generate_params(hyper, z)
    np.testing.assert_allclose(generated[1]["w"], hyper.a[1]["w"] @ z, rtol=1e-6)


def test_prior_is_fixed_and_added_with_its_scale(trained):
    agent, data, prior, state, _ = trained
    # Bit-identical after 1 and after 300 steps (Adam would move a trained leaf
    # by about the learning rate at every step), while the trained part moves.
    one_step = hypermodel.make_hypermodel_agent(dataclasses.replace(SMALL, num_steps=1))
    early = jax.jit(one_step.train)(jax.random.key(0), data, prior)
    for a, b in zip(jax.tree.leaves(early.prior_params), jax.tree.leaves(state.prior_params)):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(jax.tree.leaves(early.params)[0], jax.tree.leaves(state.params)[0],
                           atol=1e-3)
    assert [leaf["w"].shape for leaf in state.prior_params.a] == [(2, 10, 5), (10, 2, 5)]
    np.testing.assert_allclose(state.prior_scale, 1 / np.sqrt(PROBLEM.temperature), rtol=1e-6)
    x = jax.random.normal(jax.random.key(6), (9, 2))
    z = agent.enn.sample_index(jax.random.key(7))
    expected = (
        networks.apply_mlp(hypermodel.generate_params(state.params, z), x)
        + state.prior_scale
        * networks.apply_mlp(hypermodel.generate_params(state.prior_params, z), x))
    np.testing.assert_allclose(agent.enn.apply(state, x, z), expected, rtol=1e-5, atol=1e-4)


def test_fits_low_noise_training_data(trained):
    agent, data, _, state, _ = trained
    zs = _indices(agent, 8, 100)
    probs = jax.vmap(lambda z: jax.nn.softmax(agent.enn.apply(state, data.x, z)))(zs).mean(0)
    assert np.mean(np.argmax(probs, axis=-1) == np.asarray(data.y)) >= 0.9


@pytest.mark.parametrize("bootstrap", ["exponential", "bernoulli"])
@pytest.mark.parametrize("index_dim", [1, 5])
def test_bootstrap_weights_have_the_stated_distribution(bootstrap, index_dim):
    """For each training point, its weights over i.i.d. indices are i.i.d. draws."""
    n, num_train = 4000, 30
    weight_fn = hypermodel.bootstrap_weight_fn(jax.random.key(9), bootstrap, num_train, index_dim)
    zs = jax.vmap(lambda key: hypermodel.sample_index(key, index_dim))(
        jax.random.split(jax.random.key(10), n))
    ids = jnp.arange(num_train)
    weights = np.asarray(jax.vmap(weight_fn, in_axes=(0, None))(zs, ids))  # [index, point]
    assert weights.shape == (n, num_train) and weights.dtype == np.float32
    # Exp(1) and 2 * Bernoulli(1/2) have mean 1 and variance 1: each point's mean
    # over n indices is within 4 standard errors (1 / sqrt(n)) of 1.
    assert np.all(np.abs(weights.mean(axis=0) - 1) < 4 / np.sqrt(n))
    if bootstrap == "exponential":
        assert weights.min() > 0
        # Var of the sample variance of Exp(1) is (mu_4 - sigma^4) / n = 8 / n.
        assert np.all(np.abs(weights.var(axis=0) - 1) < 4 * np.sqrt(8 / n))
    else:
        assert set(np.unique(weights)) == {0.0, 2.0}
    # A function of the index: the same index gives the same weights.
    np.testing.assert_array_equal(weight_fn(zs[0], ids), weights[0])
    # Different across indices and across points.
    assert not np.array_equal(weights[0], weights[1])
    assert not np.array_equal(weights[:, 0], weights[:, 1])


def test_no_bootstrap_is_all_ones_and_unknown_is_rejected():
    weight_fn = hypermodel.bootstrap_weight_fn(jax.random.key(0), "none", 5, 3)
    np.testing.assert_array_equal(weight_fn(jnp.ones(3), jnp.arange(5)), np.ones(5))
    with pytest.raises(ValueError, match="bootstrap must be one of"):
        hypermodel.bootstrap_weight_fn(jax.random.key(0), "poisson", 5, 3)


def test_runs_on_a_sweep_through_the_runner():
    """vmap over problems of different temperatures; M sampled Gaussian indices."""
    problems = [dataclasses.replace(p, taus=(1,), num_test=20, num_samples=50)
                for p in PAPER.values() if p.num_train == 3 and p.seed == 0]
    agent = hypermodel.make_hypermodel_agent(
        dataclasses.replace(SMALL, num_steps=20, bootstrap="bernoulli"))
    rows = leaderboard.run_agent(agent, problems, "hypermodel", progress=False)
    assert len(rows) == len(problems) == 3
    assert all(r.status == "ok" and np.isfinite(r.kl) for r in rows), rows


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("hypermodel")
    assert spec.default == hypermodel.HypermodelConfig()
    config = agents.parse_overrides(
        spec, ["index_dim=7", "prior_hidden=10,10", "temperature_scaling=linear",
               "bootstrap=exponential"])
    assert config == hypermodel.HypermodelConfig(
        index_dim=7, prior_hidden=(10, 10), temperature_scaling="linear", bootstrap="exponential")


def test_defaults_are_the_papers():
    config = hypermodel.HypermodelConfig()
    assert (config.index_dim, config.num_index_samples, config.prior_scale, config.prior_hidden,
            config.bootstrap, config.l2_weight_decay, config.adaptive_weight_scale,
            config.num_steps, config.hidden) == (
        5, 128, 1.0, (10,), "none", 1.0, True, 2000, (50, 50))


def test_sweep_is_the_papers_grid():
    sweep = hypermodel.hypermodel_sweep()
    assert len(sweep) == len(set(sweep)) == 19
    assert {c.index_dim for c in sweep} == {1, 3, 5, 7}
    assert {c.l2_weight_decay for c in sweep} == {0.1, 0.3, 1.0, 2.0, 3.0, 10.0}
    assert {c.bootstrap for c in sweep} == {"none", "bernoulli", "exponential"}
    default = hypermodel.HypermodelConfig()
    prior_grid = {(c.prior_scale, c.prior_hidden, c.l2_weight_decay, c.temperature_scaling)
                  for c in sweep if c.l2_weight_decay in (1.0, 2.0) and c.index_dim == 5
                  and c.bootstrap == "none"}
    assert prior_grid == {
        (1.0, hidden, lam, scaling) for hidden in ((10,), (10, 10)) for lam in (1.0, 2.0)
        for scaling in ("linear", "sqrt")
    } | {(0.0, default.prior_hidden, lam, default.temperature_scaling) for lam in (1.0, 2.0)}


@pytest.mark.parametrize(
    "field, value, message",
    [("index_dim", 0, "index_dim must be an integer >= 1, got 0"),
     ("num_index_samples", 0, "num_index_samples must be an integer >= 1, got 0"),
     ("prior_scale", -1.0, "prior_scale must be a finite number >= 0, got -1.0"),
     ("bootstrap", "poisson", "bootstrap must be one of 'none', 'exponential', 'bernoulli'"),
     ("temperature_scaling", "lin", "temperature_scaling must be one of 'sqrt', 'linear'"),
     ("prior_hidden", (10, 0), "prior_hidden widths must be >= 1"),
     ("l2_weight_decay", -1.0, "l2_weight_decay must be >= 0")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        hypermodel.HypermodelConfig(**{field: value})
