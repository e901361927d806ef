"""hmc: the posterior of the environment's own model under its own prior."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy import special

from neural_testbed import base, networks
from neural_testbed.agents import hmc

pytest.importorskip("blackjax")

# A linear environment (no hidden layer) of one input and two classes: 4 parameters, so
# that importance sampling from the prior gives its posterior predictive to high accuracy.
PRIOR = base.PriorKnowledge(input_dim=1, num_classes=2, env_hidden=(), temperature=1.0)


def test_the_sampler_variables_map_to_the_environments_prior():
    """Standard normals through weights_of are the environment's truncated normals: the
    variance of a standard normal truncated to [-2, 2] is 1 - 4 phi(2) / (Phi(2) - Phi(-2))
    (0.774); 200,000 draws estimate it with a standard error of about 0.0016 (the sample
    variance's, sqrt((mu4 - s^4) / n) with this law's fourth moment), so 5e-3 is three of
    them. The first-layer bias is N(0, 1/d)."""
    prior = base.PriorKnowledge(input_dim=4, num_classes=2, env_hidden=(), temperature=1.0)
    z = {"w": [jax.random.normal(jax.random.key(0), (200_000, 4, 2))[..., 0, 0]],
         "b": jax.random.normal(jax.random.key(1), (200_000, 2))}
    params = jax.vmap(lambda w, b: hmc.weights_of({"w": [w.reshape(1, 1) * jnp.ones((4, 2))],
                                                   "b": b}, prior))(z["w"][0], z["b"])
    t = np.asarray(params[0]["w"][:, 0, 0]) * 2.0  # fan_in 4: w = t / 2
    phi2 = np.exp(-2.0) / np.sqrt(2 * np.pi)
    truth = 1 - 4 * phi2 / float(special.ndtr(2.0) - special.ndtr(-2.0))
    assert np.abs(t).max() <= 2.0
    assert np.var(t) == pytest.approx(truth, abs=5e-3)
    assert np.var(np.asarray(params[0]["b"])) == pytest.approx(1 / 4, abs=5e-3)


def _data():
    x = jnp.array([[-1.5], [-0.5], [0.2], [0.8], [1.6]])
    return base.Data(x, jnp.array([0, 1, 0, 1, 1], jnp.int32))


def _importance_sampled(x_test, data, num=400_000):
    """p(y = 1 | x, data) by self-normalised importance sampling from the environment's own
    prior draws (networks.init_mlp, as the environment draws its network), and its
    delta-method standard error."""
    def draw(key):
        return networks.init_mlp(key, 1, (2,), first_bias_stddev=1.0)
    params = jax.vmap(draw)(jax.random.split(jax.random.key(7), num))
    logits = jax.vmap(lambda p: networks.apply_mlp(p, data.x))(params)
    log_w = jnp.take_along_axis(jax.nn.log_softmax(logits), data.y[None, :, None], -1).sum((1, 2))
    w = np.asarray(jax.nn.softmax(log_w), np.float64)
    p = np.asarray(jax.vmap(lambda q: jax.nn.softmax(networks.apply_mlp(q, x_test))[:, 1])(params),
                   np.float64)  # [draws, inputs]
    mean = w @ p
    stderr = np.sqrt((w[:, None] ** 2 * (p - mean) ** 2).sum(0))
    return mean, stderr


@pytest.mark.slow
def test_the_posterior_predictive_matches_importance_sampling_from_the_prior():
    """The known answer: on 5 pairs of a 4-parameter linear environment, the chains'
    predictive probability at 5 inputs equals importance sampling's within 4 combined
    standard errors (importance sampling's delta-method error, and the chains' spread of
    the probability over the square root of their effective sample size); the chains
    pass the convergence rules."""
    config = hmc.HMCConfig(num_warmup_steps=300, num_sampling_steps=1000, thinning=2)
    agent = hmc.make_hmc_agent(config, base.Shapes(1, 2))
    data = _data()
    state = jax.jit(agent.train)(jax.random.key(3), data, PRIOR)
    assert bool(hmc.converged(state, config)), state["diagnostics"]
    x_test = jnp.linspace(-2.5, 2.5, 5)[:, None]
    probs = np.asarray(jax.vmap(lambda i: jax.nn.softmax(agent.enn.apply(state, x_test, i))[:, 1])(
        jnp.arange(agent.enn.num_indices)), np.float64)
    truth, truth_se = _importance_sampled(x_test, data)
    chains_se = probs.std(0) / np.sqrt(float(state["diagnostics"]["ess"]))
    np.testing.assert_array_less(np.abs(probs.mean(0) - truth),
                                 4 * np.sqrt(truth_se ** 2 + chains_se ** 2))
    # Not the prior: the data moved the prediction (p = 1/2 at every input a priori).
    assert np.abs(truth - 0.5).max() > 0.1


def test_bad_configs_are_one_line():
    with pytest.raises(ValueError, match="num_chains must be >= 2"):
        hmc.HMCConfig(num_chains=1)
    with pytest.raises(ValueError, match=r"target_acceptance must be in \(0, 1\), got 1.5"):
        hmc.HMCConfig(target_acceptance=1.5)
    with pytest.raises(ValueError, match=r"thinning must be at most num_sampling_steps \(3\)"):
        hmc.HMCConfig(num_sampling_steps=3, thinning=4)
