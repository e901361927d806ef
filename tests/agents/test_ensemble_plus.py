"""The ensemble+ agent: members vs the ensemble's, bootstrap, fixed priors, Figure 5."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from neural_testbed import agents, base, generative, leaderboard, networks
from neural_testbed.agents import ensemble, ensemble_plus, ensembling

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SMALL = ensemble_plus.EnsemblePlusConfig(num_ensemble=4, num_steps=60)


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = ensemble_plus.make_ensemble_plus_agent(SMALL)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def test_same_seed_same_members_and_different_indices_differ(trained):
    agent, data, prior, state, train = trained
    again = train(jax.random.key(0), data, prior)
    x = jax.random.normal(jax.random.key(2), (50, 2))
    logits = [np.asarray(agent.enn.apply(state, x, i)) for i in range(SMALL.num_ensemble)]
    for i in range(SMALL.num_ensemble):
        np.testing.assert_array_equal(logits[i], agent.enn.apply(again, x, i))
        for j in range(i):
            assert np.abs(logits[i] - logits[j]).max() > 1e-2, (i, j)


def _toy_problem(num_train=20, input_dim=2):
    """A small labelled set and its prior knowledge, built here (no problem sweep needed)."""
    x = jax.random.normal(jax.random.key(20), (num_train, input_dim))
    data = base.Data(x=x, y=(x[:, 0] > 0).astype(jnp.int32))
    prior = base.PriorKnowledge(input_dim=input_dim, num_classes=2, num_train=num_train,
                                env_hidden=(50, 50), temperature=0.1)
    return data, prior


def test_members_are_the_ensembles_with_the_references_first_bias():
    """Same weights as the ensemble agent's; the first-layer bias, zero there, is a normal cut
    at +-2 stddevs with stddev 1/sqrt(d), as the reference's ensemble+ network draws it."""
    input_dim, num_members, sizes = 10, 100, (50, 50, 2)
    key = ensembling.split_keys(jax.random.key(7)).init
    plus = ensemble_plus.init_trained_members(key, num_members, input_dim, sizes)
    plain = ensembling.init_members(key, num_members, input_dim, sizes)
    assert not np.any(plain[0]["b"])
    for i, (a, b) in enumerate(zip(plus, plain)):
        np.testing.assert_array_equal(a["w"], b["w"])
        if i:
            np.testing.assert_array_equal(a["b"], b["b"])
    bias = np.asarray(plus[0]["b"], np.float64).ravel()
    assert bias.size == num_members * 50
    stddev = 1 / np.sqrt(input_dim)
    assert np.all(bias != 0) and np.all(np.abs(bias) <= 2 * stddev * (1 + 1e-5))
    unit = scipy.stats.truncnorm(-2, 2)
    var, fourth = unit.var() * stddev**2, unit.moment(4) * stddev**4
    # Sample mean and variance within 4 standard errors: sqrt(var / n) and, for the variance,
    # sqrt((mu_4 - sigma^4) / n). (An untruncated N(0, 1/d) bias would be 13 errors off.)
    assert abs(bias.mean()) < 4 * np.sqrt(var / bias.size)
    assert abs(bias.var() - var) < 4 * np.sqrt((fourth - var**2) / bias.size)
    # Members differ in their biases.
    assert not np.allclose(plus[0]["b"][0], plus[0]["b"][1])


def test_the_agent_trains_from_these_members_and_samples_like_the_ensemble():
    """After one Adam step of size 1e-6 the members are within that step of
    init_trained_members' draw; with no prior and no bootstrap the logits are the members'
    alone; and member indices are drawn exactly as the ensemble agent draws them."""
    data, prior = _toy_problem()
    config = dataclasses.replace(SMALL, prior_scale=0.0, bootstrap="none", num_steps=1,
                                 learning_rate=1e-6)
    plus = ensemble_plus.make_ensemble_plus_agent(config)
    key = jax.random.key(7)
    state = jax.jit(plus.train)(key, data, prior)
    start = ensemble_plus.init_trained_members(
        ensembling.split_keys(key).init, config.num_ensemble, 2, (50, 50, 2))
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(start)):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    x = jax.random.normal(jax.random.key(8), (20, 2))
    for index in range(config.num_ensemble):
        np.testing.assert_allclose(
            plus.enn.apply(state, x, index),
            networks.apply_mlp(ensembling.select_member(state.params, index), x), rtol=1e-6)
    plain = ensemble.make_ensemble_agent(ensemble.EnsembleConfig(num_ensemble=SMALL.num_ensemble))
    keys = jax.random.split(jax.random.key(9), 100)
    np.testing.assert_array_equal(jax.vmap(plus.enn.sample_index)(keys),
                                  jax.vmap(plain.enn.sample_index)(keys))


