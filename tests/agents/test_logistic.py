"""The logistic agent: a linear model trained as the mlp is."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, networks
from neural_testbed.agents import logistic

PRIOR = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50), temperature=1.0)


def _xor(key, n):
    """XOR: clusters at (+-1, +-1) labelled 1 where x1 x2 > 0, in mirrored quadruples (a
    point q near (1, 1), -q, and its reflections in each axis with label 0), so the data
    are symmetric under x -> -x with the same labels and balanced: the logistic loss is
    convex with the same value at w and -w, so its minimum is w = 0, b = 0 (p = 1/2
    everywhere), whatever the noise draw."""
    q = 1.0 + 0.1 * jax.random.normal(key, (n // 4, 2))
    flip = jnp.array([1.0, -1.0])
    x = jnp.concatenate([q, -q, q * flip, -q * flip])
    y = jnp.repeat(jnp.array([1, 1, 0, 0], jnp.int32), n // 4)
    return base.Data(x, y)


def _probs(agent, state, x):
    return jax.nn.softmax(agent.enn.apply(state, x, agent.enn.sample_index(jax.random.key(0))))


def test_it_is_one_linear_layer_that_cannot_learn_xor_where_the_mlp_can():
    """The linear model's probabilities stay near 1/2 on XOR while the mlp's accuracy is
    near 1: the hidden layers are what logistic lacks. (0.1 leaves room for minibatch
    Adam's last steps around the minimum, and is far from the mlp's 0 or 1.)"""
    data = _xor(jax.random.key(0), 1000)
    test = _xor(jax.random.key(1), 500)
    shapes = base.Shapes(2, 2)
    agent = logistic.make_logistic_agent(
        logistic.LogisticConfig(l2_weight_decay=0.01, num_steps=3000, learning_rate=1e-2), shapes)
    state = agent.train(jax.random.key(2), data, PRIOR)
    assert [tuple(layer["w"].shape) for layer in state] == [(2, 2)]
    assert float(jnp.abs(_probs(agent, state, test.x)[:, 1] - 0.5).max()) < 0.1

    mlp_agent = agents.get_agent("mlp").make(agents.MLPConfig(l2_weight_decay=0.01), shapes)
    mlp_state = mlp_agent.train(jax.random.key(2), data, PRIOR)
    accuracy = jnp.mean(_probs(mlp_agent, mlp_state, test.x).argmax(-1) == test.y)
    assert float(accuracy) > 0.95


def test_it_recovers_a_logistic_model():
    """Labels from p(y = 1 | x) = sigmoid(3 x1 - 2 x2 + 0.5) at 4,000 inputs: the fit's
    weights (the logit difference's) are the truth's within 0.3. Their standard error at
    this T is about 0.1 (the Fisher information of 4,000 logistic pairs at these weights),
    so 0.3 is three of them; the L2 decay at lambda = 1e-4 moves them by far less."""
    key_x, key_y = jax.random.split(jax.random.key(3))
    x = jax.random.normal(key_x, (4000, 2))
    truth = np.array([3.0, -2.0])
    logits = x @ truth + 0.5
    y = jax.random.bernoulli(key_y, jax.nn.sigmoid(logits)).astype(jnp.int32)
    agent = logistic.make_logistic_agent(
        logistic.LogisticConfig(l2_weight_decay=1e-4, num_steps=5000, learning_rate=1e-2),
        base.Shapes(2, 2))
    (layer,) = agent.train(jax.random.key(4), base.Data(x, y), PRIOR)
    weights = np.asarray(layer["w"][:, 1] - layer["w"][:, 0])
    bias = float(layer["b"][1] - layer["b"][0])
    np.testing.assert_allclose(weights, truth, atol=0.3)
    assert bias == pytest.approx(0.5, abs=0.3)


def test_the_mlp_without_hidden_layers_is_the_same_agent():
    config = logistic.LogisticConfig(num_steps=50)
    data = _xor(jax.random.key(5), 64)
    shapes = base.Shapes(2, 2)
    ours = logistic.make_logistic_agent(config, shapes).train(jax.random.key(6), data, PRIOR)
    mlp = agents.make_mlp_agent(agents.MLPConfig(hidden=(), num_steps=50), shapes).train(
        jax.random.key(6), data, PRIOR)
    jax.tree.map(np.testing.assert_array_equal, ours, mlp)
    assert isinstance(ours[0]["w"], jax.Array) and networks.apply_mlp(ours, data.x).shape == (64, 2)


def test_sweep_is_the_references_grid_and_bad_configs_are_one_line():
    sweep = logistic.logistic_sweep()
    assert len(set(sweep)) == 14
    assert sorted({c.l2_weight_decay for c in sweep}) == [1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100]
    assert agents.get_agent("logistic").default == logistic.LogisticConfig()
    with pytest.raises(ValueError, match="l2_weight_decay must be >= 0, got -1"):
        logistic.LogisticConfig(l2_weight_decay=-1.0)
