"""The random-MLP environment: determinism and the stated distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import generative


def _flat(env):
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(env.params)])


def test_same_seed_same_environment_and_data():
    env_a = generative.sample_environment(jax.random.key(3), temperature=0.1)
    env_b = generative.sample_environment(jax.random.key(3), temperature=0.1)
    np.testing.assert_array_equal(_flat(env_a), _flat(env_b))
    data_a = generative.sample_train_data(jax.random.key(4), env_a, 10)
    data_b = generative.sample_train_data(jax.random.key(4), env_b, 10)
    np.testing.assert_array_equal(data_a.x, data_b.x)
    np.testing.assert_array_equal(data_a.y, data_b.y)


def test_different_seeds_different_environments():
    env_a = generative.sample_environment(jax.random.key(3), temperature=0.1)
    env_b = generative.sample_environment(jax.random.key(4), temperature=0.1)
    assert not np.allclose(_flat(env_a), _flat(env_b))


@pytest.mark.parametrize("input_dim, num_classes", [(2, 2), (10, 5)])
def test_shapes_for_any_dimension_and_classes(input_dim, num_classes):
    env = generative.sample_environment(jax.random.key(0), 0.5, input_dim, num_classes)
    data = generative.sample_train_data(jax.random.key(1), env, 7)
    assert data.x.shape == (7, input_dim) and data.y.shape == (7,)
    assert int(data.y.max()) < num_classes
    test = generative.sample_test_data(jax.random.key(2), env, num_test=5, tau=3)
    assert test.x.shape == (5, 3, input_dim) and test.y.shape == (5, 3)
    assert test.log_likelihood.shape == (5,)


def test_first_layer_bias_has_variance_one_over_d():
    """Biases ~ N(0, 1/d). Over n = 40 environments x 50 units, the sample variance has
    standard error var * sqrt(2 / (n - 1)); allow 4 of them. Other biases are zero."""
    input_dim = 4
    envs = [generative.sample_environment(jax.random.key(s), 1.0, input_dim) for s in range(40)]
    biases = np.concatenate([np.asarray(e.params[0]["b"]) for e in envs])
    expected = 1 / input_dim
    se = expected * np.sqrt(2 / (biases.size - 1))
    assert abs(biases.var() - expected) < 4 * se
    assert abs(biases.mean()) < 4 * np.sqrt(expected / biases.size)
    assert all(np.all(np.asarray(layer["b"]) == 0) for e in envs for layer in e.params[1:])


def test_weights_are_fan_in_scaled_truncated_normals():
    """Truncated at 2 stddev of 1/sqrt(fan_in): |w| <= 2/sqrt(fan_in), and the standard deviation
    is 0.8796/sqrt(fan_in) (the truncated normal's); 4 standard errors of the sample std."""
    env = generative.sample_environment(jax.random.key(0), 1.0)
    w = np.asarray(env.params[1]["w"])  # 50 x 50, fan_in 50
    assert np.abs(w).max() <= 2 / np.sqrt(50) + 1e-6
    expected = 0.8796 / np.sqrt(50)
    assert abs(w.std() - expected) < 4 * expected / np.sqrt(2 * w.size)


def test_label_frequencies_match_the_softmax_probabilities():
    """For fixed inputs, the count of class-1 labels has mean sum p_i and variance
    sum p_i (1 - p_i); allow 4 standard deviations."""
    env = generative.sample_environment(jax.random.key(1), temperature=0.5)
    test = generative.sample_test_data(jax.random.key(2), env, num_test=20000, tau=1)
    x = test.x[:, 0]
    p1 = np.asarray(jax.nn.softmax(generative.environment_logits(env, x))[:, 1], np.float64)
    count = int(np.asarray(test.y).sum())
    assert abs(count - p1.sum()) < 4 * np.sqrt(np.sum(p1 * (1 - p1)))


def test_test_log_likelihood_is_the_exact_label_log_probability():
    env = generative.sample_environment(jax.random.key(1), temperature=0.1)
    test = generative.sample_test_data(jax.random.key(2), env, num_test=4, tau=5)
    log_p = jax.nn.log_softmax(generative.environment_logits(env, test.x))
    expected = jnp.take_along_axis(log_p, test.y[..., None], -1)[..., 0].sum(-1)
    np.testing.assert_allclose(test.log_likelihood, expected, rtol=1e-6, atol=1e-6)  # float32 sums


def test_temperature_sharpens_the_labels():
    env_cold = generative.sample_environment(jax.random.key(1), temperature=0.01)
    env_warm = env_cold._replace(temperature=10.0)
    x = jax.random.normal(jax.random.key(0), (1000, 2))
    conf = lambda env: jnp.max(jax.nn.softmax(generative.environment_logits(env, x)), -1).mean()
    assert conf(env_cold) > 0.95 > 0.6 > conf(env_warm)


@pytest.mark.parametrize("temperature", [0.0, -0.1])
def test_non_positive_temperature_is_rejected(temperature):
    with pytest.raises(ValueError, match=f"temperature must be > 0, got {temperature}"):
        generative.sample_environment(jax.random.key(0), temperature)


def test_bad_sizes_are_rejected():
    env = generative.sample_environment(jax.random.key(0), 0.1)
    with pytest.raises(ValueError, match=r"num_train \(T\) must be an integer >= 1, got 0"):
        generative.sample_train_data(jax.random.key(0), env, 0)
    with pytest.raises(ValueError, match="tau must be an integer >= 1, got 0"):
        generative.sample_test_data(jax.random.key(0), env, 10, 0)