def test_prior_functions_are_drawn_like_the_environment_and_never_trained(trained):
    agent, data, prior, state, _ = trained
    # Bit-identical after 1 and after 60 steps (Adam would move a trained leaf
    # by about the learning rate at every step), while the trained part moves.
    one_step = ensemble_plus.make_ensemble_plus_agent(dataclasses.replace(SMALL, num_steps=1))
    early = jax.jit(one_step.train)(jax.random.key(0), data, prior)
    for a, b in zip(jax.tree.leaves(early.prior_params), jax.tree.leaves(state.prior_params)):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(jax.tree.leaves(early.params)[0], jax.tree.leaves(state.params)[0],
                           atol=1e-3)
    # Member m's prior is the environment network drawn from the m-th prior key
    # (equal up to float rounding of the fan-in scaling, which XLA may fuse).
    prior_key = ensembling.split_keys(jax.random.key(0)).prior
    member_keys = jax.random.split(prior_key, SMALL.num_ensemble)
    envs = [generative.sample_environment(k, 1.0) for k in member_keys]
    for index, env in enumerate(envs):
        member_prior = ensembling.select_member(state.prior_params, index)
        for a, b in zip(jax.tree.leaves(member_prior), jax.tree.leaves(env.params)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # Logits are the trained member plus prior_scale / sqrt(temperature) times the prior.
    np.testing.assert_allclose(state.prior_scale, SMALL.prior_scale / np.sqrt(PROBLEM.temperature),
                               rtol=1e-6)
    x = jax.random.normal(jax.random.key(3), (9, 2))
    expected = (networks.apply_mlp(ensembling.select_member(state.params, 1), x)
                + state.prior_scale * generative.environment_logits(envs[1], x))
    np.testing.assert_allclose(agent.enn.apply(state, x, 1), expected, rtol=1e-5, atol=1e-4)


def test_prior_scale_follows_the_temperature_scaling():
    for temperature in (0.01, 0.5):
        np.testing.assert_allclose(
            ensembling.prior_function_scale(3.0, temperature, "sqrt"), 3 / np.sqrt(temperature),
            rtol=1e-6)
        np.testing.assert_allclose(
            ensembling.prior_function_scale(3.0, temperature, "linear"), 3 / temperature,
            rtol=1e-6)


@pytest.mark.parametrize("bootstrap", ["exponential", "bernoulli"])
def test_bootstrap_weights_have_the_stated_distribution(bootstrap):
    weights = np.asarray(ensemble_plus.bootstrap_weights(jax.random.key(11), bootstrap, 50, 200))
    assert weights.shape == (50, 200) and weights.dtype == np.float32
    n = weights.size
    # Exp(1) and 2 * Bernoulli(1/2) both have mean 1 and variance 1: the sample
    # mean is within 4 standard errors (1 / sqrt(n)) of 1.
    assert abs(weights.mean() - 1) < 4 / np.sqrt(n)
    if bootstrap == "exponential":
        assert weights.min() > 0
        # Var of the sample variance of Exp(1) is (mu_4 - sigma^4) / n = (9 - 1) / n.
        assert abs(weights.var() - 1) < 4 * np.sqrt(8 / n)
        # P(w > 1) = exp(-1); its standard error is sqrt(p (1 - p) / n).
        p = np.exp(-1)
        assert abs(np.mean(weights > 1) - p) < 4 * np.sqrt(p * (1 - p) / n)
    else:
        assert set(np.unique(weights)) == {0.0, 2.0}  # the variance is then 4 p (1 - p)
    # Weights differ across members (rows) and across data points (columns).
    assert not np.array_equal(weights[0], weights[1])
    assert not np.array_equal(weights[:, 0], weights[:, 1])


def test_no_bootstrap_is_all_ones_and_unknown_is_rejected():
    np.testing.assert_array_equal(
        ensemble_plus.bootstrap_weights(jax.random.key(0), "none", 3, 5), np.ones((3, 5)))
    with pytest.raises(ValueError, match="bootstrap must be one of 'none', 'exponential', "
                                         "'bernoulli', got 'poisson'"):
        ensemble_plus.bootstrap_weights(jax.random.key(0), "poisson", 3, 5)


def test_a_zero_weight_removes_a_point_from_a_members_loss():
    """Flipping the label of point j changes exactly the members that weight it 2."""
    num_train, key = 6, jax.random.key(12)
    _, data = leaderboard.load_problem(dataclasses.replace(PROBLEM, num_train=num_train))
    prior = dataclasses.replace(leaderboard.prior_knowledge(PROBLEM), num_train=num_train)
    config = dataclasses.replace(SMALL, bootstrap="bernoulli", num_steps=30)
    weights = np.asarray(ensemble_plus.bootstrap_weights(
        ensembling.split_keys(key).bootstrap, "bernoulli", config.num_ensemble, num_train))
    point = next(j for j in range(num_train) if 0 < weights[:, j].sum() < 2 * config.num_ensemble)
    flipped = base.Data(x=data.x, y=data.y.at[point].set(1 - data.y[point]))
    train = jax.jit(ensemble_plus.make_ensemble_plus_agent(config).train)
    state, state_flipped = train(key, data, prior), train(key, flipped, prior)
    for member in range(config.num_ensemble):
        same = all(np.array_equal(a[member], b[member]) for a, b in zip(
            jax.tree.leaves(state.params), jax.tree.leaves(state_flipped.params)))
        assert same == (weights[member, point] == 0), (member, weights[:, point])


@pytest.mark.slow
def test_members_disagree_more_off_the_data_than_a_plain_ensemble():
    """Paper Figure 5: T = 10, temperature 0.1, seeds 0-2, 10 members each.

    Disagreement at x is the variance over members of P(class 1 | x); for each
    seed, the mean over 500 fresh inputs of (ensemble+ - ensemble) must exceed
    4 standard errors of that mean (inputs are i.i.d., so the standard error is
    the sample standard deviation of the difference / sqrt(500)).
    """
    problems = [p for p in PAPER.values()
                if p.temperature == 0.1 and p.num_train == 10 and p.seed < 3]
    data = [leaderboard.load_problem(p)[1] for p in problems]
    data = jax.tree.map(lambda *leaves: jnp.stack(leaves), *data)
    prior = dataclasses.replace(leaderboard.prior_knowledge(problems[0]),
                                temperature=jnp.full((3,), 0.1))
    keys = jax.random.split(jax.random.key(13), 3)
    x = jax.random.normal(jax.random.key(14), (500, 2))

    def disagreement(agent):
        states = jax.jit(jax.vmap(agent.train))(keys, data, prior)
        probs = jax.vmap(lambda s: jax.vmap(
            lambda i: jax.nn.softmax(agent.enn.apply(s, x, i))[:, 1])(jnp.arange(10)))(states)
        return np.asarray(probs.var(axis=1))  # [seed, input]

    plain = disagreement(ensemble.make_ensemble_agent(
        ensemble.EnsembleConfig(num_ensemble=10, num_steps=300)))
    plus = disagreement(ensemble_plus.make_ensemble_plus_agent(
        ensemble_plus.EnsemblePlusConfig(num_ensemble=10, num_steps=300)))
    difference = plus - plain
    stderr = difference.std(axis=1, ddof=1) / np.sqrt(difference.shape[1])
    assert np.all(difference.mean(axis=1) > 4 * stderr), (plus.mean(1), plain.mean(1), stderr)


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("ensemble+")
    assert spec.default == ensemble_plus.EnsemblePlusConfig()
    config = agents.parse_overrides(
        spec, ["num_ensemble=10", "prior_scale=1", "bootstrap=bernoulli",
               "temperature_scaling=linear"])
    assert config == ensemble_plus.EnsemblePlusConfig(
        num_ensemble=10, prior_scale=1.0, bootstrap="bernoulli", temperature_scaling="linear")
    with pytest.raises(ValueError, match="allowed values are none, exponential, bernoulli"):
        agents.parse_overrides(spec, ["bootstrap=poisson"])


def test_defaults_are_the_reference_ones():
    config = ensemble_plus.EnsemblePlusConfig()
    assert (config.num_ensemble, config.prior_scale, config.temperature_scaling, config.bootstrap,
            config.l2_weight_decay, config.num_steps, config.hidden) == (
        100, 3.0, "sqrt", "none", 1.0, 1000, (50, 50))


def test_sweep_varies_one_factor_at_a_time_around_the_default():
    sweep = ensemble_plus.ensemble_plus_sweep()
    assert len(sweep) == len(set(sweep)) == 14
    default = ensemble_plus.EnsemblePlusConfig()
    fields = [f.name for f in dataclasses.fields(default)]
    changed = [{f for f in fields if getattr(c, f) != getattr(default, f)} for c in sweep]
    assert all(not c or c <= {"prior_scale", "temperature_scaling"} or len(c) == 1
               for c in changed), changed
    assert {c.num_ensemble for c in sweep} == {1, 3, 10, 30, 100}
    assert {c.bootstrap for c in sweep} == {"none", "bernoulli", "exponential"}
    assert {c.l2_weight_decay for c in sweep} == {0.1, 0.3, 1.0, 3.0, 10.0}
    assert {(c.prior_scale, c.temperature_scaling) for c in sweep} == {
        (3.0, "sqrt"), (0.0, "sqrt"), (1.0, "sqrt"), (1.0, "linear")}


@pytest.mark.parametrize(
    "field, value, message",
    [("num_ensemble", 0, "num_ensemble must be an integer >= 1, got 0"),
     ("bootstrap", "poisson", "bootstrap must be one of 'none', 'exponential', 'bernoulli'"),
     ("prior_scale", -1.0, "prior_scale must be a finite number >= 0, got -1.0"),
     ("prior_scale", float("nan"), "prior_scale must be a finite number >= 0, got nan"),
     ("temperature_scaling", "cubic", "temperature_scaling must be one of 'sqrt', 'linear'"),
     ("l2_weight_decay", -0.5, "l2_weight_decay must be >= 0")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        ensemble_plus.EnsemblePlusConfig(**{field: value})
