"""The Thompson-sampling bandit: known answers for an agent that knows the environment, one
that knows nothing, and the run's bookkeeping."""

import csv
import dataclasses
import io
import json

import jax
import numpy as np
import pytest

from neural_testbed import bandit, base, cli, leaderboard
from neural_testbed.agents import registry
from neural_testbed.generative import mlp_classification
from neural_testbed.leaderboard import studies

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


def _bandit(tmp_path, *words):
    return cli.main(["bandit", "--steps", "120", "--retrain-every", "40", "--db",
                     str(tmp_path / "bandit.db"), "--quiet", *words])


def test_the_command_stores_each_seed_resumes_and_prints_every_config_of_the_setting(
        tmp_path, capsys):
    """A rerun with more seeds computes only the new ones; a second agent's table holds
    both, lowest regret first, each the mean ± se of its stored seeds; the figure is
    drawn; `export --table studies` has every seed's cumulative regret."""
    assert _bandit(tmp_path, "--agent", "uniform", "--seeds", "3") == 0
    out = capsys.readouterr().out
    assert "3 seeds computed" in out and "0 reused" in out
    assert _bandit(tmp_path, "--agent", "uniform", "--seeds", "5", "--seeds-per-unit", "1") == 0
    out = capsys.readouterr().out
    assert "2 seeds computed" in out and "3 reused" in out
    with leaderboard.ResultsStore(str(tmp_path / "bandit.db"), create=False) as store:
        records = store.studies(study="bandit")
    assert sorted(r["problem_id"] for r in records) == [f"bandit/{s}" for s in range(5)]
    totals = [json.loads(r["data"])["total_regret"] for r in records]
    # Each record's total is its per-step regrets' sum, and the run's own (seed 0 again).
    assert all(t == pytest.approx(float(studies.bandit_regret(r).sum()), rel=1e-5)
               for t, r in zip(totals, records))
    spec = registry.get_agent("uniform")
    again = bandit.run_seeds(spec.make(spec.default, SHAPES), bandit.BanditSetting(
        num_steps=120, retrain_every=40), [0])
    assert totals[0] == pytest.approx(float(again.regret.sum()), rel=1e-5)

    figure = tmp_path / "regret.png"
    assert _bandit(tmp_path, "--agent", "mlp", "--set", "num_steps=20", "--seeds", "5",
                   "--format", "csv", "--out", str(figure)) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["agent"] for r in table} == {"mlp", "uniform"} and len(table) == 2
    assert [float(r["regret"]) for r in table] == sorted(float(r["regret"]) for r in table)
    uniform = next(r for r in table if r["agent"] == "uniform")
    assert float(uniform["regret"]) == pytest.approx(np.mean(totals), rel=1e-4)
    assert float(uniform["regret_se"]) == pytest.approx(np.std(totals, ddof=1) / np.sqrt(5),
                                                        rel=1e-4)
    assert figure.stat().st_size > 0 and figure.with_suffix(".pdf").exists()

    exported = tmp_path / "studies.csv"
    assert cli.main(["export", "--db", str(tmp_path / "bandit.db"), "--table", "studies",
                     "--output", str(exported)]) == 0
    rows = list(csv.DictReader(exported.open()))
    last = [r for r in rows if r["agent"] == "uniform" and r["at"] == "step=120"]
    assert sorted(float(r["value"]) for r in last) == pytest.approx(sorted(totals), rel=1e-5)


def test_runs_made_in_two_stores_merge_into_one_that_reuses_them(tmp_path, capsys,
                                                                 one_error_line):
    """Seeds run on two machines merge into one store (a seed both ran is the same
    record, skipped as an exact duplicate), and a rerun there computes nothing; the
    leaderboard of a store of bandit records alone says what it holds."""
    for name, seeds in (("a", "2"), ("b", "3")):
        assert cli.main(["bandit", "--agent", "uniform", "--steps", "60", "--retrain-every",
                         "30", "--seeds", seeds, "--seeds-per-unit", "1", "--quiet",
                         "--db", str(tmp_path / f"{name}.db")]) == 0
    merged = str(tmp_path / "merged.db")
    assert cli.main(["merge", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "-o",
                     merged]) == 0
    assert "3 study results added (tal, probe, bandit, active), 2 exact duplicates skipped" \
        in capsys.readouterr().out
    assert cli.main(["bandit", "--agent", "uniform", "--steps", "60", "--retrain-every", "30",
                     "--seeds", "3", "--quiet", "--db", merged]) == 0
    out = capsys.readouterr().out
    assert "0 seeds computed" in out and "3 reused" in out
    assert cli.main(["leaderboard", "--db", merged]) == 2
    one_error_line("holds study records (bandit) but no `run` rows yet")


@pytest.mark.parametrize("words, fragments", [
    (["--agent", "uniform", "--seeds", "0"], ["--seeds must be an integer >= 1, got 0"]),
    (["--agent", "uniform", "--retrain-every", "0"],
     ["retrain_every must be an integer >= 1, got 0"]),
    (["--agent", "uniform", "--temperature", "0"], ["temperature must be > 0, got 0"]),
    (["--agent", "cnp"], ["'cnp' is for regression only"]),
    (["--agent", "random_forest"], ["a host agent (trained outside JAX) cannot"]),
])
def test_bad_input_is_one_line_before_the_store_is_made(tmp_path, one_error_line, words,
                                                         fragments):
    assert _bandit(tmp_path, *words) == 2
    one_error_line(*fragments)
    assert not (tmp_path / "bandit.db").exists()
