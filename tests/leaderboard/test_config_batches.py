"""Configs that differ only in floats, trained and evaluated in one vmapped program."""

import dataclasses
import logging

import numpy as np
import pytest

from neural_testbed import agents, cli, leaderboard
from neural_testbed.agents import mlp, registry
from neural_testbed.leaderboard import config_batches
from neural_testbed.run import RunOptions, plan_units

PROBLEMS = [dataclasses.replace(p, num_test=100, num_samples=100)
            for p in leaderboard.get_sweep("smoke").values() if p.num_train == 10]
SHORT = mlp.MLPConfig(num_steps=30)
CONFIGS = [dataclasses.replace(SHORT, l2_weight_decay=lam, learning_rate=lr)
           for lam, lr in ((1.0, 1e-3), (0.01, 1e-3), (1.0, 1e-2))]
COMPARED = ("kl", "kl_stderr", "accuracy", "ece")
FELL_BACK = "configs in one program failed"


def _rows(path, configs, configs_per_batch, agent="mlp"):
    with leaderboard.ResultsStore(path) as store:
        leaderboard.run_sweep(agent, configs, PROBLEMS, store, progress=False,
                              configs_per_batch=configs_per_batch)
        return {(r.config_hash, r.problem_id, r.tau): r for r in store.rows()}


def test_configs_are_batched_within_groups_that_differ_only_in_floats():
    paper = agents.get_agent("mlp").configs()
    batches = config_batches.batch_configs(paper, 7)
    assert [len(b) for b in batches] == [7, 7]  # adaptive decay on / off: two groups
    for batch in batches:
        assert len({config_batches.group_key(c) for c in batch}) == 1
        assert config_batches.traced_fields(batch) == ("l2_weight_decay",)
    assert config_batches.batch_configs(paper, 1) == [(c,) for c in paper]  # sweep order
    assert [len(b) for b in config_batches.batch_configs(paper, 4)] == [4, 3, 4, 3]
    dropout = agents.get_agent("dropout").configs()
    sizes = sorted(len(b) for b in config_batches.batch_configs(dropout, 100))
    assert sizes == [1, 1, 6, 10, 15]  # ints, bools and widths separate the groups
    assert config_batches.group_key("not a dataclass") is None


@pytest.mark.slow  # four sweeps' programs (the planner and fallback tests stay quick)
def test_a_batch_of_configs_gives_each_config_its_own_numbers(tmp_path, caplog):
    """Each config's rows from one vmapped program equal its rows run alone, with the
    same keys: the programs differ only in float32 rounding (the floats are traced
    float32 values instead of constants folded in double precision, and matmuls are
    batched). After 30 Adam steps that is far below the estimates' standard errors, so
    0.001 se is the tolerance; a different algorithm or key would move them by about one
    se. (Over 1000 steps a badly fit problem can amplify the rounding: up to 0.15 se on
    `smoke`, `benchmarks/config_sweep.py`.)"""
    alone = _rows(tmp_path / "alone.db", CONFIGS, 1)
    with caplog.at_level(logging.INFO):
        together = _rows(tmp_path / "together.db", CONFIGS, 3)
    assert FELL_BACK not in caplog.text  # computed in one program
    assert together.keys() == alone.keys()
    assert len({key[0] for key in alone}) == len(CONFIGS)
    for key, row in alone.items():
        assert together[key].config == row.config and together[key].status == "ok"
        assert abs(together[key].kl - row.kl) <= 1e-3 * row.kl_stderr, key
        np.testing.assert_allclose(together[key].accuracy, row.accuracy, atol=1e-6)


def test_the_planner_makes_one_unit_per_batch_of_configs_and_splits_partly_stored_ones(
        tmp_path):
    units, _ = plan_units("mlp", CONFIGS, PROBLEMS, None, RunOptions(configs_per_batch=3))
    assert len(units) == 1 and units[0].configs == tuple(CONFIGS)
    units, _ = plan_units("mlp", CONFIGS, PROBLEMS, None, RunOptions(configs_per_batch=2))
    assert [u.configs for u in units] == [tuple(CONFIGS[:2]), (CONFIGS[2],)]
    # The first config stored alone on the first problem: the batch is run config by config.
    with leaderboard.ResultsStore(tmp_path / "part.db") as store:
        leaderboard.run_sweep("mlp", CONFIGS[:1], PROBLEMS[:1], store, progress=False)
        units, reused = plan_units("mlp", CONFIGS, PROBLEMS, store,
                                   RunOptions(configs_per_batch=3))
    assert reused == len(PROBLEMS[0].taus)
    assert [(u.configs, len(u.problems)) for u in units] == [
        ((CONFIGS[0],), len(PROBLEMS) - 1), ((CONFIGS[1],), len(PROBLEMS)),
        ((CONFIGS[2],), len(PROBLEMS))]


@dataclasses.dataclass(frozen=True)
class _PythonFloatConfig:
    learning_rate: float = 1e-3


def _make_python_float_agent(config):
    """Reads its float in Python (``float()``), which a traced value refuses."""
    return mlp.make_mlp_agent(dataclasses.replace(SHORT, learning_rate=float(config.learning_rate)))


@pytest.fixture
def python_float_agent():
    spec = registry.AgentSpec(_PythonFloatConfig, _PythonFloatConfig(),
                              lambda: (_PythonFloatConfig(1e-3), _PythonFloatConfig(1e-2)),
                              _make_python_float_agent)
    registry.register("python_float", spec)
    yield spec
    registry.unregister("python_float")


def test_an_agent_that_needs_its_floats_in_python_runs_one_config_at_a_time(
        tmp_path, python_float_agent, caplog):
    configs = python_float_agent.sweep()
    alone = _rows(tmp_path / "alone.db", configs, 1, "python_float")
    with caplog.at_level(logging.INFO):
        together = _rows(tmp_path / "together.db", configs, 2, "python_float")
    assert f"python_float: 2 {FELL_BACK}" in caplog.text
    assert together.keys() == alone.keys() and len(alone) == 2 * len(PROBLEMS) * 2
    for key, row in alone.items():  # the same programs: the same bits
        assert all(getattr(together[key], c) == getattr(row, c) for c in COMPARED), key
        assert row.status == "ok"


def test_configs_per_batch_below_one_is_refused_before_any_store_is_made(tmp_path, capsys):
    db = tmp_path / "never.db"
    status = cli.main(["sweep", "--agent", "mlp", "--sweep", "smoke", "--db", str(db),
                       "--configs-per-batch", "0"])
    assert status == 2 and not db.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["neural-testbed: error: configs per batch (--configs-per-batch) must be an "
                   "integer >= 1, got 0"], err
