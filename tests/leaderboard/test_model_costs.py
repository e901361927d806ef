"""Model costs read from an agent's programs: known answers for the mlp and an ensemble."""

import pytest

from neural_testbed import leaderboard
from neural_testbed.leaderboard import model_costs

PROBLEM = leaderboard.get_sweep("paper")["classification_2d/100"]  # d = 2, K = 2


def test_the_mlps_state_is_its_weights_and_a_sample_costs_its_products():
    """Hidden (50, 50) on d = 2, K = 2: 2*50 + 50 + 50*50 + 50 + 50*2 + 2 = 2802 weights;
    one input's forward pass is 2700 multiply-adds (5400 operations) plus the biases and
    ReLUs, a few hundred more."""
    cost = model_costs.model_cost("mlp", PROBLEM)
    assert cost.state_floats == 2802
    assert 5400 <= cost.flops_per_input <= 5800, cost


def test_an_ensembles_state_holds_every_member_and_a_sample_runs_one():
    """100 members of the mlp's size; a belief sample is one member's forward pass."""
    mlp = model_costs.model_cost("mlp", PROBLEM)
    ensemble = model_costs.model_cost("ensemble", PROBLEM)
    assert ensemble.state_floats == 100 * mlp.state_floats
    assert ensemble.flops_per_input == pytest.approx(mlp.flops_per_input, rel=0.01)


def test_an_agent_that_trains_outside_jax_has_no_model_cost():
    pytest.importorskip("sklearn")
    assert model_costs.model_cost("random_forest", PROBLEM) is None
