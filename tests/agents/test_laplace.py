"""The laplace agent: its curvature, its collapse onto the mlp, its spread (its contract is
in test_contract.py)."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import laplace

SMOKE = leaderboard.get_sweep("smoke")
PROBLEM = next(p for p in SMOKE.values() if p.num_train == 10)
SHAPES = base.Shapes.of(PROBLEM)
TINY = laplace.LaplaceConfig(num_steps=100, hidden=(16, 8))
NUM_SAMPLES = 2000

# Jitted once here: called eagerly, every primitive compiles on its own.
_last_layer_features = jax.jit(laplace.last_layer_features)


def _train(config):
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = agents.make_laplace_agent(config, SHAPES)
    return agent, jax.jit(agent.train)(jax.random.key(0), data, prior)


@pytest.fixture(scope="module")
def tiny():
    """The TINY config (prior precision 1) trained on a T = 10 problem."""
    return _train(TINY)


@functools.cache
def _sampler(agent, num):
    """The agent's logits under num sampled indices, one program per agent (states traced)."""
    return jax.jit(lambda state, x, key: jax.vmap(lambda k: agent.enn.apply(
        state, x, agent.enn.sample_index(k)))(jax.random.split(key, num)))


def _samples(agent, state, x, num=NUM_SAMPLES):
    return np.asarray(_sampler(agent, num)(state, x, jax.random.key(7)), np.float64)  # [num, n, K]


@functools.cache
def _x_test():
    x = jax.jit(jax.random.normal, static_argnums=1)(jax.random.key(1), (5, PROBLEM.input_dim))
    return 2.0 * np.asarray(x)


def test_precision_factor_is_prior_plus_the_summed_softmax_hessian():
    """R^T R equals prior * I + sum_t J_t^T (diag(p_t) - p_t p_t^T) J_t built term by term
    in float64 (K = 3 classes, m + 1 = 6 features, T = 30)."""
    rng = np.random.default_rng(0)
    features = np.concatenate([rng.normal(size=(30, 5)), np.ones((30, 1))], axis=1)
    logits = 2 * rng.normal(size=(30, 3))
    r = np.asarray(jax.jit(laplace.last_layer_precision_factor)(
        features.astype(np.float32), logits.astype(np.float32), 0.5), np.float64)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = 0.5 * np.eye(18)
    for t in range(30):
        jac = np.kron(features[t][None, :], np.eye(3))  # d logits_k / d theta[i, l], i*K + l
        expected += jac.T @ (np.diag(p[t]) - np.outer(p[t], p[t])) @ jac
    np.testing.assert_array_equal(r, np.triu(r))
    # float32 QR: errors ~ 1e-6 of the largest entry.
    np.testing.assert_allclose(r.T @ r, expected, atol=1e-5 * np.abs(expected).max())


def test_samples_collapse_onto_the_mlp_as_the_prior_precision_grows():
    """Prior precision 1e8: the weight noise has sd <= 1e-4, so every sample is the mlp
    agent's prediction (same config, same key) to within 6 sd: |delta logit| <=
    6e-4 * |[phi(x); 1]|, the bound a weight noise of covariance <= 1e-8 I gives."""
    agent, state = _train(dataclasses.replace(TINY, prior_precision=1e8))
    mlp_agent = agents.make_mlp_agent(TINY.mlp_config(), SHAPES)
    _, data = leaderboard.load_problem(PROBLEM)
    mlp_params = jax.jit(mlp_agent.train)(jax.random.key(0), data,
                                          leaderboard.prior_knowledge(PROBLEM))
    x = _x_test()
    mlp_logits = np.asarray(jax.jit(mlp_agent.enn.apply)(mlp_params, x, 0), np.float64)
    samples = _samples(agent, state, x, num=200)
    features = np.asarray(_last_layer_features(state.params, x))
    feature_norm = np.linalg.norm(features, axis=-1)
    bound = 6e-4 * feature_norm[None, :, None] + 1e-5  # + float32 rounding of the logits
    worst = (np.abs(samples - mlp_logits[None]) / bound).max()
    assert worst < 1, worst


