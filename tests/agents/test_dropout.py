"""The MC dropout agent: masks, p = 0, weight decay, configs and sweep."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, evaluation, generative, leaderboard
from neural_testbed.agents import dropout

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SMALL = dropout.DropoutConfig(dropout_rate=0.3, num_steps=100)
SHAPES = base.Shapes.of(PROBLEM)


@pytest.fixture(scope="module")
def trained():
    env, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = dropout.make_dropout_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, env, data, prior, train(jax.random.key(0), data, prior), train


def test_zero_dropout_gives_the_same_network_for_every_index():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = dropout.make_dropout_agent(
        dropout.DropoutConfig(dropout_rate=0.0, dropout_input=True, num_steps=20), SHAPES)
    params = jax.jit(agent.train)(jax.random.key(0), data, prior)
    x = jax.random.normal(jax.random.key(1), (20, 2))
    first = agent.enn.apply(params, x, agent.enn.sample_index(jax.random.key(0)))
    for i in range(1, 6):
        np.testing.assert_array_equal(
            agent.enn.apply(params, x, agent.enn.sample_index(jax.random.key(i))), first)


def test_masks_drop_a_fraction_p_and_keep_the_mean():
    """Over 100 x 50 Bernoulli draws the dropped fraction is p within 4 binomial standard
    errors, and kept units are scaled by 1 / (1 - p) (inverted dropout)."""
    p, n = 0.3, 100
    params = [{"w": jnp.zeros((2, 50))}, {"w": jnp.zeros((50, 3))}]
    masks = dropout._draw_masks(jax.random.key(0), params, p, True, (n,))
    assert masks[0].shape == (n, 2) and masks[1].shape == (n, 50)
    hidden = np.asarray(masks[1])
    assert set(np.unique(hidden)) <= {0.0, np.float32(1 / (1 - p))}
    dropped = np.mean(hidden == 0)
    assert abs(dropped - p) < 4 * np.sqrt(p * (1 - p) / hidden.size), dropped
    assert dropout._draw_masks(jax.random.key(0), params, p, False, ())[0] is None


@pytest.mark.parametrize("num_inputs", [2, 40, 101])
def test_one_mask_for_every_input_is_the_same_network_as_that_mask_on_each_input(
        trained, num_inputs):
    """A [width] mask scales weight rows where they are the smaller (the evaluator's fast
    form: fan-out <= n, so every layer at 101 inputs, only the last at 2); the same mask
    given per input ([n, width]) scales activations. Both are one network: equal to
    float32 rounding (x * m) @ w vs x @ (m * w)."""
    _, _, _, _, params, _ = trained
    x = jax.random.normal(jax.random.key(3), (num_inputs, 2))
    one = dropout._draw_masks(jax.random.key(5), params, 0.3, True, ())
    per_input = [jnp.broadcast_to(m, (num_inputs, *m.shape)) for m in one]
    np.testing.assert_allclose(dropout._apply_with_masks(params, x, one),
                               dropout._apply_with_masks(params, x, per_input),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.01, 0.5])
def test_weight_decay_follows_gal_or_the_adaptive_formula(temperature):
    prior = base.PriorKnowledge(input_dim=3, num_classes=2, env_hidden=(50, 50),
                                temperature=temperature)
    gal = dropout.DropoutConfig(dropout_rate=0.2, length_scale=3.0, adaptive_weight_scale=False)
    np.testing.assert_allclose(dropout._weight_decay(gal, 40, prior), 3.0**2 * 0.8 / (2 * 40))
    adaptive = dataclasses.replace(gal, adaptive_weight_scale=True)
    np.testing.assert_allclose(dropout._weight_decay(adaptive, 40, prior),
                               3.0 * 3 * np.sqrt(temperature) / 40, rtol=1e-6)


@pytest.mark.slow
def test_trains_under_vmap_with_traced_temperature_and_evaluates():
    """As the runner does: a batch of problems trained with jit(vmap(train)), then evaluated."""
    group = [p for p in PAPER.values() if p.num_train == 10 and p.seed == 0]  # 3 temperatures
    loaded = [leaderboard.load_problem(p) for p in group]
    data = jax.tree.map(lambda *xs: jnp.stack(xs), *[d for _, d in loaded])
    prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50),
                                temperature=jnp.array([p.temperature for p in group]))
    agent = dropout.make_dropout_agent(SMALL, SHAPES)
    params = jax.jit(jax.vmap(agent.train))(jax.random.split(jax.random.key(0), 3), data, prior)
    assert params[0]["w"].shape == (3, 2, 50)
    evaluate = jax.jit(evaluation.make_evaluator(agent.enn, tau=10, num_classes=2, num_test=20,
                                         num_samples=50))
    one = jax.tree.map(lambda a: a[0], params)
    test = generative.sample_test_data(jax.random.key(2), loaded[0][0], 20, 10)
    result = evaluate(jax.random.key(1), one, test)
    assert np.isfinite(result.kl) and bool(result.logits_valid)


def test_sweep_is_the_papers_grid():
    sweep = agents.dropout_sweep()
    assert len(sweep) == len(set(sweep)) == 33
    assert {(c.dropout_rate, c.dropout_input) for c in sweep} >= {
        (round(0.1 * i, 1), flag) for i in range(10) for flag in (True, False)}
    assert {(c.adaptive_weight_scale, c.length_scale) for c in sweep} >= {
        (a, l) for a in (True, False) for l in (0.01, 0.1, 0.3, 1.0, 3.0, 10.0)}
    assert {c.hidden for c in sweep} == {(50, 50), (100, 100), (50, 50, 50)}


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("dropout")
    assert spec.default == dropout.DropoutConfig()
    config = agents.parse_overrides(spec, ["dropout_rate=0.2", "dropout_input=true"])
    assert config == dataclasses.replace(spec.default, dropout_rate=0.2, dropout_input=True)


@pytest.mark.parametrize(
    "field, value, message",
    [("dropout_rate", 1.0, r"dropout_rate must be in \[0, 1\), got 1.0"),
     ("dropout_rate", -0.1, r"dropout_rate must be in \[0, 1\), got -0.1"),
     ("length_scale", 0.0, "length_scale must be > 0, got 0.0"),
     ("learning_rate", -1.0, "learning_rate must be > 0"),
     ("num_steps", 0, "num_steps must be >= 1, got 0"),
     ("batch_size", 0, "batch_size must be >= 1, got 0"),
     ("hidden", (), "hidden must be one or more widths")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        dropout.DropoutConfig(**{field: value})
