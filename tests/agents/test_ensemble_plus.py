"""The ensemble+ agent: members vs the ensemble's, bootstrap, fixed priors, Figure 5."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats

from neural_testbed import agents, base, generative, leaderboard, networks
from neural_testbed.agents import ensemble, ensemble_plus, ensembling, training

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SMALL = ensemble_plus.EnsemblePlusConfig(num_ensemble=4, num_steps=60)
SHAPES = base.Shapes.of(PROBLEM)  # d = 2, K = 2, as the toy problem below

# Jitted once here: called eagerly, every primitive compiles on its own.
_init_trained_members = jax.jit(ensemble_plus.init_trained_members, static_argnums=(1, 2, 3))
_split_keys = jax.jit(ensembling.split_keys)
_bootstrap_weights = jax.jit(ensemble_plus.bootstrap_weights, static_argnums=(1, 2, 3))


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = ensemble_plus.make_ensemble_plus_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def _toy_problem(num_train=20, input_dim=2):
    """A small labelled set and its prior knowledge, built here (no problem sweep needed)."""
    x = np.random.default_rng(20).normal(size=(num_train, input_dim)).astype(np.float32)
    data = base.Data(x=x, y=(x[:, 0] > 0).astype(np.int32))
    prior = base.PriorKnowledge(input_dim=input_dim, num_classes=2, env_hidden=(50, 50),
                                temperature=0.1)
    return data, prior


def test_members_are_the_ensembles_with_the_references_first_bias():
    """Same weights as the ensemble agent's; the first-layer bias, zero there, is a normal cut
    at +-2 stddevs with stddev 1/sqrt(d), as the reference's ensemble+ network draws it."""
    input_dim, num_members, sizes = 10, 100, (50, 50, 2)
    key = _split_keys(jax.random.key(7)).init
    plus = jax.device_get(_init_trained_members(key, num_members, input_dim, sizes))
    plain = jax.device_get(jax.jit(ensembling.init_members, static_argnums=(1, 2, 3))(
        key, num_members, input_dim, sizes))
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
    plus = ensemble_plus.make_ensemble_plus_agent(config, SHAPES)
    key = jax.random.key(7)
    state = jax.jit(plus.train)(key, data, prior)
    start = _init_trained_members(_split_keys(key).init, config.num_ensemble, 2, (50, 50, 2))
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(start)):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    x = np.random.default_rng(8).normal(size=(20, 2)).astype(np.float32)
    members = np.arange(config.num_ensemble, dtype=np.int32)
    agent_logits = jax.jit(jax.vmap(plus.enn.apply, in_axes=(None, None, 0)))(state, x, members)
    member_logits = jax.jit(jax.vmap(lambda i: networks.apply_mlp(
        ensembling.select_member(state.params, i), x)))(members)
    np.testing.assert_allclose(agent_logits, member_logits, rtol=1e-6)
    plain = ensemble.make_ensemble_agent(
        ensemble.EnsembleConfig(num_ensemble=SMALL.num_ensemble), SHAPES)
    keys = jax.random.split(jax.random.key(9), 100)
    np.testing.assert_array_equal(jax.jit(jax.vmap(plus.enn.sample_index))(keys),
                                  jax.jit(jax.vmap(plain.enn.sample_index))(keys))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_prior_functions_are_drawn_like_the_environment_and_never_trained(trained):
    agent, data, prior, state, _ = trained
    # Bit-identical after 1 and after 60 steps (Adam would move a trained leaf
    # by about the learning rate at every step), while the trained part moves.
    one_step = ensemble_plus.make_ensemble_plus_agent(
        dataclasses.replace(SMALL, num_steps=1), SHAPES)
    early = jax.jit(one_step.train)(jax.random.key(0), data, prior)
    for a, b in zip(jax.tree.leaves(early.prior_params), jax.tree.leaves(state.prior_params)):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(jax.tree.leaves(early.params)[0], jax.tree.leaves(state.params)[0],
                           atol=1e-3)
    # Member m's prior is the environment network drawn from the m-th prior key
    # (equal up to float rounding of the fan-in scaling, which XLA may fuse).

    @jax.jit  # the key splits and the environments' draws in one program
    def member_environments(key):
        member_keys = jax.random.split(ensembling.split_keys(key).prior, SMALL.num_ensemble)
        return [generative.sample_environment(k, 1.0) for k in member_keys]

    envs = member_environments(jax.random.key(0))
    prior_params = jax.device_get(state.prior_params)  # NumPy: no indexing program per leaf
    for index, env in enumerate(envs):
        member_prior = ensembling.select_member(prior_params, index)
        for a, b in zip(jax.tree.leaves(member_prior), jax.tree.leaves(env.params)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # Logits are the trained member plus prior_scale / sqrt(temperature) times the prior.
    np.testing.assert_allclose(state.prior_scale, SMALL.prior_scale / np.sqrt(PROBLEM.temperature),
                               rtol=1e-6)
    x = np.random.default_rng(3).normal(size=(9, 2)).astype(np.float32)
    expected = jax.jit(lambda state, env, x: (
        networks.apply_mlp(ensembling.select_member(state.params, 1), x)
        + state.prior_scale * generative.environment_logits(env, x)))(state, envs[1], x)
    np.testing.assert_allclose(jax.jit(agent.enn.apply)(state, x, 1), expected,
                               rtol=1e-5, atol=1e-4)


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
    weights = np.asarray(_bootstrap_weights(jax.random.key(11), bootstrap, 50, 200))
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
        _bootstrap_weights(jax.random.key(0), "none", 3, 5), np.ones((3, 5)))
    with pytest.raises(ValueError, match="bootstrap must be one of 'none', 'exponential', "
                                         "'bernoulli', got 'poisson'"):
        ensemble_plus.bootstrap_weights(jax.random.key(0), "poisson", 3, 5)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_zero_weight_removes_a_point_from_a_members_loss():
    """Flipping the label of point j changes exactly the members that weight it 2."""
    num_train, key = 6, jax.random.key(12)
    _, data = leaderboard.load_problem(dataclasses.replace(PROBLEM, num_train=num_train))
    prior = leaderboard.prior_knowledge(PROBLEM)
    config = dataclasses.replace(SMALL, bootstrap="bernoulli", num_steps=30)
    weights = np.asarray(_bootstrap_weights(
        _split_keys(key).bootstrap, "bernoulli", config.num_ensemble, num_train))
    point = next(j for j in range(num_train) if 0 < weights[:, j].sum() < 2 * config.num_ensemble)
    flipped_y = np.array(data.y)
    flipped_y[point] = 1 - flipped_y[point]
    flipped = base.Data(x=data.x, y=flipped_y)
    train = jax.jit(ensemble_plus.make_ensemble_plus_agent(config, SHAPES).train)
    state, state_flipped = jax.device_get((train(key, data, prior), train(key, flipped, prior)))
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
        probs = jax.jit(jax.vmap(lambda s: jax.vmap(
            lambda i: jax.nn.softmax(agent.enn.apply(s, x, i))[:, 1])(jnp.arange(10))))(states)
        return np.asarray(probs.var(axis=1))  # [seed, input]

    plain = disagreement(ensemble.make_ensemble_agent(
        ensemble.EnsembleConfig(num_ensemble=10, num_steps=300), SHAPES))
    plus = disagreement(ensemble_plus.make_ensemble_plus_agent(
        ensemble_plus.EnsemblePlusConfig(num_ensemble=10, num_steps=300), SHAPES))
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


