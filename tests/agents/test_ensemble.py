"""The ensemble agent: determinism of members, learning, configs and sweep."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import ensemble

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SMALL = ensemble.EnsembleConfig(num_ensemble=4, num_steps=100)
SHAPES = base.Shapes.of(PROBLEM)


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = ensemble.make_ensemble_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def test_another_seed_draws_other_members(trained):
    """(The same seed the same members: test_contract.py.)"""
    agent, data, prior, state, train = trained
    assert jax.tree.leaves(state.params)[0].shape[0] == SMALL.num_ensemble
    other = train(jax.random.key(1), data, prior)
    x = jax.random.normal(jax.random.key(2), (5, 2))
    for index in range(SMALL.num_ensemble):
        assert not np.allclose(agent.enn.apply(state, x, index), agent.enn.apply(other, x, index))


def test_different_indices_are_different_members(trained):
    agent, _, _, state, _ = trained
    x = jax.random.normal(jax.random.key(3), (50, 2))
    logits = [np.asarray(agent.enn.apply(state, x, i)) for i in range(SMALL.num_ensemble)]
    for i in range(len(logits)):
        for j in range(i):
            assert np.abs(logits[i] - logits[j]).max() > 1e-2, (i, j)


def test_sample_index_is_uniform_over_members():
    agent = ensemble.make_ensemble_agent(SMALL, SHAPES)
    assert agent.enn.num_indices == SMALL.num_ensemble
    n = 4000
    indices = np.asarray(jax.vmap(agent.enn.sample_index)(jax.random.split(jax.random.key(4), n)))
    assert indices.dtype == np.int32 and indices.min() >= 0 and indices.max() < SMALL.num_ensemble
    # Each count is Binomial(n, 1/4): within 4 standard errors of n/4.
    p = 1 / SMALL.num_ensemble
    counts = np.bincount(indices, minlength=SMALL.num_ensemble)
    assert np.all(np.abs(counts - n * p) < 4 * np.sqrt(n * p * (1 - p))), counts


def test_every_member_fits_low_noise_training_data():
    problem = next(p for p in PAPER.values()
                   if p.temperature == 0.01 and p.num_train == 10 and p.seed == 1)
    _, data = leaderboard.load_problem(problem)
    agent = ensemble.make_ensemble_agent(dataclasses.replace(SMALL, num_steps=300), SHAPES)
    state = jax.jit(agent.train)(jax.random.key(5), data, leaderboard.prior_knowledge(problem))
    for index in range(SMALL.num_ensemble):
        predicted = np.argmax(agent.enn.apply(state, data.x, index), axis=-1)
        assert np.mean(predicted == np.asarray(data.y)) >= 0.9, index


@pytest.mark.slow
def test_runs_on_a_sweep_through_the_runner():
    """vmap over problems of different temperatures; each distinct member evaluated once."""
    problems = [dataclasses.replace(p, taus=(1,), num_test=20, num_samples=50)
                for p in PAPER.values() if p.num_train == 3 and p.seed == 0]
    config = dataclasses.replace(SMALL, num_steps=20)
    build = functools.partial(ensemble.make_ensemble_agent, config)
    rows = leaderboard.run_agent(build, problems, "ensemble", progress=False)
    assert len(rows) == len(problems) == 3
    assert all(r.status == "ok" and np.isfinite(r.kl) for r in rows), rows


def test_registered_with_its_default_and_sweep():
    spec = agents.get_agent("ensemble")
    assert spec.default == ensemble.EnsembleConfig() and spec.sweep is ensemble.ensemble_sweep
    config = agents.parse_overrides(spec, ["num_ensemble=10", "l2_weight_decay=0.1"])
    assert config == ensemble.EnsembleConfig(num_ensemble=10, l2_weight_decay=0.1)


def test_defaults_are_the_reference_ones():
    config = ensemble.EnsembleConfig()
    assert (config.num_ensemble, config.l2_weight_decay, config.num_steps, config.hidden,
            config.batch_size, config.learning_rate, config.adaptive_weight_scale) == (
        100, 1.0, 1000, (50, 50), 100, 1e-3, True)


def test_sweep_is_the_papers_grid():
    sweep = ensemble.ensemble_sweep()
    assert len(sweep) == len(set(sweep)) == 18
    assert {c.num_ensemble for c in sweep} == {1, 3, 10, 30, 100}
    size_30 = [c for c in sweep if c.num_ensemble == 30]
    assert {(c.adaptive_weight_scale, c.l2_weight_decay) for c in size_30} == {
        (a, lam) for a in (True, False) for lam in (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        sweep[0].num_ensemble = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "field, value, message",
    [("num_ensemble", 0, "num_ensemble must be an integer >= 1, got 0"),
     ("num_ensemble", -3, "num_ensemble must be an integer >= 1, got -3"),
     ("num_ensemble", 2.5, "num_ensemble must be an integer >= 1, got 2.5"),
     ("l2_weight_decay", -1.0, "l2_weight_decay must be >= 0"),
     ("num_steps", 0, "num_steps must be >= 1"),
     ("hidden", (50, 0), "hidden must be one or more widths >= 1")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        ensemble.EnsembleConfig(**{field: value})
