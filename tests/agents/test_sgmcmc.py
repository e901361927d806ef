"""The SG-MCMC agent: the Langevin transformation, the chain against a known posterior,
the snapshots, configs and sweep."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from neural_testbed import agents, base, evaluation, generative, leaderboard
from neural_testbed.agents import sgmcmc

PAPER = leaderboard.get_sweep("paper")
# temperature 0.1, T = 10, seed 0
PROBLEM = next(p for p in PAPER.values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)
SHAPES = base.Shapes.of(PROBLEM)
SMALL = sgmcmc.SGMCMCConfig(learning_rate=1e-3, num_steps=3000, burn_in=1000,
                            snapshot_every=200)  # 10 snapshots


def _effective_sample_size(chains: np.ndarray) -> float:
    """ESS of draws ``[num_chains, num_draws]`` of one scalar: ``num_chains * num_draws / tau``.

    tau = 1 + 2 sum_k rho_k is the integrated autocorrelation time, rho_k the lag-k
    autocorrelation averaged over the chains, summed until it first drops below 0
    (the initial positive sequence).
    """
    x = chains - chains.mean(axis=1, keepdims=True)
    num_draws = x.shape[1]
    variance = np.mean(x**2)
    tau = 1.0
    for lag in range(1, num_draws):
        rho = np.sum(x[:, :-lag] * x[:, lag:]) / (x.shape[0] * num_draws * variance)
        if rho < 0:
            break
        tau += 2 * rho
    return x.size / tau


def test_sgld_noise_has_the_langevin_variance_and_a_typed_key():
    """Zero gradients, momentum 0: each update is N(0, 2 lr / T) per coordinate. Over
    n = 20000 independent draws the sample variance is within 4 standard errors
    (sqrt(2 / n) relative, for Gaussian draws) and the mean within 4 sigma / sqrt(n)."""
    lr, num_train, n = 1e-3, 50, 20000
    transform = sgmcmc.sgld(jax.random.key(0), lr, num_train)
    state = jax.eval_shape(transform.init, np.zeros(3, np.float32))  # its types, no program
    keys = [leaf for leaf in jax.tree.leaves(state)
            if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
    assert len(keys) == 1  # the transformation carries a typed key, not an int seed

    def step(state, _):
        updates, state = transform.update(jnp.zeros(3), state)
        return state, updates

    @jax.jit  # init and the n updates in one program
    def noise():
        return jax.lax.scan(step, transform.init(jnp.zeros(3)), None, length=n)[1]

    updates = np.asarray(noise(), np.float64)
    variance = 2 * lr / num_train
    assert np.all(np.abs(updates.var(0) / variance - 1) < 4 * math.sqrt(2 / n)), updates.var(0)
    assert np.all(np.abs(updates.mean(0)) < 4 * math.sqrt(variance / n))
    # same key, same noise; the gradient enters as -lr * g
    again, _ = jax.jit(lambda: sgmcmc.sgld(jax.random.key(0), lr, num_train).update(
        jnp.ones(3), sgmcmc.sgld(jax.random.key(0), lr, num_train).init(jnp.zeros(3))))()
    np.testing.assert_allclose(again, updates[0] - lr, rtol=1e-5)


def test_sgld_momentum_keeps_the_stationary_velocity_variance():
    """Zero gradients, momentum b: u_t = b u_{t-1} + N(0, 2 (1 - b) lr / T), whose stationary
    variance is 2 lr / (T (1 + b)). The draws are AR(1) with coefficient b; the tolerance is 4
    standard errors from their effective sample size (estimated from the autocorrelation)."""
    lr, num_train, beta, n = 1e-3, 50, 0.9, 40000
    transform = sgmcmc.sgld(jax.random.key(1), lr, num_train, momentum=beta)

    def step(state, _):
        updates, state = transform.update(jnp.zeros(4), state)
        return state, updates

    @jax.jit  # init and the n updates in one program
    def velocities():
        return jax.lax.scan(step, transform.init(jnp.zeros(4)), None, length=n)[1]

    updates = np.asarray(velocities(), np.float64)[1000:]  # from stationarity
    expected = 2 * lr / (num_train * (1 + beta))
    for i in range(4):
        ess = _effective_sample_size(updates[None, :, i])
        assert abs(updates[:, i].var() / expected - 1) < 4 * math.sqrt(2 / ess), (i, ess)


def _linear_regression(num_train: int, seed: int):
    """A Bayesian linear regression y = x.w + N(0, noise^2), w ~ N(0, prior_std^2 I), d = 2.

    Returns the data, the per-pair loss, the L2 scale giving that prior, and the exact
    posterior mean and covariance."""
    noise, prior_std = 0.5, 1.0
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_train, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + noise * rng.normal(size=num_train)).astype(np.float32)
    precision = x.T.astype(np.float64) @ x / noise**2 + np.eye(2) / prior_std**2
    covariance = np.linalg.inv(precision)
    mean = covariance @ x.T.astype(np.float64) @ y / noise**2

    def loss_fn(w, batch):  # [rows]: run_chain averages it over the batch's pairs
        return (batch.y - batch.x @ w) ** 2 / (2 * noise**2)

    # T * l2 |w|^2 = |w|^2 / (2 prior_std^2): the prior, as the agent writes it.
    l2 = 1.0 / (2 * prior_std**2 * num_train)
    return base.Data(x=jnp.asarray(x), y=jnp.asarray(y)), loss_fn, l2, mean, covariance, precision


def _chains(key, data, loss_fn, l2, lr, momentum, batch_size, num_chains=64, num_steps=21000,
            burn_in=1000, snapshot_every=10):
    """``num_chains`` independent chains (vmap), started at 0, as the agent runs them."""

    def one_chain(key):
        noise_key, batch_key = jax.random.split(key)
        num_train = data.x.shape[0]
        optimizer = optax.chain(optax.add_decayed_weights(2 * l2),
                                sgmcmc.sgld(noise_key, lr, num_train, momentum))
        return sgmcmc.run_chain(batch_key, loss_fn, jnp.zeros(2), data, optimizer,
                                num_steps=num_steps, burn_in=burn_in,
                                snapshot_every=snapshot_every, batch_size=batch_size)

    snapshots = jax.jit(lambda key: jax.vmap(one_chain)(jax.random.split(key, num_chains)))(key)
    return np.asarray(snapshots, np.float64)  # [chains, snapshots, 2]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_chain_samples_the_exact_posterior_of_bayesian_linear_regression(momentum):
    """Full-batch chains (T = 8 <= batch size) against the conjugate posterior.

    The step is set so that eps * lambda_max = 0.02 (eps = lr / T, lambda_max the largest
    posterior precision eigenvalue): the discretised chain's stationary variance is then
    biased by at most eps * lambda / 2 = 1% (exact for a Gaussian target; smaller still with
    momentum). Per coordinate, the snapshot mean must be within 4 standard errors
    sqrt(var / ESS) of the posterior mean, and the snapshot variance within
    4 sqrt(2 / ESS) + 1% of the posterior variance, with the ESS of the snapshots
    estimated from their autocorrelation (64 chains x 2000 snapshots)."""
    data, loss_fn, l2, mean, covariance, precision = _linear_regression(8, seed=0)
    lr = 0.02 * 8 / np.linalg.eigvalsh(precision).max()
    draws = _chains(jax.random.key(2), data, loss_fn, l2, lr, momentum, batch_size=100)
    assert draws.shape == (64, 2000, 2)
    for i in range(2):
        ess = _effective_sample_size(draws[:, :, i])
        assert ess > 1000, ess  # the test has power: the tolerances below are < 13%
        got_mean, got_var = draws[:, :, i].mean(), draws[:, :, i].var()
        var = covariance[i, i]
        assert abs(got_mean - mean[i]) < 4 * math.sqrt(var / ess), (i, got_mean, mean[i], ess)
        assert abs(got_var / var - 1) < 4 * math.sqrt(2 / ess) + 0.01, (i, got_var, var, ess)


def test_minibatch_chain_is_centred_on_the_posterior_mean():
    """T = 40 pairs, minibatches of 10: the gradient noise inflates the chain's variance
    (by about lr T V / (2 b) for gradient variance V), but for a Gaussian target the
    dynamics are linear with zero-mean noise, so the stationary mean is the exact
    posterior mean: checked within 4 standard errors from the ESS."""
    data, loss_fn, l2, mean, covariance, precision = _linear_regression(40, seed=1)
    lr = 0.02 * 40 / np.linalg.eigvalsh(precision).max()
    draws = _chains(jax.random.key(3), data, loss_fn, l2, lr, 0.0, batch_size=10,
                    num_chains=32, num_steps=11000)
    for i in range(2):
        ess = _effective_sample_size(draws[:, :, i])
        sd = math.sqrt(draws[:, :, i].var())
        assert abs(draws[:, :, i].mean() - mean[i]) < 4 * sd / math.sqrt(ess), (i, ess)
        assert 0.8 < draws[:, :, i].var() / covariance[i, i] < 1.5  # inflated a little, no more


@pytest.mark.parametrize("batch_size", [100, 10])  # every pair (the exact gradient); minibatches
def test_a_padded_chain_is_the_chain_of_its_pairs(batch_size):
    """The 40 pairs among 60 rows of garbage (``Data.mask``): the same minibatch draws and
    the same potential, so the same snapshots, up to float32 rounding (T is traced, the
    exact potential a weighted sum over 100 rows instead of a mean over 40)."""
    data, loss_fn, l2, *_ = _linear_regression(40, seed=2)
    mask = np.zeros(100, bool)
    mask[np.sort(np.random.default_rng(3).choice(100, 40, replace=False))] = True
    x, y = np.full((100, 2), 1e3, np.float32), np.full(100, -1e3, np.float32)
    x[mask], y[mask] = data.x, data.y
    padded = base.Data(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask))

    @jax.jit
    def chain(data):
        noise_key, batch_key = jax.random.split(jax.random.key(4))
        optimizer = optax.chain(optax.add_decayed_weights(2 * l2),
                                sgmcmc.sgld(noise_key, 1e-2, base.num_pairs(data)))
        return sgmcmc.run_chain(batch_key, loss_fn, jnp.zeros(2), data, optimizer,
                                num_steps=200, burn_in=100, snapshot_every=10,
                                batch_size=batch_size)

    np.testing.assert_allclose(chain(padded), chain(data), rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def trained():
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent = sgmcmc.make_sgmcmc_agent(SMALL, SHAPES)
    train = jax.jit(agent.train)
    return agent, data, prior, train(jax.random.key(0), data, prior), train


def test_snapshots_are_the_ensemble(trained):
    agent, _, _, snapshots, _ = trained
    assert agent.enn.num_indices == SMALL.num_snapshots == 10
    assert all(leaf.shape[0] == 10 for leaf in jax.tree.leaves(snapshots))


def test_sample_index_is_uniform_over_snapshots(trained):
    """10,000 draws: each snapshot's count within 4 binomial standard errors of 1000."""
    agent = trained[0]
    draws = jax.jit(lambda key: jax.vmap(agent.enn.sample_index)(jax.random.split(key, 10_000)))(
        jax.random.key(0))
    counts = np.bincount(np.asarray(draws), minlength=10)
    assert len(counts) == 10
    assert np.all(np.abs(counts - 1000) < 4 * math.sqrt(10_000 * 0.1 * 0.9)), counts


