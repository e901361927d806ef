"""Host agents (trained as ordinary Python, sampling NumPy logits) through the runner."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, leaderboard

PAPER = leaderboard.get_sweep("paper")


def _small(pid, num_test=50, num_samples=20):
    return dataclasses.replace(PAPER[pid], num_test=num_test, num_samples=num_samples)


def _numpy_mlp(params, x):
    for layer in params[:-1]:
        x = np.maximum(x @ layer["w"] + layer["b"], 0)
    return x @ params[-1]["w"] + params[-1]["b"]


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_host_agent_that_knows_the_environment_scores_zero():
    """A NumPy oracle: training looks up the environment; sampling is its forward pass."""
    problem = _small("classification_2d/95")
    env = jax.device_get(problem.instance().env)

    def train(seed, data, prior):
        assert isinstance(data.x, np.ndarray) and isinstance(seed, int)
        return env

    def sample(state, x, indices):
        return _numpy_mlp(state.params, x) / float(state.temperature)

    agent = base.HostAgent(train, sample, num_indices=1)
    rows = leaderboard.run_agent(lambda shapes: agent, [problem], "oracle", progress=False)
    assert [r.status for r in rows] == ["ok", "ok"]
    assert all(abs(r.kl) < 1e-4 for r in rows), [r.kl for r in rows]


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_belief_samples_are_batched_into_few_calls_with_fresh_seeds():
    """A continuous-index host agent (seeded noise on a linear model): the evaluator asks
    for all M x N networks of a chunk in one call, never one call per network."""
    calls, seen = [], set()

    def train(seed, data, prior):
        return np.linalg.lstsq(np.asarray(data.x), np.eye(2)[np.asarray(data.y)], rcond=None)[0]

    def sample(w, x, indices):
        calls.append(len(indices))
        seen.update(int(i) for i in indices)
        noise = np.stack([np.random.default_rng(int(i)).normal(size=w.shape) for i in indices])
        return np.einsum("bnd,bdk->bnk", x, w + noise)

    problem = _small("classification_2d/111", num_test=50, num_samples=20)
    problem = dataclasses.replace(problem, taus=(1, 10))
    rows = leaderboard.run_agent(lambda shapes: base.HostAgent(train, sample), [problem], "noisy",
                                 progress=False)
    assert all(r.status == "ok" for r in rows), rows
    assert sum(calls) == 2 * 50 * 20  # every (test sample, belief sample) of both taus
    assert len(calls) <= 4  # in a few large batches
    assert len(seen) > 0.99 * 2 * 50 * 20  # fresh seeds (uint32 draws rarely collide)
    assert all(r.kl_stderr > 0 for r in rows)


def test_a_host_agent_that_raises_gets_a_failed_row_and_others_run():
    def train(seed, data, prior):
        if len(data.x) == 10:
            raise RuntimeError("host training failed")
        return None

    def sample(state, x, indices):
        return np.zeros(x.shape[:2] + (2,))

    problems = [_small("classification_2d/90"), _small("classification_2d/110")]  # T=10, T=100
    rows = leaderboard.run_agent(lambda shapes: base.HostAgent(train, sample, 1), problems,
                                 "flaky", progress=False)
    status = {(r.problem_id, r.tau): (r.status, r.error) for r in rows}
    assert status[("classification_2d/90", 1)][0] == "failed"
    assert "host training failed" in status[("classification_2d/90", 1)][1]
    assert status[("classification_2d/110", 100)][0] == "ok"


@pytest.mark.parametrize("logits, error", [
    (lambda x: np.zeros(x.shape[:2] + (3,)),
     "HostAgentError: host agent's sample returned logits of shape (1, 100, 3) for 1 networks "
     "on 100 inputs; expected (1, 100, 2)"),
    (lambda x: np.zeros(x.shape[:2] + (2,), np.complex64),
     "HostAgentError: host agent's sample returned logits of dtype complex64; logits must be "
     "real numbers"),
    (lambda x: 1 / 0, "HostAgentError: host agent's sample raised ZeroDivisionError: division "
                      "by zero"),
])
def test_unusable_logits_are_a_one_line_failed_row_and_no_traceback(logits, error, caplog):
    """The callback's error is the row's, in one line (not XLA's runtime error holding a
    traceback); no log record carries a traceback; complex logits are not cast to real."""
    problems = [_small("classification_2d/90"), _small("classification_2d/91")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's ComplexWarning of a cast to real
        agent = base.HostAgent(lambda s, d, p: None, lambda s, x, i: logits(x), 1)
        rows = leaderboard.run_agent(lambda shapes: agent, problems, "wrong", progress=False)
    assert [(r.status, r.error) for r in rows] == [("failed", error)] * 4
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert len(caplog.records) == 3  # the batch, then each problem, one line each


def test_complex_logits_of_a_jax_agent_are_a_one_line_failed_row():
    agent = base.Agent(lambda key, data, prior: jnp.zeros(()), base.ENN(
        lambda state, x, index: jnp.zeros((x.shape[0], 2), jnp.complex64),
        lambda key: jnp.zeros((), jnp.int32), 1))
    rows = leaderboard.run_agent(lambda shapes: agent, [_small("classification_2d/90")],
                                 "complex", progress=False)
    assert {(r.status, r.error) for r in rows} == {(
        "failed", "ValueError: agent returned logits of dtype complex64; logits must be real "
                  "numbers")}