# Prior functions (paper section 5.3, Figure 7, appendix D.3).


def _train_before_prior_functions(config, key, data, prior):
    """ensemble+'s train as it was before ``prior_function`` existed: the environment's MLP prior
    read x. Kept here, op for op, so that the default can be checked bit for bit against it."""
    keys = ensembling.split_keys(key)
    num_train = data.x.shape[0]
    params = ensemble_plus.init_trained_members(
        keys.init, config.num_ensemble, prior.input_dim, (*config.hidden, prior.num_classes))
    prior_params = ensembling.init_members(
        keys.prior, config.num_ensemble, prior.input_dim,
        (*prior.env_hidden, prior.num_classes), first_bias_stddev=1.0 / prior.input_dim**0.5)
    scale = ensembling.prior_function_scale(
        config.prior_scale, prior.temperature, config.temperature_scaling)
    prior_logits = scale * ensembling.apply_members(prior_params, data.x)
    weights = ensemble_plus.bootstrap_weights(
        keys.bootstrap, config.bootstrap, config.num_ensemble, num_train)
    decay = training.weight_decay_scale(
        config.l2_weight_decay, num_train, prior, config.adaptive_weight_scale,
        config.num_ensemble)
    optimizer = training.adam_with_l2(config.learning_rate, decay)

    def loss_fn(key, params, batch):
        del key
        ids = batch.x
        logits = ensembling.apply_members(params, data.x[ids]) + prior_logits[:, ids]
        labels = jnp.broadcast_to(batch.y, logits.shape[:-1])
        xent = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return (weights[:, ids] * xent).mean()

    point_ids = base.Data(x=jnp.arange(num_train), y=data.y)
    params, _ = training.train_minibatch(
        keys.train, loss_fn, params, point_ids, optimizer, config.num_steps, config.batch_size)
    return params, prior_params, scale


