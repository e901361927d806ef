"""Padded training sets: one compiled program for every T of a sweep, the same numbers.

That an agent declared paddable predicts the same on padded data as on its pairs
alone is its contract, checked for every agent in tests/agents/test_contract.py.
"""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import registry
from neural_testbed.leaderboard import store
from neural_testbed.run import RunOptions, plan_units, run_sweep

PAPER = leaderboard.get_sweep("paper")
# Temperature 0.1, seed 0, T = 1, 10 and 100.
PIDS = ["classification_2d/70", "classification_2d/90", "classification_2d/110"]
SHAPES = base.Shapes.of(PAPER[PIDS[0]])


def _small(pids, taus=(1,), num_test=100, num_samples=50):
    return [dataclasses.replace(PAPER[p], taus=taus, num_test=num_test, num_samples=num_samples)
            for p in pids]


def _iris(num_trains):
    return [p for p in leaderboard.get_sweep("real").values()
            if p.dataset == "iris" and p.seed == 0 and p.num_train in num_trains]


@pytest.mark.parametrize("problems", [_small(PIDS), _iris((1, 10, 100))],
                         ids=["mlp_classification", "real_classification"])
def test_a_padded_build_draws_each_problems_own_pairs_first(problems):
    """The nesting that padding relies on: built with the group's largest T, each
    problem's first T rows are exactly its own training set, and its environment
    (or test split) is unchanged."""
    largest = max(p.num_train for p in problems)
    assert len({p.padding_group for p in problems}) == 1
    for p in problems:
        padded = base.build_instance(p, dataclasses.replace(p, num_train=largest))
        plain = p.instance()
        assert padded.data.x.shape[0] == largest
        np.testing.assert_array_equal(padded.data.x[:p.num_train], plain.data.x)
        np.testing.assert_array_equal(padded.data.y[:p.num_train], plain.data.y)
        for a, b in zip(jax.tree.leaves(padded.env), jax.tree.leaves(plain.env)):
            np.testing.assert_array_equal(a, b)


def _recording(make, config):
    """``shapes -> agent`` of ``make(config, shapes)``, recording the rows and whether a
    mask came with them at each trace of ``train``."""
    seen = []

    def build(shapes):
        agent = make(config, shapes)

        def train(key, data, prior):
            seen.append((data.x.shape[0], data.mask is not None))
            return agent.train(key, data, prior)

        return agent._replace(train=train)

    return build, seen


