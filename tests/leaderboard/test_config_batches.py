"""Configs that differ only in the fields their agent declares batchable, trained and
evaluated in one vmapped program. (That a batched agent gives each config's own outputs is
its contract, checked for every agent in tests/agents/test_contract.py.)"""

import dataclasses

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
MLP = agents.get_agent("mlp").batchable


def _rows(path, configs, configs_per_batch, agent="mlp"):
    with leaderboard.ResultsStore(path) as store:
        leaderboard.run_sweep(agent, configs, PROBLEMS, store, progress=False,
                              configs_per_batch=configs_per_batch)
        return {(r.config_hash, r.problem_id, r.tau): r for r in store.rows()}


def test_configs_are_batched_within_groups_that_differ_only_in_declared_fields():
    paper = agents.get_agent("mlp").configs()
    batches = config_batches.batch_configs(paper, 7, MLP)
    assert [len(b) for b in batches] == [7, 7]  # adaptive decay on / off: two groups
    for batch in batches:
        assert len({config_batches.group_key(c, MLP) for c in batch}) == 1
        assert config_batches.array_fields(batch, MLP) == ("l2_weight_decay",)
    assert config_batches.batch_configs(paper, 1, MLP) == [(c,) for c in paper]  # sweep order
    assert [len(b) for b in config_batches.batch_configs(paper, 4, MLP)] == [4, 3, 4, 3]
    dropout = agents.get_agent("dropout")
    sizes = sorted(len(b) for b in config_batches.batch_configs(dropout.configs(), 100,
                                                                dropout.batchable))
    assert sizes == [1, 1, 6, 10, 15]  # ints, bools and widths separate the groups
    # Nothing declared, or not a dataclass: never batched.
    assert config_batches.batch_configs(paper, 7, ()) == [(c,) for c in paper]
    assert config_batches.group_key("not a dataclass", MLP) is None
    # A float that is not declared is part of the group, as an int is.
    assert len(config_batches.batch_configs(CONFIGS, 3, ("l2_weight_decay",))) == 2


def test_configs_that_differ_in_an_undeclared_field_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^configs batched together may differ only in the "
                                         r"fields their agent declares batchable "
                                         r"\(l2_weight_decay\); these differ in learning_rate$"):
        config_batches.array_fields(CONFIGS, ("l2_weight_decay",))


def test_with_arrays_gives_a_config_of_the_class_that_holds_the_values_unvalidated():
    """What make gets in a batched program: the config's class, methods and all, with the
    declared fields set; not validated again (its values were, as their configs')."""
    config = agents.LaplaceConfig(prior_precision=2.0)
    made = config_batches.with_arrays(config, ("prior_precision",), np.array([-1.0]))
    assert isinstance(made, agents.LaplaceConfig) and made.prior_precision == -1.0
    assert made.mlp_config() == config.mlp_config() and config.prior_precision == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.prior_precision = 3.0  # type: ignore[misc]


@pytest.mark.slow  # four sweeps' programs (the planner and failure tests stay quick)
def test_a_batch_of_configs_gives_each_config_its_own_numbers(tmp_path):
    """Each config's rows from one vmapped program equal its rows run alone, with the
    same keys: the programs differ only in float32 rounding (the floats are traced
    float32 values instead of constants folded in double precision, and matmuls are
    batched). After 30 Adam steps that is far below the estimates' standard errors, so
    0.001 se is the tolerance; a different algorithm or key would move them by about one
    se. (Over 1000 steps a badly fit problem can amplify the rounding: up to 0.15 se on
    `smoke`, `benchmarks/config_sweep.py`.)"""
    alone = _rows(tmp_path / "alone.db", CONFIGS, 1)
    together = _rows(tmp_path / "together.db", CONFIGS, 3)
    assert together.keys() == alone.keys()
    assert len({key[0] for key in alone}) == len(CONFIGS)
    for key, row in alone.items():
        assert together[key].config == row.config and together[key].status == "ok"
        assert abs(together[key].kl - row.kl) <= 1e-3 * row.kl_stderr, key
        np.testing.assert_allclose(together[key].accuracy, row.accuracy, atol=1e-6)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
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


def _make_python_float_agent(config, shapes):
    """Reads its float in Python (``float()``), which a traced value refuses."""
    return mlp.make_mlp_agent(dataclasses.replace(SHORT, learning_rate=float(config.learning_rate)),
                              shapes)


@pytest.fixture
def python_float_agent(request):
    """The agent registered declaring ``request.param`` batchable."""
    spec = registry.AgentSpec(_PythonFloatConfig, _PythonFloatConfig(),
                              lambda: (_PythonFloatConfig(1e-3), _PythonFloatConfig(1e-2)),
                              _make_python_float_agent, batchable=request.param)
    registry.register("python_float", spec)
    yield spec
    registry.unregister("python_float")


@pytest.mark.parametrize("python_float_agent", [()], indirect=True)
def test_an_agent_that_declares_nothing_runs_one_config_at_a_time(python_float_agent):
    units, _ = plan_units("python_float", python_float_agent.sweep(), PROBLEMS, None,
                          RunOptions(configs_per_batch=8))
    assert [u.configs for u in units] == [(c,) for c in python_float_agent.sweep()]


@pytest.mark.parametrize("python_float_agent", [("learning_rate",)], indirect=True)
def test_a_batched_program_that_fails_gives_failed_rows_that_say_why(tmp_path,
                                                                     python_float_agent):
    """Declared batchable but read in Python: no silent run one config at a time; the
    batch's rows fail with the error, as any failure of a program does."""
    rows = _rows(tmp_path / "together.db", python_float_agent.sweep(), 2, "python_float")
    assert len(rows) == 2 * len(PROBLEMS) * len(PROBLEMS[0].taus)
    for row in rows.values():
        assert row.status == "failed", row
        assert row.error.startswith("2 configs vmapped over learning_rate (the agent's "
                                       "batchable fields, float32 arrays there): "
                                       "ConcretizationTypeError"), row.error


def test_configs_per_batch_below_one_is_refused_before_any_store_is_made(tmp_path, capsys):
    db = tmp_path / "never.db"
    status = cli.main(["sweep", "--agent", "mlp", "--sweep", "smoke", "--db", str(db),
                       "--configs-per-batch", "0"])
    assert status == 2 and not db.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["neural-testbed: error: configs per batch (--configs-per-batch) must be an "
                   "integer >= 1, got 0"], err
