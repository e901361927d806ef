"""Each agent's regression head: one output, trained on the Gaussian likelihood of the known noise.

The loss an agent trains on is caught where it is handed to the optimiser loop
(``training.train_minibatch``, or ``sgmcmc.run_chain``), and evaluated at known
parameters on a known batch; it must equal the closed form
``mean (y - f(x))^2 / (2 noise_variance)`` (plus, for bbb, its KL term), with
``f`` computed independently from the agent's ENN. The noise variance, 0.04, is
far from 1, so a loss that forgot it (or used its square root) fails.

Each agent is trained, its loss evaluated and its ENN applied in one ``jax.jit`` program,
and the closed forms are NumPy float64: a handful of compiles, not one per operation.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

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
PRIOR = base.RegressionPriorKnowledge(input_dim=INPUT_DIM, kernel="relu_nngp",
                                      noise_variance=NOISE_VARIANCE)
SHAPES = base.Shapes(input_dim=INPUT_DIM, num_outputs=1)
_x = np.random.default_rng(0).normal(size=(NUM_TRAIN, INPUT_DIM))
DATA = base.Data(x=jnp.asarray(_x, jnp.float32),
                 y=jnp.asarray(np.sin(2 * _x[:, 0]) + 0.5 * _x[:, 1], jnp.float32))


def _gaussian_nll(outputs, y):
    """The closed form, in float64: ``mean (y - f)^2 / (2 noise_variance)`` over every axis."""
    f = np.asarray(outputs, np.float64)[..., 0]
    return np.mean((np.asarray(y, np.float64) - f) ** 2) / (2 * NOISE_VARIANCE)


def _caught(monkeypatch, agent, evaluate=None, module=training, name="train_minibatch"):
    """Trains ``agent``, in one ``jax.jit`` program, with its optimiser loop replaced by one
    that records what it is handed and returns the initial parameters. Returns the state,
    ``evaluate(state, loss_fn, data, params)`` computed in that same program (``loss_fn``,
    ``data`` and ``params``: what the loop was handed), and the data the loop was handed
    (the very object when the agent passes its training data through)."""
    caught = {}

    def loop(key, loss_fn, params, data, optimizer, *args, **kwargs):
        caught.update(loss_fn=loss_fn, data=data, params=params)
        if module is sgmcmc:  # the chain returns snapshots: here one, the start
            return jax.tree.map(lambda p: p[None], params)
        return params, jnp.zeros(())

    monkeypatch.setattr(module, name, loop)

    def train_and_evaluate(key):
        state = agent.train(key, DATA, PRIOR)
        if evaluate is None:
            return state, None
        return state, evaluate(state, caught["loss_fn"], caught["data"], caught["params"])

    state, evaluated = jax.jit(train_and_evaluate)(jax.random.key(1))
    return state, evaluated, caught["data"]


def test_data_loss_is_the_gaussian_negative_log_likelihood_up_to_its_constant():
    outputs = np.random.default_rng(2).normal(size=(3, NUM_TRAIN, 1)).astype(np.float32)
    loss = jax.jit(training.data_loss, static_argnums=2)(outputs, DATA.y, PRIOR)
    log_density = scipy.stats.norm.logpdf(np.asarray(DATA.y, np.float64),
                                          outputs[..., 0].astype(np.float64),
                                          np.sqrt(NOISE_VARIANCE))
    constant = 0.5 * np.log(2 * np.pi * NOISE_VARIANCE)
    np.testing.assert_allclose(loss, -log_density - constant, rtol=1e-5, atol=1e-5)
    assert training.temperature(PRIOR) == 1.0


def test_dropout_trains_on_the_gaussian_likelihood(monkeypatch):
    agent = dropout.make_dropout_agent(dropout.DropoutConfig(dropout_rate=0.0), SHAPES)  # masks 1

    def evaluate(params, loss_fn, data, _):
        return (agent.enn.apply(params, DATA.x, jax.random.key(3)),
                loss_fn(jax.random.key(4), params, data))

    _, (outputs, loss), data = _caught(monkeypatch, agent, evaluate)
    assert data is DATA
    np.testing.assert_allclose(loss, _gaussian_nll(outputs, DATA.y), rtol=1e-5)


def test_bbb_loss_is_the_gaussian_elbo_with_the_kl_weighted_by_d_over_t(monkeypatch):
    """With every posterior stddev 1e-6 the weight draws are the means (to 1e-6), so the
    data term is the means' Gaussian NLL; the KL is exact, weighted d / T (temperature 1)."""
    config = bbb.BBBConfig(hidden=(4,))  # 17 parameters, so the KL does not swamp the data term
    agent = bbb.make_bbb_agent(config, SHAPES)
    stddev = 1e-6

    def evaluate(posterior, loss_fn, data, _):
        known = bbb.Posterior(posterior.mean, jax.tree.map(
            lambda m: jnp.full_like(m, np.log(np.expm1(stddev))), posterior.mean))
        return networks.apply_mlp(posterior.mean, DATA.x), loss_fn(jax.random.key(4), known, data)

    posterior, (outputs, loss), data = _caught(monkeypatch, agent, evaluate)
    assert data is DATA
    means = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(posterior.mean)]
    kl = sum(np.sum(np.log(config.sigma_1 / stddev) + (stddev**2 + m**2)
                    / (2 * config.sigma_1**2) - 0.5) for m in means)
    data_term = _gaussian_nll(outputs, DATA.y)
    expected = data_term + INPUT_DIM / NUM_TRAIN * kl
    assert data_term > 1.0  # the data term is a visible part of the loss
    np.testing.assert_allclose(loss, expected, rtol=1e-4)