def test_samples_spread_as_the_prior_precision_shrinks(tiny):
    """The samples' sd at 5 test inputs grows monotonically as the prior precision falls
    from 1e8 to 1e-2, and is large (> 1 logit) at 1e-2, where the T = 10 points
    constrain few of the 2 (m + 1) = 18 last-layer weights."""
    x = _x_test()
    agent, trained = tiny
    _, data = leaderboard.load_problem(PROBLEM)
    fit = jax.jit(laplace.fit_last_layer)  # the prior precision is traced: one compilation
    spreads = []
    for precision in (1e8, 100.0, 1.0, 1e-2):
        state = fit(trained.params, data.x, precision)
        spreads.append(_samples(agent, state, x).std(axis=0).mean())
    # The sd of a sample sd over 2000 draws is ~1.6% of it: steps of 2x are far outside that.
    assert all(b > 2 * a for a, b in zip(spreads, spreads[1:])), spreads
    assert spreads[-1] > 1.0, spreads


def test_logit_covariance_is_the_laplace_posteriors(tiny):
    """At a test input the sampled logits have mean = the mlp's logits and covariance
    J H^-1 J^T, J = I_K kron [phi(x); 1], with H = prior * I + the summed softmax Hessian
    built here in float64 from the trained network."""
    precision = TINY.prior_precision
    agent, state = tiny
    _, data = leaderboard.load_problem(PROBLEM)
    train_features = np.asarray(_last_layer_features(state.params, data.x), np.float64)
    mean_net = jax.jit(agents.make_mlp_agent(TINY.mlp_config(), SHAPES).enn.apply)
    train_logits = np.asarray(mean_net(state.params, data.x, 0), np.float64)
    p = np.exp(train_logits - train_logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    width = train_features.shape[1]
    h = precision * np.eye(2 * width)
    for f, p_t in zip(train_features, p):
        jac = np.kron(f[None, :], np.eye(2))
        h += jac.T @ (np.diag(p_t) - np.outer(p_t, p_t)) @ jac
    x = _x_test()[:1]
    features = np.asarray(_last_layer_features(state.params, x), np.float64)
    jac = np.kron(features, np.eye(2))
    cov = jac @ np.linalg.solve(h, jac.T)
    mean = np.asarray(mean_net(state.params, x, 0), np.float64)[0]
    samples = _samples(agent, state, x)[:, 0, :]  # [num, K]
    # Gaussian standard errors over NUM_SAMPLES draws; 5 SE per entry (a false failure
    # among the 6 checks has probability < 1e-5).
    se_mean = np.sqrt(np.diag(cov) / NUM_SAMPLES)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / NUM_SAMPLES)
    np.testing.assert_array_less(np.abs(samples.mean(0) - mean), 5 * se_mean)
    np.testing.assert_array_less(np.abs(np.cov(samples, rowvar=False) - cov), 5 * se_cov)


@pytest.mark.slow  # training and evaluating through the runner (the contract tests cover its parts)
def test_runs_through_the_leaderboard_with_finite_kls():
    """Two smoke problems, N and M cut to 100 so that it takes seconds."""
    problems = [dataclasses.replace(p, num_test=100, num_samples=100)
                for p in list(SMOKE.values())[:2]]
    rows = leaderboard.run_agent(functools.partial(agents.make_laplace_agent, TINY), problems,
                                 "laplace", config=TINY, progress=False)
    assert len(rows) == 4 and all(r.status == "ok" for r in rows), rows
    assert all(np.isfinite(r.kl) and r.kl > -0.5 for r in rows), [r.kl for r in rows]


def test_sweep_covers_the_prior_precision_and_the_mlps_weight_decay():
    sweep = agents.laplace_sweep()
    assert len(sweep) == 18 and len(set(sweep)) == 18
    assert sorted({c.prior_precision for c in sweep}) == [1e-2, 1e-1, 1, 10, 100, 1e3]
    assert sorted({c.l2_weight_decay for c in sweep}) == [0.1, 1, 10]


@pytest.mark.parametrize(
    "field, value, message",
    [("prior_precision", 0.0, "prior_precision must be > 0"),
     ("prior_precision", float("inf"), "prior_precision must be a finite number"),
     ("num_steps", 0, "num_steps must be >= 1"),
     ("l2_weight_decay", -1.0, "l2_weight_decay must be >= 0")],
)
def test_bad_configs_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        agents.LaplaceConfig(**{field: value})
