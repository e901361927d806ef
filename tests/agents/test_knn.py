"""The knn agent: known answers on hand-built data."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.run import checks, programs

PRIOR = base.PriorKnowledge(input_dim=2, num_classes=3, env_hidden=(50, 50), temperature=0.1)
DATA = base.Data(x=jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [6.0, 5.0]]),
                 y=jnp.array([0, 0, 1, 2, 2], jnp.int32))


def _probs(config, x, data=DATA, prior=PRIOR):
    """Train, sample an index, apply and softmax: one jitted program rather than each
    primitive compiled on its own."""
    agent = agents.make_knn_agent(config, base.Shapes(prior.input_dim, prior.num_classes))

    @jax.jit
    def probs(data, x):
        state = agent.train(jax.random.key(0), data, prior)
        return jax.nn.softmax(agent.enn.apply(state, x, agent.enn.sample_index(
            jax.random.key(1))))

    return np.asarray(probs(data, x))


def _truncated(p):
    p = np.clip(np.asarray(p, np.float64), 0.01, 0.99)
    return p / p.sum(-1, keepdims=True)


def test_k_equal_to_t_with_uniform_weights_predicts_the_training_class_frequencies():
    x = np.random.default_rng(3).normal(size=(7, 2)).astype(np.float32) * 4
    probs = _probs(agents.KnnConfig(num_neighbors=5), x)
    np.testing.assert_allclose(probs, np.tile(_truncated([2 / 5, 1 / 5, 2 / 5]), (7, 1)),
                               rtol=1e-5)


def test_k_larger_than_t_uses_the_whole_training_set():
    x = jnp.array([[0.2, 0.1]])
    np.testing.assert_allclose(_probs(agents.KnnConfig(num_neighbors=100), x),
                               _probs(agents.KnnConfig(num_neighbors=5), x), rtol=1e-6)


def test_nearest_neighbours_vote_and_probabilities_are_truncated():
    x = jnp.array([[0.1, 0.0], [5.4, 5.1]])
    probs = _probs(agents.KnnConfig(num_neighbors=1), x)
    np.testing.assert_allclose(probs, [_truncated([1, 0, 0]), _truncated([0, 0, 1])], rtol=1e-5)
    assert probs.min() > 0  # never probability 0


def test_distance_weights_favour_the_closer_neighbour():
    """x at distance 0.25 from a class-0 point and 0.75 from a class-1 point: votes 4 : 4/3."""
    data = base.Data(x=jnp.array([[0.0, 0.0], [1.0, 0.0]]), y=jnp.array([0, 1], jnp.int32))
    prior = PRIOR.replace(num_classes=2)
    x = jnp.array([[0.25, 0.0]])
    probs = _probs(agents.KnnConfig(num_neighbors=2, weighting="distance"), x, data, prior)
    np.testing.assert_allclose(probs, [[0.75, 0.25]], rtol=1e-5)
    exact = _probs(agents.KnnConfig(num_neighbors=2, weighting="distance"),
                   jnp.array([[1.0, 0.0]]), data, prior)
    np.testing.assert_allclose(exact, [_truncated([0, 1])], rtol=1e-5)  # a training point


def test_a_class_absent_from_the_training_data_gets_the_floor():
    probs = _probs(agents.KnnConfig(num_neighbors=2), jnp.array([[0.0, 0.2]]),
                   DATA._replace(y=np.zeros(5, np.int32)))
    np.testing.assert_allclose(probs, [_truncated([1, 0, 0])], rtol=1e-5)


def test_many_inputs_are_evaluated_in_blocks_with_the_same_answer():
    x = np.random.default_rng(5).normal(size=(10_000, 2)).astype(np.float32) * 3
    config = agents.KnnConfig(num_neighbors=3)
    np.testing.assert_allclose(_probs(config, x)[-50:], _probs(config, x[-50:]), rtol=1e-6)


@pytest.mark.parametrize("bad, message", [({"num_neighbors": 0}, "num_neighbors must be >= 1"),
                                          ({"weighting": "gauss"}, "weighting")])
def test_bad_configs_are_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        agents.KnnConfig(**bad)


def test_sweep_is_the_papers_grid():
    sweep = agents.knn_sweep()
    assert len(sweep) == len(set(sweep)) == 12
    assert {c.num_neighbors for c in sweep} == {1, 5, 10, 30, 50, 100}


@pytest.mark.slow
def test_runs_through_the_runner_with_the_product_of_marginals():
    """One model: its d_KL^100 is finite and at least its d_KL^1 (it cannot model joints)."""
    problems = [p for p in leaderboard.get_sweep("smoke").values()][:2]
    build = functools.partial(agents.make_knn_agent, agents.KnnConfig())
    rows = leaderboard.run_agent(build, problems, "knn", progress=False)
    assert all(r.status == "ok" and r.num_clipped == 0 for r in rows)
    by = {(r.problem_id, r.tau): r.kl for r in rows}
    for p in problems:
        assert by[(p.problem_id, 100)] >= by[(p.problem_id, 1)]


def test_blocks_keep_the_largest_current_problem_within_memory():
    """T = 100,000 pairs of d = 100 inputs: the [block, T, d] differences are bounded
    (2^25 floats), where 4096 test inputs at a time needed 164 GB."""
    problem = leaderboard.get_sweep("classification")["classification/165"]
    assert (problem.num_train, problem.input_dim) == (100_000, 100)
    config = agents.KnnConfig()
    runner = programs.UnitRunner(agents.make_knn_agent(config, base.Shapes.of(problem)),
                                 "knn", (config,), problem, "auto", 0)
    size, program = checks.largest_array(runner, problem)
    assert size <= 2**25 * 4 + 2**30, (size, program)  # a block, or the evaluator's own arrays