@pytest.mark.slow
def test_trains_under_vmap_with_minibatches_and_evaluates():
    """As the runner does: 3 temperatures trained together with jit(vmap(train)), here with
    minibatches of 4 from the 10 pairs, then evaluated through the member-counting path."""
    group = [p for p in PAPER.values() if p.num_train == 10 and p.seed == 0]
    loaded = [leaderboard.load_problem(p) for p in group]
    data = jax.tree.map(lambda *xs: np.stack(xs), *[d for _, d in loaded])
    prior = base.PriorKnowledge(input_dim=2, num_classes=2, env_hidden=(50, 50),
                                temperature=jnp.array([p.temperature for p in group]))
    agent = sgmcmc.make_sgmcmc_agent(dataclasses.replace(SMALL, batch_size=4), SHAPES)
    snapshots = jax.jit(jax.vmap(agent.train))(jax.random.split(jax.random.key(0), 3), data, prior)
    assert snapshots[0]["w"].shape == (3, 10, 2, 50)
    evaluate = jax.jit(evaluation.make_evaluator(agent.enn, tau=10, num_classes=2, num_test=20,
                                         num_samples=50))
    test = generative.sample_test_data(jax.random.key(2), loaded[0][0], 20, 10)
    result = evaluate(jax.random.key(1), jax.tree.map(lambda a: np.asarray(a)[0], snapshots), test)
    assert np.isfinite(result.kl) and bool(result.logits_valid)


