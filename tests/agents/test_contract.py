"""The contract every built-in agent keeps, checked once for all of them.

Each agent trains a small config on one paper problem (temperature 0.1,
T = 10, seed 0); then its ENN must give float32 logits of shape [n, 2] for any
batch, the same samples for the same seeds, one network per index whatever
the batch, and draw only valid indices. Agent-specific behaviour is tested in
each agent's own file.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import (
    bbb,
    cnp,
    deep_kernel,
    dropout,
    ensemble,
    ensemble_plus,
    epinet,
    gp,
    host,
    hypermodel,
    knn,
    laplace,
    mlp,
    oracle_gp,
    random_forest,
    sgmcmc,
)

PROBLEM = next(p for p in leaderboard.get_sweep("paper").values()
               if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0)

# name -> (small config, expected enn.num_indices: None for a continuous index). Where an
# agent's own test file trains a small config on this problem's shapes, it is the same
# config, so the suite compiles that training program once (the compilation cache).
SMALL = {
    "mlp": (mlp.MLPConfig(num_steps=50), 1),
    "ensemble": (ensemble.EnsembleConfig(num_ensemble=4, num_steps=100), 4),
    "ensemble+": (ensemble_plus.EnsemblePlusConfig(num_ensemble=4, num_steps=60), 4),
    "hypermodel": (hypermodel.HypermodelConfig(num_steps=300, num_index_samples=8), None),
    "epinet": (epinet.EpinetConfig(num_steps=50, index_dim=4, num_index_samples=4), None),
    "dropout": (dropout.DropoutConfig(dropout_rate=0.3, num_steps=100), None),
    "bbb": (bbb.BBBConfig(num_steps=100, init_stddev=0.1), None),
    "sgmcmc": (sgmcmc.SGMCMCConfig(learning_rate=1e-3, num_steps=3000, burn_in=1000,
                                   snapshot_every=200), 10),
    "knn": (knn.KnnConfig(num_neighbors=5, weighting="distance"), 1),
    "random_forest": (random_forest.RandomForestConfig(num_trees=10), 1),
    "deep_kernel": (deep_kernel.DeepKernelConfig(num_steps=100, hidden=(16, 6),
                                                 sigma_squared=0.5), None),
    "laplace": (laplace.LaplaceConfig(num_steps=100, hidden=(16, 8)), None),
}


class _AsENN(NamedTuple):
    """A host agent seen as the evaluator sees it: an ENN over state handles."""

    enn: base.ENN


def _train_twice(agent, data, prior):
    """Two states trained from the same seed (for a host agent: two handles)."""
    if isinstance(agent, base.HostAgent):
        states = host.HostStates()
        enn = host.host_enn(agent, states, prior.num_classes)
        numpy_data = jax.device_get(data)
        handles = [np.int32(states.put(agent.train(0, numpy_data, prior))) for _ in range(2)]
        return _AsENN(enn), *handles
    train = jax.jit(agent.train)
    return agent, train(jax.random.key(0), data, prior), train(jax.random.key(0), data, prior)


def test_every_built_in_agent_is_covered():
    by_target = {t: {n for n, s in agents.AGENTS.items() if t in s.targets}
                 for t in ("classification", "regression")}
    assert set(SMALL) == by_target["classification"]
    assert set(REGRESSION_SMALL) == by_target["regression"]


# Regression agents on one regression-quick problem (d = 10, T = 10): one real output per
# input. The networks' small configs are their classification ones.
REGRESSION_PROBLEM = leaderboard.get_sweep("regression-quick")["regression/60"]
REGRESSION_SMALL = {
    **{name: SMALL[name][0] for name in ("mlp", "ensemble", "ensemble+", "hypermodel", "epinet",
                                         "dropout", "bbb", "sgmcmc")},
    "oracle_gp": oracle_gp.OracleGPConfig(),
    "gp": gp.GPConfig(num_steps=20),
    "cnp": cnp.CNPConfig(num_steps=20, encoder=(16, 16), decoder=(16,)),
}
# Agents whose index is a draw per call, not one function: the GPs' joint posterior draw at
# the call's inputs, the CNP's independent draws at each of them.
DRAW_PER_CALL = {"oracle_gp", "gp", "cnp"}


@pytest.mark.parametrize("name", list(REGRESSION_SMALL))
def test_regression_agents_give_one_finite_value_per_input_and_repeat_their_samples(name):
    data, prior, _ = REGRESSION_PROBLEM.instance()
    agent = agents.get_agent(name).make(REGRESSION_SMALL[name])
    train = jax.jit(agent.train)
    state, again = train(jax.random.key(0), data, prior), train(jax.random.key(0), data, prior)
    apply = jax.jit(agent.enn.apply)
    for n in (1, 7):
        x = jax.random.normal(jax.random.key(n), (n, REGRESSION_PROBLEM.input_dim))
        index = _index(agent, n)
        values = apply(state, x, index)
        assert values.shape == (n, 1) and values.dtype == jnp.float32, name
        assert np.all(np.isfinite(values)), name
        np.testing.assert_array_equal(values, apply(again, x, index), err_msg=name)
    # The networks are one function per index; the others' index is a draw per call (the
    # evaluator passes every input of a test sample in one call), so they are not checked
    # input by input.
    if name not in DRAW_PER_CALL:
        x = jax.random.normal(jax.random.key(4), (7, REGRESSION_PROBLEM.input_dim))
        together = apply(state, x, _index(agent, 5))
        alone = jnp.concatenate([apply(state, x[i:i + 1], _index(agent, 5)) for i in range(7)])
        np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.fixture(scope="module", params=list(SMALL))
def trained(request):
    name = request.param
    config, num_indices = SMALL[name]
    _, data = leaderboard.load_problem(PROBLEM)
    prior = leaderboard.prior_knowledge(PROBLEM)
    agent, state, again = _train_twice(agents.get_agent(name).make(config), data, prior)
    return name, agent, num_indices, state, again


def _index(agent, seed):
    return agent.enn.sample_index(jax.random.key(seed))


def test_logits_have_the_right_shape_and_dtype_for_any_batch(trained):
    name, agent, num_indices, state, _ = trained
    assert agent.enn.num_indices == num_indices, name
    apply = jax.jit(agent.enn.apply)
    for n in (1, 7, 64):
        x = jax.random.normal(jax.random.key(n), (n, PROBLEM.input_dim))
        logits = apply(state, x, _index(agent, n + 1))
        assert logits.shape == (n, PROBLEM.num_classes) and logits.dtype == jnp.float32, name
        assert np.all(np.isfinite(logits)), name


def test_same_seeds_give_identical_samples(trained):
    name, agent, _, state, again = trained
    apply = jax.jit(agent.enn.apply)  # called eagerly, each primitive would compile alone
    x = jax.random.normal(jax.random.key(2), (7, PROBLEM.input_dim))
    for seed in range(3):
        index = _index(agent, seed)
        np.testing.assert_array_equal(apply(state, x, index), apply(again, x, index),
                                      err_msg=name)


def test_one_index_is_one_network_for_every_input(trained):
    """Inputs give the same logits alone or together, so a joint prediction over
    tau inputs comes from one sampled network."""
    name, agent, _, state, _ = trained
    x = jax.random.normal(jax.random.key(4), (7, PROBLEM.input_dim))
    index = _index(agent, 5)
    apply = jax.jit(agent.enn.apply)
    together = apply(state, x, index)
    alone = jnp.concatenate([apply(state, x[i:i + 1], index) for i in range(7)])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5, err_msg=name)


def test_finite_index_sets_draw_valid_member_ids(trained):
    name, agent, num_indices, _, _ = trained
    if num_indices is None:
        pytest.skip(f"{name} has a continuous index")
    drawn = np.asarray(jax.vmap(agent.enn.sample_index)(jax.random.split(jax.random.key(0), 500)))
    assert np.issubdtype(drawn.dtype, np.integer), name
    assert drawn.min() >= 0 and drawn.max() < num_indices, name
    assert len(np.unique(drawn)) == num_indices, name  # 500 draws reach every member