def _all_members(apply, state, x, num_members):
    """Every member's logits at x, ``[num_members, n, K]``, in one jitted call, as NumPy."""
    return np.asarray(jax.jit(jax.vmap(apply, in_axes=(None, None, 0)))(
        state, x, np.arange(num_members, dtype=np.int32)))


def _prior_only(state):
    """The state with its trained members zeroed, so enn.apply returns scale * p_m(x) alone."""
    return state._replace(params=jax.tree.map(  # NumPy zeros: no program per leaf
        lambda leaf: np.zeros(leaf.shape, leaf.dtype), state.params))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_default_prior_function_gives_the_same_numbers_as_before(trained):
    """The trained fixture (default prior function) against the code before the option."""
    agent, data, prior, state, _ = trained
    assert SMALL.prior_function == "environment" and state.encoder is None
    old_train = jax.jit(lambda k, d, p: _train_before_prior_functions(SMALL, k, d, p))
    params, prior_params, scale = old_train(jax.random.key(0), data, prior)
    for a, b in zip(jax.tree.leaves((state.params, state.prior_params, state.prior_scale)),
                    jax.tree.leaves((params, prior_params, scale)), strict=True):
        np.testing.assert_array_equal(a, b)
    x = np.random.default_rng(3).normal(size=(9, 2)).astype(np.float32)
    old = jax.jit(jax.vmap(lambda i: networks.apply_mlp(ensembling.select_member(params, i), x)
                           + scale * networks.apply_mlp(
                               ensembling.select_member(prior_params, i), x)))(
        np.arange(SMALL.num_ensemble, dtype=np.int32))
    np.testing.assert_array_equal(_all_members(agent.enn.apply, state, x, SMALL.num_ensemble), old)


