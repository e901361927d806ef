"""Classification active learning: enn's priorities against a NumPy transcription, an agent
that knows the environment, the batches it picks, and the `active` command."""

import csv
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import bandit, base, cli, leaderboard
from neural_testbed.active import classification as al
from neural_testbed.agents import registry
from neural_testbed.generative import mlp_classification

SETTING = al.ActiveSetting(priority="entropy", input_dim=3, pool_size=30, num_steps=31,
                           batch_size=10, num_samples=20, num_test=200)


def _numpy_priorities(probs, labels):
    """enn's per-example priorities (enn/active_learning/priorities.py), in float64 NumPy."""
    mean = probs.mean(0)
    entropy = -(mean * np.log(mean)).sum(-1)
    n = np.arange(probs.shape[1])
    ordered = np.sort(mean, -1)
    return {
        "variance": probs.var(0).sum(-1),
        "nll": -np.log(mean[n, labels]),
        "joint_nll": -(10 * np.log(probs[:, n, labels])).mean(0),
        "entropy": entropy,
        "margin": -(ordered[:, -1] - ordered[:, -2]),
        "bald": entropy - (-(probs * np.log(probs)).sum(-1)).mean(0),
        "var_ratios": 1 - mean.max(-1),
    }


@pytest.mark.parametrize("num_classes", [2, 3])
def test_each_priority_is_enns_formula(num_classes):
    """On random probabilities of 6 belief samples at 9 inputs (fixed seed), every priority
    equals the float64 transcription to float32 rounding; uniform draws from [0, 1) by
    its key."""
    rng = np.random.default_rng(num_classes)
    probs = rng.dirichlet(np.ones(num_classes), size=(6, 9))
    labels = rng.integers(0, num_classes, 9)
    expected = _numpy_priorities(probs, labels)
    for name, values in expected.items():
        got = al.PRIORITIES[name](jnp.asarray(probs, jnp.float32), jnp.asarray(labels),
                                  jax.random.key(0))
        np.testing.assert_allclose(np.asarray(got), values, rtol=2e-5, atol=2e-6, err_msg=name)
    uniform = [np.asarray(al.PRIORITIES["uniform"](probs, jnp.asarray(labels),
                                                   jax.random.key(k))) for k in (0, 1)]
    assert all(((u >= 0) & (u < 1)).all() for u in uniform)
    assert not np.array_equal(*uniform)


def _oracle(env: mlp_classification.Environment) -> base.Agent:
    """An agent whose every belief sample is the environment itself."""
    return base.Agent(train=lambda key, data, prior: env,
                      enn=base.ENN(lambda state, x, index:
                                   mlp_classification.environment_logits(state, x),
                                   lambda key: 0),
                      accepts_padding=True)


def test_an_agent_that_knows_the_environment_scores_zero_and_labels_its_most_uncertain():
    """Its d_KL is 0 after every training (to float32 rounding); with the entropy
    priority each batch is the pool's highest-entropy inputs under the environment
    itself, the same every round, each input once within a batch."""
    key = jax.random.key(3)
    problem = al.sample_problem(key, SETTING)
    oracle = _oracle(problem.env)
    run = jax.jit(lambda key, agent=oracle: al.run_active(key, agent, SETTING))(key)
    np.testing.assert_allclose(np.asarray(run.kl), 0, atol=1e-6)
    assert np.asarray(run.num_labels).tolist() == [1, 11, 21, 31]
    p = np.asarray(problem.pool_probs, np.float64)
    top = set(np.argsort((p * np.log(p)).sum(-1))[:SETTING.batch_size].tolist())  # entropy
    batches = np.asarray(run.chosen)[1:].reshape(3, SETTING.batch_size)
    for batch in batches:
        assert set(batch.tolist()) == top


def test_labels_are_counted_and_the_tail_of_the_last_batch_dropped():
    """num_steps not one more than a multiple of the batch: the last batch is cut at
    num_steps labels, and the last score is of them all."""
    setting = al.ActiveSetting(priority="uniform", input_dim=2, pool_size=12, num_steps=17,
                               batch_size=5, num_samples=4, num_test=50)
    spec = registry.get_agent("average_class_probs")
    program = al.active_program(spec.make(spec.default, base.Shapes(2, 2)), setting)
    run = jax.jit(program)(bandit.seed_keys([0, 1]))
    assert np.asarray(run.chosen).shape == (2, 17)
    assert np.asarray(run.num_labels)[0].tolist() == [1, 6, 11, 16, 17]
    assert np.isfinite(np.asarray(run.kl)).all()


def _active(tmp_path, *words):
    return cli.main(["active", "--input-dim", "2", "--pool-size", "20", "--steps", "21",
                     "--batch-size", "10", "--num-samples", "8", "--db",
                     str(tmp_path / "active.db"), "--quiet", *words])


def test_the_command_stores_each_priority_and_seed_and_reuses_them(tmp_path, capsys):
    """Two priorities of 2 seeds: 4 records; a rerun with a third seed computes 2; the
    table holds one row per priority, its final d_KL the mean of the stored seeds'."""
    words = ["--agent", "mlp", "--set", "num_steps=10", "--priority", "uniform,bald"]
    assert _active(tmp_path, *words, "--seeds", "2") == 0
    assert "4 runs computed" in capsys.readouterr().out
    assert _active(tmp_path, *words, "--seeds", "3", "--format", "csv") == 0
    out, err = capsys.readouterr()
    assert "2 runs computed" in err and "4 reused" in err
    table = {r["priority"]: r for r in csv.DictReader(io.StringIO(out))}
    assert set(table) == {"uniform", "bald"}
    with leaderboard.ResultsStore(str(tmp_path / "active.db"), create=False) as store:
        records = store.studies(study="active")
    assert len(records) == 6
    finals = [json.loads(r["data"])["kl"][-1] for r in records
              if '"priority":"bald"' in r["settings"]]
    assert float(table["bald"]["final_kl"]) == pytest.approx(np.mean(finals), rel=1e-4)
    assert int(table["bald"]["seeds"]) == 3


@pytest.mark.parametrize("words, fragments", [
    (["--agent", "mlp", "--priority", "entropy,coin"], ["priority must be one of", "'coin'"]),
    (["--agent", "mlp", "--batch-size", "50"],
     ["batch_size must be at most the pool's 20 inputs, got 50"]),
    (["--agent", "random_forest"], ["a host agent (trained outside JAX) cannot"]),
    (["--agent", "gp"], ["'gp' is for regression only"]),
])
def test_bad_input_is_one_line_before_the_store_is_made(tmp_path, one_error_line, words,
                                                         fragments):
    assert _active(tmp_path, *words) == 2
    one_error_line(*fragments)
    assert not (tmp_path / "active.db").exists()


def test_a_confident_agents_score_and_priorities_are_finite():
    """An agent whose logits are the environment's times 1000 has probabilities that round
    to 0 and 1 in float32: its d_KL (computed in log space) and every priority stay
    finite or +inf where a label it rules out is drawn, never NaN."""
    key = jax.random.key(4)
    problem = al.sample_problem(key, SETTING)
    confident = base.Agent(train=lambda key, data, prior: problem.env,
                           enn=base.ENN(lambda state, x, index: 1000 * mlp_classification.
                                        environment_logits(state, x), lambda key: 0),
                           accepts_padding=True)
    for priority in al.PRIORITIES:
        setting = al.ActiveSetting(**{**vars(SETTING), "priority": priority})
        run = jax.jit(lambda key, s=setting: al.run_active(key, confident, s))(key)
        kl = np.asarray(run.kl)
        assert np.isfinite(kl).all() and (kl > 0).all(), priority
