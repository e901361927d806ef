"""The random_forest agent: scikit-learn's forest through the host-agent bridge."""

import functools

import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard

pytest.importorskip("sklearn", reason="the random_forest agent needs scikit-learn")

PRIOR = base.PriorKnowledge(input_dim=2, num_classes=3, env_hidden=(50, 50), temperature=0.1)
SHAPES = base.Shapes(input_dim=2, num_outputs=3)


def _data(labels):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(labels), 2)).astype(np.float32)
    return base.Data(x=x, y=np.asarray(labels, np.int32))


def test_probabilities_are_truncated_and_absent_classes_get_the_floor():
    agent = agents.make_random_forest_agent(agents.RandomForestConfig(num_trees=10), SHAPES)
    forest = agent.train(0, _data([0] * 20 + [1] * 20), PRIOR)  # class 2 never seen
    x = np.random.default_rng(1).normal(size=(1, 30, 2))
    probs = np.exp(agent.sample(forest, x, np.zeros(1)))
    assert probs.shape == (1, 30, 3)
    assert np.all(probs >= 0.01 - 1e-9) and np.all(probs <= 0.99 + 1e-9)
    np.testing.assert_allclose(probs[..., 2], 0.01)


def test_another_seed_grows_another_forest():
    """(The same seed the same forest: test_contract.py.)"""
    agent = agents.make_random_forest_agent(agents.RandomForestConfig(num_trees=5), SHAPES)
    data = _data(np.random.default_rng(2).integers(0, 3, size=40))
    x = np.random.default_rng(3).normal(size=(1, 50, 2))
    sample = lambda seed: agent.sample(agent.train(seed, data, PRIOR), x, np.zeros(1))
    assert not np.array_equal(sample(7), sample(8))


def test_sweep_is_the_papers_grid():
    sweep = agents.random_forest_sweep()
    assert {(c.num_trees, c.criterion) for c in sweep} == {
        (n, c) for n in (10, 100, 1000) for c in ("gini", "entropy")}


@pytest.mark.slow
def test_runs_through_the_runner():
    problems = list(leaderboard.get_sweep("smoke").values())[:2]
    config = agents.RandomForestConfig(num_trees=10)
    build = functools.partial(agents.make_random_forest_agent, config)
    rows = leaderboard.run_agent(build, problems, "random_forest", config=config, progress=False)
    assert all(r.status == "ok" and np.isfinite(r.kl) and r.train_seconds > 0 for r in rows)
