"""The trivial baselines: the uniform agent's KL against its closed form, and the
average_class_probs agent's predictive as the reference computes it."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, generative, leaderboard


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.parametrize("problem_id", ["classification/64", "classification_2d/97"])
def test_the_uniform_agents_kl_is_its_closed_form(problem_id):
    """Equal probabilities: d_KL^tau = tau (log K - E_x H(p(. | x))), whatever the inputs'
    correlation (the joint KL of a product of marginals sums the marginals' terms). The
    expectation over N(0, I) inputs is computed from 400,000 inputs (its Monte Carlo
    error, below 1e-3 of a standard error here, is added to the tolerance); the
    estimate must be within 4 of its standard errors."""
    sweeps = ("classification", "paper")
    problem = next(leaderboard.get_sweep(s)[problem_id] for s in sweeps
                   if problem_id in leaderboard.get_sweep(s))
    spec = agents.get_agent("uniform")
    rows = leaderboard.run_agent(functools.partial(spec.make, spec.default), [problem],
                                 "uniform", progress=False)
    env = problem.instance().env
    x = jax.random.normal(jax.random.key(7), (400_000, problem.input_dim))
    probs = jax.nn.softmax(generative.environment_logits(env, x))
    entropy = -jnp.sum(probs * jnp.log(jnp.clip(probs, 1e-30)), axis=-1)
    per_input = np.log(problem.num_classes) - float(entropy.mean())
    entropy_se = float(entropy.std()) / np.sqrt(x.shape[0])
    assert sorted(r.tau for r in rows) == sorted(problem.taus)
    for row in rows:
        assert row.status == "ok", row.error
        closed_form = row.tau * per_input
        assert abs(row.kl - closed_form) <= 4 * row.kl_stderr + 4 * row.tau * entropy_se, (
            row.tau, row.kl, row.kl_stderr, closed_form)


def test_average_class_probs_predicts_the_softmax_of_the_frequencies():
    """The reference's rule: the frequencies are the logits. Padding rows (mask False)
    do not count."""
    agent = agents.get_agent("average_class_probs").make(
        agents.get_agent("average_class_probs").default, base.Shapes(2, 3))
    y = jnp.array([0, 0, 0, 1, 2, 2, 2, 2, 2, 2])
    data = base.Data(jnp.zeros((10, 2)), y)
    logits = agent.enn.apply(agent.train(jax.random.key(0), data, None), jnp.zeros((4, 2)), 0)
    np.testing.assert_allclose(logits, np.tile([0.3, 0.1, 0.6], (4, 1)), rtol=1e-6)
    padded = base.Data(jnp.zeros((12, 2)), jnp.concatenate([y, jnp.array([1, 1])]),
                       mask=jnp.arange(12) < 10)
    np.testing.assert_allclose(agent.train(jax.random.key(0), padded, None), [0.3, 0.1, 0.6],
                               rtol=1e-6)
    assert dataclasses.fields(agents.get_agent("uniform").default) == ()
