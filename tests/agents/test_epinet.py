"""The epinet agent: base network, index, fixed priors, configs, sweep, and a leaderboard run."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard, networks
from neural_testbed.agents import epinet

# Both priors on (the additive ensemble prior and the epinet-shaped one), so
# that zeroing them is a real check of both.
SMALL = epinet.EpinetConfig(num_steps=100, index_dim=4, num_index_samples=4,
                            epinet_prior_scale=0.5)
TEMPERATURES = (1.0, 0.3, 0.1)  # additive prior scales 0.3 / temperature = 0.3, 1, 3
SHAPES = base.Shapes(input_dim=2, num_outputs=2)  # the toy data's


def _toy_data(num_train=20, input_dim=2):
    x = np.random.default_rng(20).normal(size=(num_train, input_dim)).astype(np.float32)
    return base.Data(x=x, y=(x[:, 0] > 0).astype(np.int32))


def _prior(temperature, input_dim=2):
    return base.PriorKnowledge(input_dim=input_dim, num_classes=2, env_hidden=(50, 50),
                               temperature=temperature)


@pytest.fixture(scope="module")
def trained():
    """SMALL trained on one data set at each of TEMPERATURES, as the runner
    trains problems: ``jit(vmap(train))`` with a traced temperature."""
    agent = epinet.make_epinet_agent(SMALL, SHAPES)
    data = _toy_data()
    num = len(TEMPERATURES)
    priors = _prior(np.asarray(TEMPERATURES, np.float32))
    batched = jax.tree.map(lambda a: np.broadcast_to(a, (num, *a.shape)), data)
    keys = jax.random.split(jax.random.key(0), num)
    states = jax.jit(jax.vmap(agent.train))(keys, batched, priors)
    states = jax.device_get(states)  # NumPy slices: no per-leaf indexing program each
    return agent, [jax.tree.map(lambda a: a[i], states) for i in range(num)]


_apply = jax.jit(epinet.make_epinet_agent(SMALL, SHAPES).enn.apply)
_apply_indices = jax.jit(jax.vmap(_apply, in_axes=(None, None, 0)))


@jax.jit(static_argnums=(1, 2))
def _split_and_sample_indices(key, n, index_dim):
    return jax.vmap(lambda k: epinet.sample_index(k, index_dim))(jax.random.split(key, n))


def _indices(seed, n, index_dim=SMALL.index_dim):
    """n indices of epinet.sample_index from the keys split from key(seed), as NumPy."""
    return np.asarray(_split_and_sample_indices(jax.random.key(seed), n, index_dim))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_with_epinet_and_priors_zeroed_it_is_the_base_network(trained):
    _, states = trained
    x = np.random.default_rng(1).normal(size=(30, 2)).astype(np.float32)
    zs = np.concatenate([_indices(2, 5), 10.0 * _indices(3, 2)])  # large indices too
    zero = lambda tree: jax.tree.map(np.zeros_like, tree)
    for state in states:
        zeroed = state._replace(epinet=zero(state.epinet), prior_epinet=zero(state.prior_epinet),
                                prior_members=zero(state.prior_members))
        expected = np.asarray(jax.jit(networks.apply_mlp)(state.base, x))
        for z in zs:
            # Adding exact zeros: equal up to float32 rounding of the base's own ops.
            np.testing.assert_allclose(_apply(zeroed, x, z), expected,
                                       rtol=1e-6, atol=1e-6)
        # Each zeroed part matters: the full network is not the base.
        assert np.abs(np.asarray(_apply(state, x, zs[0])) - expected).max() > 1e-2


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_prior_scale_is_prior_scale_over_temperature(trained):
    _, states = trained
    for temperature, state in zip(TEMPERATURES, states):
        np.testing.assert_allclose(state.prior_scale, SMALL.prior_scale / temperature, rtol=1e-6)


def _spread(state, seed=4, num_indices=256):
    """Mean over 100 test inputs of the std over indices of the logit margin."""
    x = np.random.default_rng(seed).normal(size=(100, 2)).astype(np.float32)
    logits = np.asarray(_apply_indices(state, x, _indices(seed + 1, num_indices)), np.float64)
    margin = logits[..., 1] - logits[..., 0]  # [indices, inputs]
    return float(margin.std(axis=0, ddof=1).mean())


def test_different_indices_give_different_logits_and_spread_grows_with_prior_scale(trained):
    _, states = trained
    x = np.random.default_rng(5).normal(size=(10, 2)).astype(np.float32)
    zs = _indices(6, 4)
    for state in states:
        logits = [np.asarray(_apply(state, x, z)) for z in zs]
        for i in range(len(zs)):
            for j in range(i):
                assert np.abs(logits[i] - logits[j]).max() > 1e-2, (i, j)
    # The prior's spread is linear in its scale (0.3, 1, 3 here); the trained
    # parts only partly offset it. Each spread is a mean of sample stds over
    # 256 indices, with a relative standard error of at most 1/sqrt(2 * 255) =
    # 4.4%; a factor of 2 between neighbours (3.3 expected) is far outside that.
    spreads = [_spread(state) for state in states]
    assert spreads[1] > 2 * spreads[0] and spreads[2] > 2 * spreads[1], spreads


@pytest.mark.parametrize("hidden", [(15, 15), (7,), ()])
def test_projection_is_the_mlp_on_index_and_features_times_the_index(hidden):
    # The projection computes what depends on z alone once per index; it must be the
    # definition: an MLP on [z, features] whose [K, D] output multiplies z.
    index_dim, feature_dim, num_classes = 4, 9, 3
    params = networks.init_mlp(jax.random.key(0), index_dim + feature_dim,
                               (*hidden, num_classes * index_dim))
    features = jax.random.normal(jax.random.key(1), (6, feature_dim))
    z = jax.random.normal(jax.random.key(2), (index_dim,))
    inputs = np.concatenate([np.broadcast_to(z, (6, index_dim)), features], axis=-1)
    expected = networks.apply_mlp(params, inputs).reshape(6, num_classes, index_dim) @ z
    np.testing.assert_allclose(epinet._project(params, features, z), expected,
                               rtol=1e-5, atol=1e-5)


def test_index_is_standard_gaussian():
    n, k = 4000, 8
    zs = np.asarray(_indices(7, n, k))
    assert zs.shape == (n, k) and zs.dtype == np.float32
    # Each coordinate is N(0, 1): its sample mean has standard error sqrt(1/n)
    # and its sample variance sqrt(2/n); 4 standard errors.
    assert np.all(np.abs(zs.mean(axis=0)) < 4 * np.sqrt(1 / n))
    assert np.all(np.abs(zs.var(axis=0) - 1) < 4 * np.sqrt(2 / n))


def test_training_is_ten_times_longer_beyond_500_points_per_dimension():
    config = epinet.EpinetConfig()
    assert epinet.num_train_steps(config, 1001, 2) == 10_000
    assert epinet.num_train_steps(config, 1000, 1) == 10_000
    # Strictly more than 500: never in the paper's 2-d sweep (T <= 1000).
    assert epinet.num_train_steps(config, 1000, 2) == 1000
    assert epinet.num_train_steps(config, 10, 2) == 1000
    np.testing.assert_allclose(epinet.l2_scale(0.2, 10, 2), 0.2 * 0.2 ** 0.7)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_padded_training_stops_at_the_steps_of_its_own_t():
    """T = 10 in 2-d is below the ratio, the 30 padded rows above it: the padded program
    runs twice the steps and this problem's state stops changing after its own count
    (train_minibatch's num_active_steps), so it is the state trained unpadded."""
    config = dataclasses.replace(SMALL, num_steps=20, large_data_ratio=10.0,
                                 large_data_steps_factor=2)
    data, prior = _toy_data(num_train=10), _prior(0.1)
    mask = np.arange(30) < 10
    padded = base.Data(np.concatenate([data.x, np.full((20, 2), 1e3, np.float32)]),
                       np.concatenate([data.y, np.zeros(20, np.int32)]), mask)
    train = jax.jit(epinet.make_epinet_agent(config, SHAPES).train)
    for a, b in zip(jax.tree.leaves(train(jax.random.key(0), padded, prior)),
                    jax.tree.leaves(train(jax.random.key(0), data, prior))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("changes", [
    {"index_dim": 0}, {"index_dim": 2.0}, {"num_index_samples": 0},
    {"epinet_hidden": (15, 0)}, {"prior_hidden": [5]}, {"prior_scale": -0.1},
    {"epinet_prior_scale": float("inf")}, {"large_data_steps_factor": 0},
    {"large_data_ratio": 0.0}, {"temperature_scaling": "cubic"}, {"num_steps": 0},
    {"l2_weight_decay": float("nan")},
])
def test_config_refuses_bad_values(changes):
    with pytest.raises(ValueError, match=next(iter(changes))):
        epinet.EpinetConfig(**changes)


def test_sweep_is_distinct_valid_and_holds_the_default():
    sweep = epinet.epinet_sweep()
    assert len(sweep) == len(set(sweep)) == 24
    assert epinet.EpinetConfig() in sweep
    assert {c.index_dim for c in sweep} == {4, 8, 16}
    assert {c.epinet_hidden for c in sweep} == {(15, 15), (50, 50)}
    assert {c.prior_scale for c in sweep} == {0.0, 0.1, 0.3, 1.0}
    assert all(c.num_index_samples == c.index_dim for c in sweep)
    spec = agents.get_agent("epinet")
    assert spec.default == epinet.EpinetConfig() and spec.sweep is epinet.epinet_sweep


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("epinet")
    config = agents.parse_overrides(
        spec, ["index_dim=4", "epinet_hidden=50,50", "prior_scale=1", "num_index_samples=16"])
    assert config == epinet.EpinetConfig(index_dim=4, epinet_hidden=(50, 50), prior_scale=1.0,
                                         num_index_samples=16)


def test_defaults_are_the_reference_testbeds():
    config = epinet.EpinetConfig()
    assert (config.index_dim, config.epinet_hidden, config.prior_scale, config.prior_hidden,
            config.epinet_prior_scale, config.hidden, config.l2_weight_decay, config.num_steps,
            config.learning_rate, config.batch_size, config.num_index_samples) == (
        8, (15, 15), 0.3, (5, 5), 0.0, (50, 50), 0.2, 1000, 1e-3, 100, 8)


@pytest.mark.slow  # training and evaluating through the runner (the longest of any agent)
def test_runs_through_the_leaderboard_with_finite_kl():
    """Two smoke problems (T = 10), both taus, N and M cut to 100 so that it takes seconds."""
    problems = [dataclasses.replace(p, num_test=100, num_samples=100)
                for p in leaderboard.get_sweep("smoke").values() if p.num_train == 10]
    assert len(problems) == 2
    config = dataclasses.replace(SMALL, epinet_prior_scale=0.0)
    rows = leaderboard.run_agent(functools.partial(epinet.make_epinet_agent, config), problems,
                                 "epinet", config=config, progress=False)
    assert len(rows) == 2 * len(problems[0].taus)
    for row in rows:
        assert row.status == "ok", row.error
        assert np.isfinite(row.kl) and np.isfinite(row.kl_stderr), row