def test_sgmcmc_potential_is_the_gaussian_log_posterior(monkeypatch):
    """The chain's loss is the Gaussian NLL of each pair; its weight prior's L2 is d / (lambda T)
    (variance lambda / (2 d): temperature 1)."""
    config = sgmcmc.SGMCMCConfig(num_steps=2, burn_in=1, snapshot_every=1)
    agent = sgmcmc.make_sgmcmc_agent(config, SHAPES)

    def evaluate(snapshots, loss_fn, data, params):
        return agent.enn.apply(snapshots, DATA.x, 0), loss_fn(params, data).mean()

    _, (outputs, loss), data = _caught(monkeypatch, agent, evaluate, sgmcmc, "run_chain")
    assert data is DATA
    np.testing.assert_allclose(loss, _gaussian_nll(outputs, DATA.y), rtol=1e-5)
    np.testing.assert_allclose(sgmcmc._l2_scale(config, NUM_TRAIN, PRIOR),
                               INPUT_DIM / (config.prior_variance * NUM_TRAIN), rtol=1e-6)


def test_ensemble_plus_members_with_their_priors_train_on_the_gaussian_likelihood(monkeypatch):
    """Every member, prior function included (scale prior_scale: temperature 1), against
    the targets of the drawn points."""
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=3)
    agent = ensemble_plus.make_ensemble_plus_agent(config, SHAPES)
    ids = np.array([0, 3, 3, 5])

    def evaluate(state, loss_fn, point_ids, _):
        members = jnp.stack([agent.enn.apply(state, DATA.x[ids], m) for m in range(3)])
        batch = base.Data(x=point_ids.x[ids], y=point_ids.y[ids])
        return members, loss_fn(jax.random.key(4), state.params, batch)

    state, (members, loss), _ = _caught(monkeypatch, agent, evaluate)
    np.testing.assert_allclose(state.prior_scale, config.prior_scale, rtol=1e-6)
    np.testing.assert_allclose(loss, _gaussian_nll(members, np.asarray(DATA.y)[ids]), rtol=1e-5)


def test_hypermodel_trains_on_the_gaussian_likelihood(monkeypatch):
    """A hypermodel whose index weights ``a`` are zero is one network for every index."""
    config = hypermodel.HypermodelConfig(prior_scale=0.0, num_index_samples=4)
    agent = hypermodel.make_hypermodel_agent(config, SHAPES)

    def evaluate(state, loss_fn, point_ids, _):
        known = state.params._replace(a=jax.tree.map(jnp.zeros_like, state.params.a))
        f = agent.enn.apply(state._replace(params=known), DATA.x, jnp.zeros(config.index_dim))
        return f, loss_fn(jax.random.key(4), known, point_ids)

    _, (f, loss), _ = _caught(monkeypatch, agent, evaluate)
    np.testing.assert_allclose(loss, _gaussian_nll(f, DATA.y), rtol=1e-5)
    # The prior's scale is prior_scale itself on regression (temperature 1).
    scaled = _caught(monkeypatch, hypermodel.make_hypermodel_agent(
        dataclasses.replace(config, prior_scale=2.0, temperature_scaling="linear"), SHAPES))[0]
    np.testing.assert_allclose(scaled.prior_scale, 2.0, rtol=1e-6)


def test_epinet_trains_on_the_gaussian_likelihood(monkeypatch):
    """With the learnable epinet zeroed and no prior, every index is the base network."""
    config = epinet.EpinetConfig(prior_scale=0.0, index_dim=4, num_index_samples=4)
    agent = epinet.make_epinet_agent(config, SHAPES)

    def evaluate(state, loss_fn, data, params):
        zeroed = jax.tree.map(jnp.zeros_like, state.epinet)
        f = agent.enn.apply(state._replace(epinet=zeroed), DATA.x, jnp.ones(4))
        return f, loss_fn(jax.random.key(4), params._replace(epinet=zeroed), data)

    _, (f, loss), data = _caught(monkeypatch, agent, evaluate)
    assert data is DATA
    np.testing.assert_allclose(loss, _gaussian_nll(f, DATA.y), rtol=1e-5)
    scaled = _caught(monkeypatch, epinet.make_epinet_agent(
        dataclasses.replace(config, prior_scale=0.3), SHAPES))[0]
    np.testing.assert_allclose(scaled.prior_scale, 0.3, rtol=1e-6)  # temperature 1


def test_ensemble_plus_regression_environment_prior_is_the_kernels_network(monkeypatch):
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=2)
    state = _caught(monkeypatch, ensemble_plus.make_ensemble_plus_agent(config, SHAPES))[0]
    shapes = [tuple(leaf.shape) for leaf in jax.tree.leaves(state.prior_params)]
    width = ensemble_plus.REGRESSION_PRIOR_WIDTH
    assert sorted(shapes) == sorted([(2, INPUT_DIM, width), (2, width), (2, width, 1), (2, 1)])
    assert np.all(np.asarray(state.prior_params[1]["b"]) == 0)  # no output bias, as the kernel
    other_kernel = dataclasses.replace(PRIOR, kernel="rbf")
    train = jax.jit(lambda key: ensemble_plus.make_ensemble_plus_agent(config, SHAPES).train(
        key, DATA, other_kernel))  # refused while tracing: nothing is compiled
    with pytest.raises(ValueError, match="draws networks of the 'relu_nngp' kernel, got 'rbf'"):
        train(jax.random.key(0))


def test_the_vae_prior_is_refused_on_regression_in_one_line(tmp_path, capsys):
    config = ensemble_plus.EnsemblePlusConfig(num_ensemble=2, prior_function="vae")
    with pytest.raises(ValueError, match="prior_function='vae' is for classification only"):
        ensemble_plus.make_ensemble_plus_agent(config, SHAPES).train(jax.random.key(0), DATA, PRIOR)
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
