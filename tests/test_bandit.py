"""The Thompson-sampling bandit: known answers for an agent that knows the environment, one
that knows nothing, and the run's bookkeeping."""

import dataclasses

import jax
import numpy as np
import pytest

from neural_testbed import bandit, base
from neural_testbed.agents import registry
from neural_testbed.generative import mlp_classification

SETTING = bandit.BanditSetting(num_steps=400, retrain_every=50)
SHAPES = base.Shapes(SETTING.input_dim, 2)


def _oracle(env: mlp_classification.Environment) -> base.Agent:
    """An agent whose every belief sample is the environment itself."""
    return base.Agent(train=lambda key, data, prior: env,
                      enn=base.ENN(apply=lambda state, x, index: mlp_classification.
                                   environment_logits(state, x),
                                   sample_index=lambda key: 0),
                      accepts_padding=True)


def test_an_agent_that_knows_the_environment_stops_losing_after_its_random_first_step():
    """With the true probabilities as its belief it takes the best action at every step
    after the first (which, with no data, is uniformly random): its regret stops growing."""
    for seed in range(3):
        key = jax.random.key(seed)
        env = bandit.sample_bandit(key, SETTING)
        oracle = _oracle(env.env)
        run = jax.jit(lambda key, agent=oracle: bandit.run_thompson(key, agent, SETTING))(key)
        best = int(np.argmax(env.reward_probs))
        assert np.all(np.asarray(run.actions[1:]) == best), seed
        assert np.all(np.asarray(run.regret[1:]) == 0), seed
        first = int(run.actions[0])
        assert run.regret[0] == pytest.approx(float(env.reward_probs[best]
                                                     - env.reward_probs[first]))


def test_an_agent_that_knows_nothing_loses_the_closed_form_regret_of_uniform_choice():
    """The uniform baseline believes every action pays with probability 1/2, so every
    choice is a tie, broken uniformly at random: a step's regret has mean max p - mean p
    and variance var p over the actions. Over 8 seeds of 400 steps (fixed), the summed
    regret is within 4 standard errors of that mean (its standard error from the
    variance, steps independent given the seed)."""
    spec = registry.get_agent("uniform")
    seeds = range(8)
    run = bandit.run_seeds(spec.make(spec.default, SHAPES), SETTING, seeds)
    probs = [np.asarray(bandit.sample_bandit(jax.random.key(s), SETTING).reward_probs,
                        np.float64) for s in seeds]
    expected = sum(SETTING.num_steps * (p.max() - p.mean()) for p in probs)
    stderr = np.sqrt(sum(SETTING.num_steps * p.var() for p in probs))
    assert abs(run.regret.sum(dtype=np.float64) - expected) < 4 * stderr
    # And the choices spread over the pool: every action is taken, none much more often.
    counts = np.bincount(run.actions.ravel(), minlength=SETTING.actions)
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()


def test_a_run_records_every_step_once_and_its_rewards_are_the_environments():
    """Steps: num_steps of each (not a multiple of retrain_every); rewards are 0 or 1 and
    their mean over many steps is the mean probability of the actions taken (fixed seeds,
    4 standard errors)."""
    setting = bandit.BanditSetting(num_steps=333, retrain_every=50)
    spec = registry.get_agent("mlp")
    agent = spec.make(dataclasses.replace(spec.default, num_steps=20), SHAPES)
    run = bandit.run_seeds(agent, setting, [0, 1])
    assert run.actions.shape == run.rewards.shape == run.regret.shape == (2, 333)
    assert set(np.unique(run.rewards)) <= {0, 1}
    for s in range(2):
        probs = np.asarray(bandit.sample_bandit(jax.random.key(s), setting).reward_probs)
        chosen = probs[run.actions[s]]
        np.testing.assert_allclose(run.regret[s], probs.max() - chosen, atol=1e-6)
        stderr = np.sqrt(np.sum(chosen * (1 - chosen))) / len(chosen)
        assert abs(run.rewards[s].mean() - chosen.mean()) < 4 * stderr + 1e-9


def test_bad_settings_and_agents_that_cannot_be_padded_are_refused():
    with pytest.raises(ValueError, match="num_steps must be an integer >= 1, got 0"):
        bandit.BanditSetting(num_steps=0)
    with pytest.raises(ValueError, match="num_actions must be an integer >= 2, got 1"):
        bandit.BanditSetting(num_actions=1)
    with pytest.raises(ValueError, match="temperature must be > 0, got -1"):
        bandit.BanditSetting(temperature=-1)
    unpadded = base.Agent(train=lambda key, data, prior: None,
                          enn=base.ENN(lambda s, x, i: x, lambda key: 0))
    with pytest.raises(ValueError, match="accepts_padding"):
        bandit.run_seeds(unpadded, SETTING, [0])
