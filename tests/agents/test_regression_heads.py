"""Each agent's regression head: one output, trained on the Gaussian likelihood of the known noise.

The loss an agent trains on is caught where it is handed to the optimiser loop
(``training.train_minibatch``, or ``sgmcmc.run_chain``), and evaluated at known
parameters on a known batch; it must equal the closed form
``mean (y - f(x))^2 / (2 noise_variance)`` (plus, for bbb, its KL term), with
``f`` computed independently from the agent's ENN. The noise variance, 0.04, is
far from 1, so a loss that forgot it (or used its square root) fails.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, cli, networks
from neural_testbed.agents import (
    bbb,
    dropout,
    ensemble_plus,
    epinet,
    hypermodel,
    registry,
    sgmcmc,
    training,
)

NOISE_VARIANCE = 0.04
NUM_TRAIN, INPUT_DIM = 8, 2
PRIOR = base.RegressionPriorKnowledge(input_dim=INPUT_DIM, num_train=NUM_TRAIN,
                                      kernel="relu_nngp", noise_variance=NOISE_VARIANCE)
_x = jax.random.normal(jax.random.key(0), (NUM_TRAIN, INPUT_DIM))
DATA = base.Data(x=_x, y=jnp.sin(2 * _x[:, 0]) + 0.5 * _x[:, 1])


def _gaussian_nll(outputs, y):
    """The closed form, in float64: ``mean (y - f)^2 / (2 noise_variance)`` over every axis."""
    f = np.asarray(outputs, np.float64)[..., 0]
    return np.mean((np.asarray(y, np.float64) - f) ** 2) / (2 * NOISE_VARIANCE)


def _caught(monkeypatch, agent, module=training, name="train_minibatch"):
    """Trains ``agent`` with its optimiser loop replaced by one that records the loss and
    returns the initial parameters; returns (state, loss_fn, the data the loop was given,
    the parameters it was given)."""
    caught = {}

    def loop(key, loss_fn, params, data, optimizer, *args, **kwargs):
        caught.update(loss_fn=loss_fn, data=data, params=params)
        if module is sgmcmc:  # the chain returns snapshots: here one, the start
            return jax.tree.map(lambda p: p[None], params)
        return params, jnp.zeros(())

    monkeypatch.setattr(module, name, loop)
    state = agent.train(jax.random.key(1), DATA, PRIOR)
    return state, caught["loss_fn"], caught["data"], caught["params"]


def test_data_loss_is_the_gaussian_negative_log_likelihood_up_to_its_constant():
    outputs = jax.random.normal(jax.random.key(2), (3, NUM_TRAIN, 1))
    loss = training.data_loss(outputs, DATA.y, PRIOR)
    log_density = jax.scipy.stats.norm.logpdf(DATA.y, outputs[..., 0], np.sqrt(NOISE_VARIANCE))
    constant = 0.5 * np.log(2 * np.pi * NOISE_VARIANCE)
    np.testing.assert_allclose(loss, -log_density - constant, rtol=1e-5, atol=1e-5)
    assert training.output_size(PRIOR) == 1 and training.temperature(PRIOR) == 1.0


def test_dropout_trains_on_the_gaussian_likelihood(monkeypatch):
    agent = dropout.make_dropout_agent(dropout.DropoutConfig(dropout_rate=0.0))  # masks are 1
    params, loss_fn, data, _ = _caught(monkeypatch, agent)
    assert data is DATA
    expected = _gaussian_nll(agent.enn.apply(params, DATA.x, jax.random.key(3)), DATA.y)
    np.testing.assert_allclose(loss_fn(jax.random.key(4), params, DATA), expected, rtol=1e-5)


def test_bbb_loss_is_the_gaussian_elbo_with_the_kl_weighted_by_d_over_t(monkeypatch):
    """With every posterior stddev 1e-6 the weight draws are the means (to 1e-6), so the
    data term is the means' Gaussian NLL; the KL is exact, weighted d / T (temperature 1)."""
    config = bbb.BBBConfig(hidden=(4,))  # 17 parameters, so the KL does not swamp the data term
    agent = bbb.make_bbb_agent(config)
    posterior, loss_fn, _, _ = _caught(monkeypatch, agent)
    stddev = 1e-6
    known = bbb.Posterior(posterior.mean, jax.tree.map(
        lambda m: jnp.full_like(m, np.log(np.expm1(stddev))), posterior.mean))
    means = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(posterior.mean)]
    kl = sum(np.sum(np.log(config.sigma_1 / stddev) + (stddev**2 + m**2)
                    / (2 * config.sigma_1**2) - 0.5) for m in means)
    data_term = _gaussian_nll(networks.apply_mlp(posterior.mean, DATA.x), DATA.y)
    expected = data_term + INPUT_DIM / NUM_TRAIN * kl
    assert data_term > 1.0  # the data term is a visible part of the loss
    np.testing.assert_allclose(loss_fn(jax.random.key(4), known, DATA), expected, rtol=1e-4)