def _without_padding(make):
    """``make``, its agents declaring that they take no padding."""
    return lambda config, shapes: make(config, shapes)._replace(accepts_padding=False)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_padding_changes_no_number_and_trains_every_T_with_one_program():
    config = agents.MLPConfig(num_steps=50)
    assert agents.make_mlp_agent(config, SHAPES).accepts_padding
    problems = _small(PIDS)
    padded_agent, padded_traces = _recording(agents.make_mlp_agent, config)
    plain_agent, plain_traces = _recording(_without_padding(agents.make_mlp_agent), config)
    padded = leaderboard.run_agent(padded_agent, problems, "mlp", progress=False)
    plain = leaderboard.run_agent(plain_agent, problems, "mlp", progress=False)
    # One trace on 100 rows with a mask, against one per T on exactly T rows.
    assert padded_traces == [(100, True)]
    assert plain_traces == [(1, False), (10, False), (100, False)]
    # Later problems reuse every program: build, train and evaluation.
    assert padded[0].compile_seconds > 0
    assert all(r.compile_seconds == 0 for r in padded[1:])
    for a, b in zip(padded, plain):
        assert (a.problem_id, a.num_train, a.status) == (b.problem_id, b.num_train, "ok")
        # Same draws (minibatch indices from the first T rows), same arithmetic: equal up
        # to float32 rounding of T as a traced value instead of a constant.
        np.testing.assert_allclose(a.kl, b.kl, rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_host_agent_trains_on_its_own_pairs_and_evaluates_every_T_with_one_program():
    """A host agent gets each problem's own T rows; the evaluation programs, which hold
    its callback and so are compiled in every process, are compiled once for all T."""
    forest = agents.make_random_forest_agent(agents.RandomForestConfig(num_trees=5), SHAPES)
    seen = []

    def train(seed, data, prior):
        seen.append((data.x.shape[0], data.mask))
        return forest.train(seed, data, prior)

    agent = forest._replace(train=train)
    problems = _small(PIDS)
    together = leaderboard.run_agent(lambda shapes: agent, problems, "random_forest",
                                     progress=False)
    alone = [row for p in problems for row in leaderboard.run_agent(
        lambda shapes: agent, [p], "random_forest", progress=False)]
    assert seen == [(1, None), (10, None), (100, None)] * 2
    assert together[0].compile_seconds > 0
    assert all(r.compile_seconds == 0 for r in together[1:])
    for a, b in zip(together, alone):
        assert (a.problem_id, a.status) == (b.problem_id, "ok")
        assert (a.kl, a.kl_stderr, a.accuracy, a.ece) == (b.kl, b.kl_stderr, b.accuracy, b.ece)


def test_ensemble_plus_configs_that_draw_per_row_do_not_accept_padding():
    """A bootstrap weight per (member, row) or a VAE fitted to every row would change
    with the padding; those configs compile per T instead."""
    make, config = agents.make_ensemble_plus_agent, agents.EnsemblePlusConfig
    assert make(config(), SHAPES).accepts_padding
    assert not make(config(bootstrap="bernoulli"), SHAPES).accepts_padding
    assert not make(config(prior_function="vae"), SHAPES).accepts_padding


def test_a_sweep_pads_each_problem_to_its_padding_groups_largest_T():
    problems = _small(PIDS) + _iris((1, 10))
    units, _ = plan_units("mlp", [agents.MLPConfig()], problems, None)
    rows = {p.problem_id: u.train_rows for u in units for p in u.problems}
    assert [rows[p] for p in PIDS] == [100, 100, 100]
    assert {rows[p.problem_id] for p in _iris((1, 10))} == {10}
    regression = list(leaderboard.get_sweep("regression-quick").values())
    units, _ = plan_units("mlp", [agents.MLPConfig()], regression, None)
    assert {u.train_rows for u in units} == {0}  # GP regression draws do not nest


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_batch_larger_than_one_T_trains_several_T_together_with_the_same_numbers():
    """With --problems-per-batch N and an agent that pads, units are cut from the padding
    group: N = 6 puts the 2 seeds of each of T = 1, 10, 100 in one batch; the rows equal
    those of one unit per T (each problem's computation is its own inside the vmap)."""
    problems = _small(PIDS + ["classification_2d/71", "classification_2d/91",
                              "classification_2d/111"])
    config = agents.MLPConfig(num_steps=50)
    mlp = functools.partial(agents.make_mlp_agent, config)
    units, _ = plan_units("mlp", [config], problems, None, RunOptions(problems_per_batch=6),
                          build=mlp)
    assert [sorted(p.num_train for p in u.problems) for u in units] == [[1, 1, 10, 10, 100, 100]]
    # Without a batch size, or for an agent that does not pad, one T per unit as before.
    per_T = [[1, 1], [10, 10], [100, 100]]
    units, _ = plan_units("mlp", [config], problems, None, build=mlp)
    assert [sorted(p.num_train for p in u.problems) for u in units] == per_T
    plain = functools.partial(_without_padding(agents.make_mlp_agent), config)
    units, _ = plan_units("mlp", [config], problems, None, RunOptions(problems_per_batch=6),
                          build=plain)
    assert [sorted(p.num_train for p in u.problems) for u in units] == per_T
    units, _ = plan_units("oracle_gp", [agents.get_agent("oracle_gp").default],
                          list(leaderboard.get_sweep("regression-quick").values()), None,
                          RunOptions(problems_per_batch=8))
    assert all(len({p.shape for p in u.problems}) == 1 for u in units)
    # Batches of 4: T = 1 and 10 together, then T = 100 (padded to 4 problems).
    together = leaderboard.run_agent(mlp, problems, "mlp", problems_per_batch=4, progress=False)
    apart = leaderboard.run_agent(mlp, problems, "mlp", progress=False)
    for a, b in zip(together, apart):
        assert (a.problem_id, a.num_train, a.status) == (b.problem_id, b.num_train, "ok")
        assert (a.kl, a.kl_stderr, a.accuracy) == (b.kl, b.kl_stderr, b.accuracy)


def test_an_agent_that_fails_to_build_gets_failed_rows_when_units_span_several_T(tmp_path):
    """Planning asks the agent whether it pads; if building it raises, the sweep goes on
    and records the failure per problem, as without --problems-per-batch."""
    def make(config, shapes):
        raise ValueError("deliberately unbuildable")

    spec = agents.AgentSpec(agents.MLPConfig, agents.MLPConfig(), lambda: (agents.MLPConfig(),),
                            make, "fails to build, for a test")
    registry.register("unbuildable", spec)
    try:
        with store.ResultsStore(str(tmp_path / "r.db")) as results:
            summary = run_sweep("unbuildable", [spec.default], _small(PIDS), results,
                                      problems_per_batch=3, progress=False)
            rows = results.rows()
    finally:
        registry.unregister("unbuildable")
    assert summary.failed == summary.computed == 3
    assert all("deliberately unbuildable" in r.error for r in rows)
