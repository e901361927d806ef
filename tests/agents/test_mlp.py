"""The mlp agent: learning (its contract is in test_contract.py)."""

import dataclasses
import functools

import numpy as np
import pytest

from neural_testbed import agents, leaderboard

PAPER = leaderboard.get_sweep("paper")
DEFAULT = functools.partial(agents.make_mlp_agent, agents.MLPConfig())  # shapes -> agent


def _problems(temperature, num_trains, seeds, taus=(1,)):
    return [
        dataclasses.replace(p, taus=taus)
        for p in PAPER.values()
        if p.temperature == temperature and p.num_train in num_trains and p.seed in seeds
    ]


@pytest.mark.slow
def test_kl_falls_as_training_data_grows():
    """Temperature 0.1, seeds 0-3: mean tau=1 KL strictly decreases over T = 10, 100, 1000."""
    rows = leaderboard.run_agent(
        DEFAULT, _problems(0.1, (10, 100, 1000), range(4)), "mlp", progress=False)
    mean_kl = {t: np.mean([r.kl for r in rows if r.num_train == t]) for t in (10, 100, 1000)}
    assert mean_kl[10] > mean_kl[100] > mean_kl[1000], mean_kl


@pytest.mark.slow
def test_accurate_on_plenty_of_low_noise_data():
    rows = leaderboard.run_agent(
        DEFAULT, _problems(0.01, (1000,), range(3)), "mlp", progress=False)
    assert all(r.accuracy > 0.9 for r in rows), [r.accuracy for r in rows]


def test_sweep_is_the_papers_grid():
    sweep = agents.mlp_sweep()
    assert len(sweep) == 14 and len(set(sweep)) == 14
    assert {c.adaptive_weight_scale for c in sweep} == {True, False}
    assert sorted({c.l2_weight_decay for c in sweep}) == [1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100]


@pytest.mark.parametrize(
    "field, value, message",
    [("num_steps", 0, "num_steps must be >= 1, got 0"),
     ("learning_rate", -1.0, "learning_rate must be > 0"),
     ("l2_weight_decay", -0.1, "l2_weight_decay must be >= 0"),
     ("hidden", (50, 0), "hidden must be zero or more widths >= 1")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        agents.MLPConfig(**{field: value})
