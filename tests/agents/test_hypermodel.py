"""The hypermodel agent: index, fixed prior, bootstrap, learning, configs and sweep."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from neural_testbed import agents, base, leaderboard, networks
from neural_testbed.agents import hypermodel

PAPER = leaderboard.get_sweep("paper")
# temperature 0.01 (labels almost noiseless), T = 10, seed 1
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.01 and p.num_train == 10 and p.seed == 1)
SMALL = hypermodel.HypermodelConfig(num_steps=300, num_index_samples=8)
SHAPES = base.Shapes.of(PROBLEM)  # d = 2, K = 2, as the toy problem below

# Jitted once here: called eagerly, every primitive compiles on its own.
_init_linear_hypermodel = jax.jit(hypermodel.init_linear_hypermodel, static_argnums=(1, 2, 3))
_init_prior_hypermodel = jax.jit(hypermodel.init_prior_hypermodel, static_argnums=(1, 2, 3))
_generate_params = jax.jit(hypermodel.generate_params)
_generate_batched = jax.jit(jax.vmap(hypermodel.generate_params, in_axes=(None, 0)))


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = hypermodel.make_hypermodel_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def _indices(agent, seed, n):
    """n indices of the agent from the keys split from key(seed): one program, key split inside."""
    return jax.jit(lambda key: jax.vmap(agent.enn.sample_index)(jax.random.split(key, n)))(
        jax.random.key(seed))


def test_index_is_gaussian_with_unit_expected_squared_norm():
    agent = hypermodel.make_hypermodel_agent(SMALL, SHAPES)
    n, k = 4000, SMALL.index_dim
    zs = np.asarray(_indices(agent, 4, n))
    assert zs.shape == (n, k) and zs.dtype == np.float32
    # Each coordinate is N(0, 1/k): its sample mean has standard error
    # sqrt(1/(k n)) and its sample variance sqrt(2/n) / k.
    assert np.all(np.abs(zs.mean(axis=0)) < 4 * np.sqrt(1 / (k * n)))
    assert np.all(np.abs(zs.var(axis=0) - 1 / k) < 4 * np.sqrt(2 / n) / k)


def _toy_problem(num_train=20, input_dim=2):
    """A small labelled set and its prior knowledge, built here (no problem sweep needed)."""
    x = np.random.default_rng(20).normal(size=(num_train, input_dim)).astype(np.float32)
    data = base.Data(x=x, y=(x[:, 0] > 0).astype(np.int32))
    prior = base.PriorKnowledge(input_dim=input_dim, num_classes=2, env_hidden=(50, 50),
                                temperature=0.1)
    return data, prior


def _variance_tolerance(variance, n, num_stderr=5):
    """num_stderr standard errors of the sample variance of n Gaussian draws.

    That standard error is sigma^2 sqrt(2 / (n - 1)).
    """
    return num_stderr * variance * np.sqrt(2 / (n - 1))


@jax.jit(static_argnums=(1, 2))
def _split_and_sample_indices(key, n, index_dim):
    return jax.vmap(lambda k: hypermodel.sample_index(k, index_dim))(jax.random.split(key, n))


def _sample_indices(n, index_dim, seed):
    """n indices of hypermodel.sample_index from the keys split from key(seed), as NumPy."""
    return np.asarray(_split_and_sample_indices(jax.random.key(seed), n, index_dim))


def test_trained_hypermodel_starts_like_the_references():
    """Every coefficient is TruncNormal(0, 1/k) cut at +-2 stddevs, whatever the fan-in, and
    the offset is zero (the reference's default Haiku linear layer of the index, unscaled)."""
    k = 5
    hyper = jax.device_get(_init_linear_hypermodel(jax.random.key(5), 2, (50, 50, 2), k))
    assert [layer["w"].shape for layer in hyper.a] == [(2, 50, k), (50, 50, k), (50, 2, k)]
    assert [layer["b"].shape for layer in hyper.a] == [(50, k), (50, k), (2, k)]
    assert all(not np.any(b) for b in jax.tree.leaves(hyper.b))
    unit = scipy.stats.truncnorm(-2, 2)
    var, fourth = unit.var() / k, unit.moment(4) / k**2  # of one coefficient
    for leaf in jax.tree.leaves(hyper.a):
        leaf = np.asarray(leaf, np.float64).ravel()
        assert np.all(np.abs(leaf) <= 2 / np.sqrt(k) * (1 + 1e-6)) and np.all(leaf != 0)
        # The sample variance of n i.i.d. draws has standard error sqrt((mu_4 - sigma^4) / n):
        # within 5 of them of 0.774 / k in every leaf, weights of fan-in 2 and 50 and biases alike.
        assert abs(np.mean(leaf**2) - var) < 5 * np.sqrt((fourth - var**2) / leaf.size)
    z = np.array([0.5, -1.0, 2.0, 0.1, -0.3], np.float32)
    generated = _generate_params(hyper, z)
    np.testing.assert_allclose(generated[1]["b"], np.asarray(hyper.a[1]["b"], np.float64) @ z,
                               rtol=1e-6)


def test_generated_biases_vary_across_indices_with_the_references_variance():
    """For fixed coefficients, a generated parameter a_j . z is exactly N(0, |a_j|^2 / k)."""
    k, n = 5, 4000
    hyper = _init_linear_hypermodel(jax.random.key(6), 2, (50, 50, 2), k)
    generated = _generate_batched(hyper, _sample_indices(n, k, 7))
    for layer, coefs in zip(generated, hyper.a):
        for name in ("b", "w"):
            samples = np.asarray(layer[name], np.float64).reshape(n, -1)
            expected = (np.asarray(coefs[name], np.float64) ** 2).sum(-1).ravel() / k
            assert np.all(samples.std(axis=0) > 0)
            got = samples.var(axis=0, ddof=1)
            assert np.all(np.abs(got - expected) < _variance_tolerance(expected, n)), name
            # Averaged over the leaf's parameters, within 5 standard errors (of that mean over
            # the leaf) of the reference's 0.774 / k.
            stderr = got.std(ddof=1) / np.sqrt(got.size)
            assert abs(got.mean() - scipy.stats.truncnorm(-2, 2).var() / k) < 5 * stderr, name


def test_layer_index_slices_are_the_references():
    assert [s.tolist() for s in hypermodel.layer_index_slices(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [s.tolist() for s in hypermodel.layer_index_slices(5, 3)] == [[0, 1], [2, 3], [4]]
    assert [s.tolist() for s in hypermodel.layer_index_slices(7, 2)] == [[0, 1, 2, 3], [4, 5, 6]]
    # Fewer coordinates than layers: every layer sees the whole index.
    assert [s.tolist() for s in hypermodel.layer_index_slices(1, 2)] == [[0], [0]]
    assert [s.tolist() for s in hypermodel.layer_index_slices(2, 3)] == [[0, 1]] * 3


@pytest.mark.parametrize("index_dim, prior_hidden", [(5, (10,)), (5, (10, 10)), (1, (10,))])
def test_prior_hypermodel_layers_use_their_index_slice_and_unit_directions(index_dim,
                                                                           prior_hidden):
    prior = jax.device_get(
        _init_prior_hypermodel(jax.random.key(8), 2, (*prior_hidden, 2), index_dim))
    slices = hypermodel.layer_index_slices(index_dim, len(prior_hidden) + 1)
    assert all(not np.any(b) for b in jax.tree.leaves(prior.b))  # no offset
    for layer, coords in zip(prior.a, slices):
        fan_in = layer["w"].shape[0]
        outside = np.setdiff1d(np.arange(index_dim), coords)
        for name, norm in (("w", 1 / np.sqrt(fan_in)), ("b", 1.0)):
            coefs = np.asarray(layer[name])
            assert not np.any(coefs[..., outside])
            np.testing.assert_allclose(np.linalg.norm(coefs, axis=-1), norm, rtol=1e-5)
    # Moving the index outside a layer's slice leaves that layer's parameters unchanged.
    z = _sample_indices(1, index_dim, 9)[0]
    generate = _generate_params
    for i, coords in enumerate(slices):
        moved = z.copy()
        moved[np.setdiff1d(np.arange(index_dim), coords)] += 1.0
        for name in ("w", "b"):
            np.testing.assert_array_equal(generate(prior, z)[i][name],
                                          generate(prior, moved)[i][name])


def test_prior_weights_and_biases_have_the_references_variance_and_an_output_bias():
    """z ~ N(0, I/k) and unit directions: each generated weight is exactly N(0, 1/(k fan_in))
    and each bias, the output layer's included, N(0, 1/k)."""
    k, n = 5, 4000
    prior = _init_prior_hypermodel(jax.random.key(10), 2, (10, 2), k)
    zs = _sample_indices(n, k, 11)
    generated = _generate_batched(prior, zs)
    for layer in generated:
        fan_in = layer["w"].shape[1]
        for name, expected in (("w", 1 / (k * fan_in)), ("b", 1 / k)):
            samples = np.asarray(layer[name], np.float64).reshape(n, -1)
            assert np.all(np.abs(samples.mean(0)) < 5 * np.sqrt(expected / n)), name
            assert np.all(np.abs(samples.var(0, ddof=1) - expected)
                          < _variance_tolerance(expected, n)), name
    # The output bias makes the prior nonzero at x = 0, differently for each index.
    at_zero = np.asarray(jax.jit(jax.vmap(lambda z: networks.apply_mlp(
        hypermodel.generate_params(prior, z), jnp.zeros((1, 2)))))(zs[:3]))
    assert np.all(np.abs(at_zero) > 0)
    assert not np.allclose(at_zero[0], at_zero[1])


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_agent_starts_from_these_hypermodels():
    """The agent splits its key into (init, train, prior, bootstrap); after one Adam step of
    size 1e-6 the trained coefficients are within that step of init_linear_hypermodel's
    draw, and the prior is init_prior_hypermodel's draw (up to the float rounding of its
    normalisation, which XLA may fuse differently under jit)."""
    data, prior = _toy_problem()
    config = dataclasses.replace(SMALL, num_steps=1, learning_rate=1e-6, prior_hidden=(10, 10))
    agent = hypermodel.make_hypermodel_agent(config, SHAPES)
    key = jax.random.key(12)
    state = jax.jit(agent.train)(key, data, prior)

    @jax.jit  # the key split and both draws in one program
    def start_and_fixed(key):
        init_key, _, prior_key, _ = jax.random.split(key, 4)
        return (hypermodel.init_linear_hypermodel(init_key, 2, (50, 50, 2), config.index_dim),
                hypermodel.init_prior_hypermodel(prior_key, 2, (10, 10, 2), config.index_dim))

    start, fixed = start_and_fixed(key)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(start)):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    for a, b in zip(jax.tree.leaves(state.prior_params), jax.tree.leaves(fixed)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_prior_is_fixed_and_added_with_its_scale(trained):
    agent, data, prior, state, _ = trained
    # Bit-identical after 1 and after 300 steps (Adam would move a trained leaf
    # by about the learning rate at every step), while the trained part moves.
    one_step = hypermodel.make_hypermodel_agent(dataclasses.replace(SMALL, num_steps=1), SHAPES)
    early = jax.jit(one_step.train)(jax.random.key(0), data, prior)
    for a, b in zip(jax.tree.leaves(early.prior_params), jax.tree.leaves(state.prior_params)):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(jax.tree.leaves(early.params)[0], jax.tree.leaves(state.params)[0],
                           atol=1e-3)
    assert [leaf["w"].shape for leaf in state.prior_params.a] == [(2, 10, 5), (10, 2, 5)]
    np.testing.assert_allclose(state.prior_scale, 1 / np.sqrt(PROBLEM.temperature), rtol=1e-6)
    x = np.random.default_rng(6).normal(size=(9, 2)).astype(np.float32)
    z = jax.jit(agent.enn.sample_index)(jax.random.key(7))
    expected = jax.jit(lambda state, x, z: (
        networks.apply_mlp(hypermodel.generate_params(state.params, z), x)
        + state.prior_scale
        * networks.apply_mlp(hypermodel.generate_params(state.prior_params, z), x)))(state, x, z)
    np.testing.assert_allclose(jax.jit(agent.enn.apply)(state, x, z), expected,
                               rtol=1e-5, atol=1e-4)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_fits_low_noise_training_data(trained):
    agent, data, _, state, _ = trained
    zs = _indices(agent, 8, 100)
    probs = np.asarray(jax.jit(jax.vmap(
        lambda z: jax.nn.softmax(agent.enn.apply(state, data.x, z))))(zs)).mean(0)
    assert np.mean(np.argmax(probs, axis=-1) == np.asarray(data.y)) >= 0.9


@pytest.mark.parametrize("bootstrap", ["exponential", "bernoulli"])
@pytest.mark.parametrize("index_dim", [1, 5])
def test_bootstrap_weights_have_the_stated_distribution(bootstrap, index_dim):
    """For each training point, its weights over i.i.d. indices are i.i.d. draws."""
    n, num_train = 4000, 30
    weight_fn = hypermodel.bootstrap_weight_fn(jax.random.key(9), bootstrap, num_train, index_dim)
    zs = _sample_indices(n, index_dim, 10)
    ids = np.arange(num_train, dtype=np.int32)
    weights = np.asarray(jax.jit(jax.vmap(weight_fn, in_axes=(0, None)))(zs, ids))  # [z, point]
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
    # One draw alone equals the batched draws to float32 rounding (the two programs may
    # order a few float operations differently).
    np.testing.assert_allclose(jax.jit(weight_fn)(zs[0], ids), weights[0], rtol=1e-6)
    # Different across indices and across points.
    assert not np.array_equal(weights[0], weights[1])
    assert not np.array_equal(weights[:, 0], weights[:, 1])


def test_no_bootstrap_is_all_ones_and_unknown_is_rejected():
    weight_fn = hypermodel.bootstrap_weight_fn(jax.random.key(0), "none", 5, 3)
    np.testing.assert_array_equal(
        jax.jit(weight_fn)(np.ones(3, np.float32), np.arange(5, dtype=np.int32)), np.ones(5))
    with pytest.raises(ValueError, match="bootstrap must be one of"):
        hypermodel.bootstrap_weight_fn(jax.random.key(0), "poisson", 5, 3)


@pytest.mark.slow
def test_runs_on_a_sweep_through_the_runner():
    """vmap over problems of different temperatures; M sampled Gaussian indices."""
    problems = [dataclasses.replace(p, taus=(1,), num_test=20, num_samples=50)
                for p in PAPER.values() if p.num_train == 3 and p.seed == 0]
    build = functools.partial(hypermodel.make_hypermodel_agent,
                              dataclasses.replace(SMALL, num_steps=20, bootstrap="bernoulli"))
    rows = leaderboard.run_agent(build, problems, "hypermodel", progress=False)
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
