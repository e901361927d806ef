"""The evaluator: known answers, structure exploitation, chunking and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, generative, likelihood
from neural_testbed.likelihood import kl as kl_lib

ENV = generative.sample_environment(jax.random.key(0), temperature=0.1)


def _true_env_enn():
    """The environment itself as a one-member ENN."""
    return base.ENN(
        apply=lambda state, x, index: generative.environment_logits(state, x),
        sample_index=lambda key: jnp.zeros((), jnp.int32),
        num_indices=1,
    )


@pytest.mark.parametrize("tau", [1, 100])
def test_true_environment_has_zero_kl(tau):
    evaluate = jax.jit(likelihood.make_evaluator(_true_env_enn(), tau, num_classes=2))
    ev = evaluate(jax.random.key(1), ENV, ENV)
    assert abs(float(ev.kl)) < 1e-5  # float32 rounding only
    assert bool(ev.logits_finite)


@pytest.mark.parametrize("tau", [1, 100])
def test_true_environment_as_plain_sampler_has_zero_kl(tau):
    """M = 1000 distinct keys of a sampler that ignores its key: every estimator is exact."""
    sampler = lambda x, key: generative.environment_logits(ENV, x)
    ev = likelihood.evaluate_sampler(sampler, ENV, jax.random.key(1), tau=tau)
    assert abs(float(ev.kl)) < 1e-5


def test_a_mistaken_agent_has_positive_kl():
    """An agent at the wrong temperature is worse than the truth by many standard errors."""
    sampler = lambda x, key: generative.environment_logits(ENV, x) * 0.2
    for tau in (1, 100):
        ev = likelihood.evaluate_sampler(sampler, ENV, jax.random.key(1), tau=tau)
        assert float(ev.kl) > 5 * float(ev.kl_stderr) > 0


def _three_member_enn(num_indices):
    """An ensemble of 3 scaled copies of the environment, uniform over members."""
    scales = jnp.array([0.3, 1.0, 3.0])
    return base.ENN(
        apply=lambda state, x, index: generative.environment_logits(state, x) * scales[index],
        sample_index=lambda key: jax.random.randint(key, (), 0, 3),
        num_indices=num_indices,
    )


@pytest.mark.parametrize("tau", [1, 100])
def test_evaluating_distinct_members_once_gives_the_same_estimate(tau):
    """Counting the M sampled member ids (3 forward passes) equals evaluating all M samples."""
    key = jax.random.key(5)
    grouped = jax.jit(likelihood.make_evaluator(_three_member_enn(3), tau, 2))(key, ENV, ENV)
    every = jax.jit(likelihood.make_evaluator(_three_member_enn(None), tau, 2))(key, ENV, ENV)
    for name in ("kl", "kl_stderr", "accuracy", "ece"):
        np.testing.assert_allclose(getattr(grouped, name), getattr(every, name), rtol=2e-4, atol=1e-6)


def test_chunk_size_does_not_change_the_estimate(monkeypatch):
    enn = _three_member_enn(None)
    key = jax.random.key(2)
    whole = likelihood.make_evaluator(enn, 100, 2, num_test=40, num_samples=50)(key, ENV, ENV)
    monkeypatch.setattr(kl_lib, "_MAX_ROWS_PER_CHUNK", 50 * 100 * 4)  # 4 test samples per chunk
    chunked = likelihood.make_evaluator(enn, 100, 2, num_test=40, num_samples=50)(key, ENV, ENV)
    np.testing.assert_allclose(whole.kl, chunked.kl, rtol=1e-5)
    np.testing.assert_allclose(whole.ece, chunked.ece, rtol=1e-5)


def test_auto_estimator_choice():
    assert likelihood.choose_estimator(1) == "monte_carlo"
    assert likelihood.choose_estimator(9) == "monte_carlo"
    assert likelihood.choose_estimator(10) == "partition"
    assert likelihood.choose_estimator(100, "monte_carlo") == "monte_carlo"


def test_sampler_with_wrong_shape_is_a_clear_error():
    sampler = lambda x, key: jnp.zeros((x.shape[0], 3))
    with pytest.raises(ValueError, match=r"logits of shape .*expected .*2 class logits"):
        likelihood.evaluate_sampler(sampler, ENV, jax.random.key(0), num_test=10, num_samples=10)


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf, -jnp.inf])
@pytest.mark.parametrize("tau", [1, 100])
def test_one_non_finite_logit_is_flagged(bad, tau):
    def sampler(x, key):  # finite logits except one entry of the first input
        return jnp.zeros((x.shape[0], 2)).at[0, 1].set(bad)

    ev = likelihood.evaluate_sampler(sampler, ENV, jax.random.key(0), tau=tau, num_test=10,
                                     num_samples=10)
    assert not bool(ev.logits_finite)
    finite = likelihood.evaluate_sampler(lambda x, key: jnp.zeros((x.shape[0], 2)), ENV,
                                         jax.random.key(0), tau=tau, num_test=10, num_samples=10)
    assert bool(finite.logits_finite)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tau": 0}, "tau must be an integer >= 1, got 0"),
        ({"num_test": 0}, "num_test must be an integer >= 1"),
        ({"estimator": "exact"}, "unknown estimator 'exact'; allowed: auto, monte_carlo, partition"),
    ],
)
def test_bad_evaluation_settings_are_clear_errors(kwargs, message):
    sampler = lambda x, key: generative.environment_logits(ENV, x)
    with pytest.raises(ValueError, match=message):
        likelihood.evaluate_sampler(sampler, ENV, jax.random.key(0), **kwargs)