def test_the_linear_prior_is_an_affine_function_of_x_and_the_environment_prior_is_not(trained):
    """f(a x1 + (1 - a) x2) = a f(x1) + (1 - a) f(x2) for the prior logits f, a in [-1, 2].

    Tolerance: both sides are float32 sums of d = 2 products plus a few scalings, so they differ
    by a few ulps of the largest term; 1e-5 times (1 + max |f|) is ~100 ulps."""
    data, prior = _toy_problem()
    config = dataclasses.replace(SMALL, prior_function="linear", num_steps=1)
    agent = ensemble_plus.make_ensemble_plus_agent(config, SHAPES)
    state = jax.jit(agent.train)(jax.random.key(0), data, prior)
    # One layer, drawn like the environment's output layer from the prior key: zero bias.
    expected = jax.jit(lambda key: jax.vmap(lambda k: networks.init_mlp(k, 2, (2,)))(
        jax.random.split(ensembling.split_keys(key).prior, config.num_ensemble)))(
        jax.random.key(0))
    for a, b in zip(jax.tree.leaves(state.prior_params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.any(np.asarray(state.prior_params[0]["b"]))
    rng = np.random.default_rng(4)
    x1, x2 = rng.normal(size=(2, 50, 2)).astype(np.float32)
    a = rng.uniform(-1.0, 2.0, size=(50, 1)).astype(np.float32)

    def affine_gap(agent, state, num_members):
        x = np.concatenate([a * x1 + (1 - a) * x2, x1, x2])  # one call, one compilation
        f = np.split(_all_members(agent.enn.apply, _prior_only(state), x, num_members), 3, axis=1)
        gap = np.abs(f[0] - (a * f[1] + (1 - a) * f[2])).max()
        return gap, 1e-5 * (1 + max(np.abs(v).max() for v in f))

    gap, tolerance = affine_gap(agent, state, config.num_ensemble)
    assert gap <= tolerance, (gap, tolerance)
    # The same check tells the environment's MLP prior (the trained fixture's) apart.
    env_agent, _, _, env_state, _ = trained
    gap, tolerance = affine_gap(env_agent, env_state, SMALL.num_ensemble)
    assert gap > 1e3 * tolerance, (gap, tolerance)


PLANE_SCALE = 3.0  # standard deviation of the inputs along the plane
VAE_CONFIG = dataclasses.replace(SMALL, prior_function="vae", vae_steps=200, num_steps=20)


def _plane_problem(key, num_train=20, input_dim=5, num_classes=3):
    """Inputs near a 2-d plane in 5-d: PLANE_SCALE * z along it, 0.05 noise off it."""
    plane_key, z_key, noise_key, label_key = jax.random.split(key, 4)
    basis, _ = jnp.linalg.qr(jax.random.normal(plane_key, (input_dim, 2)))
    x = (PLANE_SCALE * jax.random.normal(z_key, (num_train, 2)) @ basis.T
         + 0.05 * jax.random.normal(noise_key, (num_train, input_dim)))
    y = jnp.argmax(x @ jax.random.normal(label_key, (input_dim, num_classes)), axis=-1)
    return base.Data(x=x, y=y.astype(jnp.int32))


@pytest.fixture(scope="module")
def vae_trained():
    """ensemble+ with the VAE prior on two plane problems, temperatures 0.1 and 1 (traced)."""
    plane_problem = jax.jit(_plane_problem)  # one program for both draws
    data = [plane_problem(k) for k in jax.random.split(jax.random.key(30), 2)]
    data = jax.tree.map(lambda *leaves: np.stack(leaves), *data)
    prior = base.PriorKnowledge(input_dim=5, num_classes=3, env_hidden=(50, 50),
                                temperature=np.array([0.1, 1.0], np.float32))
    keys = jax.random.split(jax.random.key(31), 2)
    agent = ensemble_plus.make_ensemble_plus_agent(VAE_CONFIG, base.Shapes(5, 3))
    return agent, keys, data, jax.jit(jax.vmap(agent.train))(keys, data, prior)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_vae_fit_raises_the_elbo_and_its_encoder_mean_is_the_agents(vae_trained):
    """The ELBO on the 20 training inputs, averaged over 200 latent samples, gains at least
    half of what modelling the plane is worth, over the initial VAE and over any latent-free one.

    That worth: the best latent-free model (decoder constant at the mean, q = prior, KL = 0)
    has ELBO -0.5 mean|x - mean|^2 - 2.5 log(2 pi); the best linear-Gaussian one with unit
    noise, N(mean, W W^T + I), has a log-likelihood higher by 0.5 sum_i (l_i - 1 - log l_i)
    over the eigenvalues l_i > 1 of the inputs' covariance, which a VAE with Gaussian q can
    reach. Here l = 5.4 and 8.6 (9 in expectation), worth 4.1 nats; the fit gains about 4.7
    over the initial VAE and 3.9 over the latent-free bound; half the worth is 2.0.
    """
    agent, keys, data, states = vae_trained
    x = data.x[0]

    def init_and_fit(key, x):
        _, init_key, vae_key = jax.random.split(ensembling.split_keys(key).prior, 3)
        initial = ensemble_plus.init_vae(init_key, 5)
        return initial, *ensemble_plus.train_vae(
            vae_key, initial, x, VAE_CONFIG.vae_steps, "gaussian")

    initial, fitted, elbos = jax.jit(init_and_fit)(keys[0], x)
    assert elbos.shape == (VAE_CONFIG.vae_steps,) and np.all(np.isfinite(elbos))
    elbo = jax.jit(lambda params: jax.vmap(
        lambda k: ensemble_plus.vae_elbo(k, params, x, "gaussian"))(
        jax.random.split(jax.random.key(5), 200)).mean())
    eigenvalues = np.linalg.eigvalsh(np.cov(np.asarray(x, np.float64), rowvar=False, ddof=0))
    big = eigenvalues[eigenvalues > 1]
    worth = 0.5 * np.sum(big - 1 - np.log(big))
    latent_free = -0.5 * np.sum(eigenvalues) - 2.5 * np.log(2 * np.pi)
    before, after = float(elbo(initial)), float(elbo(fitted))
    assert worth > 2 and after - max(before, latent_free) > 0.5 * worth, (
        before, after, latent_free, worth)
    # The agent keeps that fit's encoder mean, x -> mu(x) in 2-d.
    encoder = jax.tree.map(lambda leaf: np.asarray(leaf)[0], states.encoder)
    assert [layer["w"].shape for layer in encoder] == [(5, 128), (128, 64), (64, 2)]
    for a, b in zip(jax.tree.leaves(encoder),
                    jax.tree.leaves(jax.jit(ensemble_plus.vae_encoder_mean)(fitted)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_vae_prior_reads_x_only_through_the_2d_encoder_mean(vae_trained):
    """Every member's and class's prior logit has its gradient in x in the span of the two
    rows of mu's Jacobian: stacked over 4 members x 3 classes, the [12, 5] Jacobian has
    rank 2 (third singular value < 1e-5 of the first, float32 rounding is ~1e-7)."""
    agent, _, data, states = vae_trained
    state = jax.device_put(_prior_only(jax.tree.map(lambda leaf: np.asarray(leaf)[0], states)))

    def prior_logits(x):  # [5] -> [members * classes]
        return jax.vmap(lambda i: agent.enn.apply(state, x[None], i)[0])(
            jnp.arange(VAE_CONFIG.num_ensemble)).ravel()

    points = np.concatenate([data.x[0, :3],
                             np.random.default_rng(6).normal(size=(3, 5)).astype(np.float32)])
    jacobians = np.asarray(jax.jit(jax.vmap(jax.jacfwd(prior_logits)))(points), np.float64)
    assert jacobians.shape == (6, VAE_CONFIG.num_ensemble * 3, 5)
    for jacobian in jacobians:
        singular = np.linalg.svd(jacobian, compute_uv=False)
        assert singular[2] < 1e-5 * singular[0] and singular[1] > 1e-3 * singular[0], singular


def test_the_vae_agent_trains_under_jit_and_vmap_with_a_traced_temperature(vae_trained):
    agent, _, _, states = vae_trained
    np.testing.assert_allclose(states.prior_scale, 3.0 / np.sqrt([0.1, 1.0]), rtol=1e-6)
    assert states.prior_params[0]["w"].shape == (2, VAE_CONFIG.num_ensemble, 2, 3)
    x = np.random.default_rng(7).normal(size=(8, 5)).astype(np.float32)
    logits = np.asarray(jax.jit(jax.vmap(lambda s: jax.vmap(lambda i: agent.enn.apply(s, x, i))(
        jnp.arange(VAE_CONFIG.num_ensemble))))(states))
    assert logits.shape == (2, VAE_CONFIG.num_ensemble, 8, 3) and np.all(np.isfinite(logits))
    assert not np.allclose(logits[:, 0], logits[:, 1])  # members differ


@pytest.mark.parametrize("decoder", ["gaussian", "bernoulli"])
def test_the_elbo_is_the_decoders_log_likelihood_minus_the_kl(decoder):
    """Recomputed in float64 from the same reparameterised sample (inputs in [0, 1])."""
    key = jax.random.key(8)
    params = jax.jit(ensemble_plus.init_vae, static_argnums=1)(jax.random.key(9), 5)
    x = np.random.default_rng(10).uniform(size=(7, 5)).astype(np.float32)
    elbo = jax.jit(ensemble_plus.vae_elbo, static_argnums=3)(key, params, x, decoder)
    def mlp(layers, h):
        for layer in layers[:-1]:
            h = np.maximum(h @ layer["w"] + layer["b"], 0)
        return h @ layers[-1]["w"] + layers[-1]["b"]

    params, x = jax.tree.map(lambda v: np.asarray(v, np.float64), (params, x))
    out = mlp(params.encoder, x)
    mean, log_var = out[:, :2], out[:, 2:]
    eps = jax.jit(jax.random.normal, static_argnums=1)(key, (7, 2))  # the library's draw
    z = mean + np.exp(log_var / 2) * np.asarray(eps, np.float64)
    decoded = mlp(params.decoder, z)
    if decoder == "gaussian":
        log_likelihood = -0.5 * ((x - decoded) ** 2).sum(1) - 2.5 * np.log(2 * np.pi)
    else:
        p = 1 / (1 + np.exp(-decoded))
        log_likelihood = (x * np.log(p) + (1 - x) * np.log(1 - p)).sum(1)
    kl = 0.5 * (mean**2 + np.exp(log_var) - 1 - log_var).sum(1)
    np.testing.assert_allclose(elbo, np.mean(log_likelihood - kl), rtol=1e-5)


def test_the_prior_sweep_is_figure_7_and_the_fields_are_settable():
    default = ensemble_plus.EnsemblePlusConfig()
    sweep = agents.ensemble_plus_prior_sweep()
    assert sweep[0] == dataclasses.replace(default, prior_scale=0.0)
    assert sweep[1:] == tuple(
        dataclasses.replace(default, prior_function=prior, prior_scale=scale)
        for prior in ("linear", "vae") for scale in (0.03, 0.1, 0.3, 1.0, 3.0))
    assert agents.get_agent("ensemble+").configs("prior-functions") == sweep
    assert (default.vae_steps, default.vae_decoder) == (10_000, "gaussian")
    config = agents.parse_overrides(
        agents.get_agent("ensemble+"),
        ["prior_function=vae", "vae_steps=50", "vae_decoder=bernoulli"])
    assert config == dataclasses.replace(default, prior_function="vae", vae_steps=50,
                                         vae_decoder="bernoulli")


@pytest.mark.parametrize(
    "field, value, message",
    [("prior_function", "gp", "prior_function must be one of 'environment', 'linear', 'vae', "
                              "got 'gp'"),
     ("vae_steps", 0, "vae_steps must be >= 1, got 0"),
     ("vae_decoder", "poisson", "vae_decoder must be one of 'gaussian', 'bernoulli', "
                                "got 'poisson'")],
)
def test_bad_prior_function_options_are_one_clear_error_line(field, value, message):
    with pytest.raises(ValueError) as error:
        ensemble_plus.EnsemblePlusConfig(**{field: value})
    assert str(error.value) == message