def test_prior_l2_scale_follows_the_formula():
    prior = base.PriorKnowledge(input_dim=3, num_classes=2, env_hidden=(50, 50), temperature=0.5)
    config = sgmcmc.SGMCMCConfig(prior_variance=0.1)
    np.testing.assert_allclose(sgmcmc._l2_scale(config, 40, prior), 0.5 * 3 / (0.1 * 40))


def test_sweep_is_the_papers_grid():
    sweep = agents.sgmcmc_sweep()
    assert len(sweep) == len(set(sweep)) == 42
    assert {(c.learning_rate, c.prior_variance, c.momentum) for c in sweep} == {
        (lr, lam, m) for lr in (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2)
        for lam in (0.01, 0.1, 0.5) for m in (0.0, 0.9)}
    assert all(c.num_snapshots == 400 for c in sweep)


def test_registered_and_settable_from_the_command_line():
    spec = agents.get_agent("sgmcmc")
    assert spec.default == sgmcmc.SGMCMCConfig() and spec.default.num_snapshots == 400
    config = agents.parse_overrides(spec, ["momentum=0", "num_steps=20000", "burn_in=5000"])
    assert config == dataclasses.replace(spec.default, momentum=0.0, num_steps=20000,
                                         burn_in=5000)


@pytest.mark.parametrize(
    "changes, message",
    [({"burn_in": 500_000}, r"burn_in \(500000\) must be smaller than num_steps \(500000\)"),
     ({"burn_in": 600_000}, "must be smaller than num_steps"),
     ({"snapshot_every": 0}, "snapshot_every must be >= 1, got 0"),
     ({"burn_in": 100_500}, r"burn_in \(100500\) must be a multiple of snapshot_every \(1000\)"),
     ({"num_steps": 400_500}, "num_steps .* must be a multiple of snapshot_every"),
     ({"prior_variance": 0.0}, "prior_variance must be > 0, got 0.0"),
     ({"prior_variance": -1.0}, "prior_variance must be > 0"),
     ({"learning_rate": 0.0}, "learning_rate must be > 0"),
     ({"momentum": 1.0}, r"momentum must be in \[0, 1\), got 1.0"),
     ({"burn_in": -1000}, "burn_in must be >= 0"),
     ({"batch_size": 0}, "batch_size must be >= 1")],
)
def test_bad_configs_are_rejected(changes, message):
    with pytest.raises(ValueError, match=message):
        sgmcmc.SGMCMCConfig(**changes)