def test_sgmcmc_potential_is_the_gaussian_log_posterior(monkeypatch):
    """The chain's loss is the per-pair Gaussian NLL; its weight prior's L2 is d / (lambda T)
    (variance lambda / (2 d): temperature 1)."""
    config = sgmcmc.SGMCMCConfig(num_steps=2, burn_in=1, snapshot_every=1)
    agent = sgmcmc.make_sgmcmc_agent(config)
    snapshots, loss_fn, data, params = _caught(monkeypatch, agent, sgmcmc, "run_chain")
    assert data is DATA
    expected = _gaussian_nll(agent.enn.apply(snapshots, DATA.x, 0), DATA.y)
    np.testing.assert_allclose(loss_fn(params, DATA), expected, rtol=1e-5)
    np.testing.assert_allclose(sgmcmc._l2_scale(config, PRIOR),
                               INPUT_DIM / (config.prior_variance * NUM_TRAIN), rtol=1e-6)


def test_ensemble_plus_members_with_their_priors_train_on_the_gaussian_likelihood(monkeypatch):
    """Every member, prior function included (scale prior_scale: temperature 1), against
    the targets of the drawn points."""
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=3)
    agent = ensemble_plus.make_ensemble_plus_agent(config)
    state, loss_fn, point_ids, _ = _caught(monkeypatch, agent)
    np.testing.assert_allclose(state.prior_scale, config.prior_scale, rtol=1e-6)
    ids = jnp.array([0, 3, 3, 5])
    members = jnp.stack([agent.enn.apply(state, DATA.x[ids], m) for m in range(3)])
    expected = _gaussian_nll(members, DATA.y[ids])
    batch = base.Data(x=point_ids.x[ids], y=point_ids.y[ids])
    np.testing.assert_allclose(loss_fn(jax.random.key(4), state.params, batch), expected,
                               rtol=1e-5)


def test_hypermodel_trains_on_the_gaussian_likelihood(monkeypatch):
    """A hypermodel whose index weights ``a`` are zero is one network for every index."""
    config = hypermodel.HypermodelConfig(prior_scale=0.0, num_index_samples=4)
    agent = hypermodel.make_hypermodel_agent(config)
    state, loss_fn, point_ids, _ = _caught(monkeypatch, agent)
    known = state.params._replace(a=jax.tree.map(jnp.zeros_like, state.params.a))
    f = agent.enn.apply(state._replace(params=known), DATA.x, jnp.zeros(config.index_dim))
    expected = _gaussian_nll(f, DATA.y)
    loss = loss_fn(jax.random.key(4), known, point_ids)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    # The prior's scale is prior_scale itself on regression (temperature 1).
    scaled = _caught(monkeypatch, hypermodel.make_hypermodel_agent(
        dataclasses.replace(config, prior_scale=2.0, temperature_scaling="linear")))[0]
    np.testing.assert_allclose(scaled.prior_scale, 2.0, rtol=1e-6)


def test_epinet_trains_on_the_gaussian_likelihood(monkeypatch):
    """With the learnable epinet zeroed and no prior, every index is the base network."""
    config = epinet.EpinetConfig(prior_scale=0.0, index_dim=4, num_index_samples=4)
    agent = epinet.make_epinet_agent(config)
    state, loss_fn, data, params = _caught(monkeypatch, agent)
    assert data is DATA
    zeroed = jax.tree.map(jnp.zeros_like, state.epinet)
    expected = _gaussian_nll(
        agent.enn.apply(state._replace(epinet=zeroed), DATA.x, jnp.ones(4)), DATA.y)
    known = params._replace(epinet=zeroed)
    np.testing.assert_allclose(loss_fn(jax.random.key(4), known, DATA), expected, rtol=1e-5)
    scaled = _caught(monkeypatch, epinet.make_epinet_agent(
        dataclasses.replace(config, prior_scale=0.3)))[0]
    np.testing.assert_allclose(scaled.prior_scale, 0.3, rtol=1e-6)  # temperature 1


def test_ensemble_plus_regression_environment_prior_is_the_kernels_network(monkeypatch):
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=2)
    state = _caught(monkeypatch, ensemble_plus.make_ensemble_plus_agent(config))[0]
    shapes = [tuple(leaf.shape) for leaf in jax.tree.leaves(state.prior_params)]
    width = ensemble_plus.REGRESSION_PRIOR_WIDTH
    assert sorted(shapes) == sorted([(2, INPUT_DIM, width), (2, width), (2, width, 1), (2, 1)])
    assert np.all(np.asarray(state.prior_params[1]["b"]) == 0)  # no output bias, as the kernel
    other_kernel = dataclasses.replace(PRIOR, kernel="rbf")
    with pytest.raises(ValueError, match="draws networks of the 'relu_nngp' kernel, got 'rbf'"):
        ensemble_plus.make_ensemble_plus_agent(config).train(jax.random.key(0), DATA, other_kernel)


def test_the_vae_prior_is_refused_on_regression_in_one_line(tmp_path, capsys):
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=2, prior_function="vae")
    with pytest.raises(ValueError, match="prior_function='vae' is for classification only"):
        ensemble_plus.make_ensemble_plus_agent(config).train(jax.random.key(0), DATA, PRIOR)
    ensemble_plus.check_target(config, "classification")  # allowed there
    spec = registry.get_agent("ensemble+")
    assert spec.check_target is ensemble_plus.check_target
    db = tmp_path / "r.db"
    code = cli.main(["run", "--agent", "ensemble+", "--set", "prior_function=vae",
                     "--sweep", "regression-quick", "--db", str(db)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "prior_function='vae' is for classification only" in err
    assert not db.exists()  # refused before any work
