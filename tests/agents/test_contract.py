"""The agent contract (``neural_testbed.base``), checked once for every registered agent.

Each agent is built for one small problem's shapes with a small config (the table
below) and trained on it: a classification problem (temperature 0.1, T = 10, d = 2,
K = 2), or for the regression-only agents a regression one (d = 10, T = 10). Then:

- ``train`` returns a pytree of arrays, and the same key gives the same samples;
- ``apply`` gives finite float32 outputs ``[n, num_outputs]``, one network per index
  whatever the batch (an agent whose index is a draw per call is exempt), different
  networks for different indices of a stochastic agent, and a finite index set draws
  valid member ids;
- an agent that ``accepts_padding`` predicts the same trained on its pairs with rows
  of garbage among them (``Data.mask``) as on its pairs alone;
- an agent that declares ``batchable`` fields gives, vmapped over two configs that
  differ in every declared field (built as the runner builds them,
  ``config_batches``), what each config gives alone. Padding and batching are
  checked in one program per agent, padded and batched at once as a sweep runs it;
- an agent of both targets is built for the regression problem too, and gives one
  value per input there (traced, not compiled: its code is the classification one
  but for the data term, which ``test_regression_heads.py`` checks).

Each agent's training compiles once per program it needs (its own; padded and
batched; the second config's), at the smallest sizes that exercise every code path.
Agent-specific behaviour (the science) is tested in each agent's own file.
"""

import dataclasses
import functools
from typing import Any, NamedTuple

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
    hmc,
    host,
    hypermodel,
    knn,
    laplace,
    logistic,
    mlp,
    neural_process,
    nng,
    oracle_gp,
    random_forest,
    sgmcmc,
    svgp,
    trivial,
)
from neural_testbed.leaderboard import config_batches

PROBLEMS = {
    "classification": next(p for p in leaderboard.get_sweep("paper").values()
                           if p.temperature == 0.1 and p.num_train == 10 and p.seed == 0),
    "regression": leaderboard.get_sweep("regression-quick")["regression/60"],
}

# Every built-in agent: a small config (few steps, small networks), the same for both
# targets, so each training program compiles once per target.
SMALL = {
    "mlp": mlp.MLPConfig(num_steps=20, hidden=(16,)),
    "logistic": logistic.LogisticConfig(num_steps=20),
    "ensemble": ensemble.EnsembleConfig(num_ensemble=3, num_steps=20, hidden=(16,)),
    "ensemble+": ensemble_plus.EnsemblePlusConfig(num_ensemble=3, num_steps=20, hidden=(16,)),
    # A bootstrap: its weights are drawn per pair, which padding must not shift.
    "hypermodel": hypermodel.HypermodelConfig(num_steps=20, num_index_samples=4, hidden=(16,),
                                              bootstrap="exponential"),
    "epinet": epinet.EpinetConfig(num_steps=20, index_dim=3, num_index_samples=3, hidden=(16,),
                                  epinet_hidden=(8,), prior_hidden=(4,)),
    "dropout": dropout.DropoutConfig(dropout_rate=0.3, num_steps=20, hidden=(16,)),
    "bbb": bbb.BBBConfig(num_steps=20, num_samples=2, init_stddev=0.1, hidden=(16,)),
    # T <= batch_size: the exact gradient, which padding turns into weighted rows (the
    # minibatch case is test_sgmcmc.py's).
    "sgmcmc": sgmcmc.SGMCMCConfig(learning_rate=1e-3, num_steps=60, burn_in=20,
                                  snapshot_every=10, hidden=(16,)),
    "hmc": hmc.HMCConfig(num_chains=2, num_warmup_steps=5, num_sampling_steps=5, thinning=1,
                         max_num_doublings=2, num_probe_inputs=4),
    "nng": nng.NNGConfig(num_steps=20, num_samples=2, hidden=(16,)),
    "svgp": svgp.SVGPConfig(num_inducing=4, num_steps=10, num_samples=2),
    "knn": knn.KnnConfig(num_neighbors=5, weighting="distance"),
    "random_forest": random_forest.RandomForestConfig(num_trees=10),
    "deep_kernel": deep_kernel.DeepKernelConfig(num_steps=20, hidden=(16, 6), sigma_squared=0.5),
    "laplace": laplace.LaplaceConfig(num_steps=20, hidden=(16, 8)),
    "oracle_gp": oracle_gp.OracleGPConfig(),
    "gp": gp.GPConfig(num_steps=10),
    "cnp": cnp.CNPConfig(num_steps=10, encoder=(16, 16), decoder=(16,)),
    "np": neural_process.NPConfig(num_steps=10, encoder=(16, 16), latent_encoder=(16,),
                                  latent_dim=4, decoder=(16,)),
    "anp": neural_process.ANPConfig(num_steps=10, encoder=(16, 16), latent_encoder=(16,),
                                    latent_dim=4, decoder=(16,), query_encoder=(8,),
                                    num_heads=2),
    "uniform": trivial.TrivialConfig(),
    "average_class_probs": trivial.TrivialConfig(),
}
# Agents whose index is a draw per call, not one function: the GPs' joint posterior draw at
# the call's inputs (svgp's too), the CNP's independent draws at each of them, the latent neural
# processes' decoder draws at each of them (given one latent draw).
DRAW_PER_CALL = {"oracle_gp", "gp", "svgp", "cnp", "np", "anp"}
NAMES = list(SMALL)
# hmc's NUTS compiles for half a minute per program (its tree building), so its checks
# are in the slow tier; its known-answer test is tests/agents/test_hmc.py.
CASES = [pytest.param(n, marks=pytest.mark.slow) if n == "hmc" else n for n in NAMES]
SEEDS = np.arange(4, dtype=np.int32)  # the keys of the belief indices every check draws


def test_every_built_in_agent_is_in_the_table():
    assert set(SMALL) == set(agents.AGENTS), "give each registered agent a small config"


class _Host(NamedTuple):
    """A host agent as the evaluator sees it: an ENN over handles into its states."""

    host: base.HostAgent
    states: host.HostStates
    enn: base.ENN


class Trained(NamedTuple):
    name: str
    spec: agents.AgentSpec
    agent: Any  # base.Agent, or a host agent as _Host
    shapes: base.Shapes
    data: base.Data
    prior: Any
    state: Any
    train: Any  # (data, prior) -> state, from key 0
    outputs: Any  # jitted (state, x [n, d], seeds [I]) -> (together, alone) [I, n, outputs]


def _trainer(agent):
    """``(data, prior) -> state`` from key 0; for a host agent, a handle into its table
    (the runner's way)."""
    if isinstance(agent, _Host):
        return lambda data, prior: np.int32(agent.states.put(
            agent.host.train(0, jax.device_get(data), prior)))
    train = jax.jit(agent.train)
    return lambda data, prior: train(jax.random.key(0), data, prior)


@functools.cache
def _instance(target: str) -> base.ProblemInstance:
    return PROBLEMS[target].instance()


def _outputs_program(enn: base.ENN):
    """``(state, x, seeds) -> (together, alone)``: the outputs of one index per seed at
    ``x``, all inputs in one call and each input alone, in one compiled program."""
    def outputs(state, x, seeds):
        def of_index(index):
            together = enn.apply(state, x, index)
            alone = jax.vmap(lambda row: enn.apply(state, row[None], index)[0])(x)
            return together, alone
        return jax.vmap(of_index)(jax.vmap(enn.sample_index)(jax.vmap(jax.random.key)(seeds)))
    return jax.jit(outputs)


def _primary(spec) -> str:
    return spec.targets[0]


@pytest.fixture(scope="module", params=CASES)
def trained(request) -> Trained:
    name = request.param
    spec = agents.get_agent(name)
    problem = PROBLEMS[_primary(spec)]
    shapes = base.Shapes.of(problem)
    agent = spec.make(SMALL[name], shapes)
    assert isinstance(agent, (base.Agent, base.HostAgent)), name
    if isinstance(agent, base.HostAgent):
        states = host.HostStates()
        agent = _Host(agent, states, host.host_enn(agent, states, shapes.num_outputs))
    data, prior, _ = _instance(_primary(spec))
    train = _trainer(agent)
    return Trained(name, spec, agent, shapes, data, prior, train(data, prior), train,
                   _outputs_program(agent.enn))


@functools.cache
def _inputs(target: str):
    """Seven inputs of the target's problem (drawn on first use: every test process
    collects every file)."""
    with jax.ensure_compile_time_eval():  # concrete, even if first asked for inside a trace
        return jax.random.normal(jax.random.key(4),
                                 (7, base.Shapes.of(PROBLEMS[target]).input_dim))


def _x(trained):
    return _inputs(_primary(trained.spec))


def test_train_gives_a_pytree_and_the_same_key_the_same_samples(trained):
    name, _, agent, _, data, prior, state, train, outputs = trained
    if not isinstance(agent, _Host):  # a host agent's state is any Python object
        assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(state)), name
    again = train(data, prior)
    np.testing.assert_array_equal(outputs(state, _x(trained), SEEDS)[0],
                                  outputs(again, _x(trained), SEEDS)[0], err_msg=name)


def test_outputs_are_finite_float32_of_the_problems_shape_one_network_per_index(trained):
    """The outputs of inputs together are those of each alone, so a joint prediction
    over tau inputs comes from one sampled network (an agent whose index is a draw per
    call is exempt: the evaluator passes every input of a test sample in one call)."""
    name, _, _, shapes, *_, state, _, outputs = trained
    together, alone = outputs(state, _x(trained), SEEDS)
    assert together.shape == (len(SEEDS), 7, shapes.num_outputs), name
    assert together.dtype == jnp.float32 and np.all(np.isfinite(together)), name
    assert np.all(np.isfinite(alone)), name
    if name not in DRAW_PER_CALL:
        np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5, err_msg=name)


def test_indices_are_valid_and_differ_where_the_belief_is_not_one_network(trained):
    name, _, agent, *_, state, _, outputs = trained
    num_indices = agent.enn.num_indices
    if num_indices is not None:
        draw = jax.jit(jax.vmap(lambda seed: agent.enn.sample_index(jax.random.key(seed))))
        drawn = np.asarray(draw(jnp.arange(500)))
        assert np.issubdtype(drawn.dtype, np.integer), name
        assert drawn.min() >= 0 and drawn.max() < num_indices, name
        assert len(np.unique(drawn)) == num_indices, name  # 500 draws reach every member
    if num_indices != 1:
        draws = outputs(state, _x(trained), SEEDS)[0]
        assert any(not np.allclose(draws[0], d) for d in draws[1:]), name


def _padded(data: base.Data) -> base.Data:
    """``data``'s pairs in their order among as many rows of garbage (huge inputs,
    arbitrary labels), ``mask`` marking the pairs."""
    rows = 2 * data.x.shape[0] + 3
    mask = np.zeros(rows, bool)
    mask[np.sort(np.random.default_rng(0).choice(rows, data.x.shape[0], replace=False))] = True
    x_key, y_key = jax.random.split(jax.random.key(9))
    x = 1e3 * jax.random.normal(x_key, (rows, data.x.shape[1]))
    if data.y.dtype == jnp.int32:
        y = jax.random.randint(y_key, (rows,), 0, int(data.y.max()) + 1)
    else:
        y = 1e3 * jax.random.normal(y_key, (rows,))
    return base.Data(x=x.at[mask].set(data.x), y=y.at[mask].set(data.y), mask=jnp.asarray(mask))


# Padded and unpadded training differ only in float32 rounding: T is a traced count
# instead of a constant, so e.g. the decay lambda / T is divided in float32 rather than
# folded in double (1 ulp), which a few Adam steps carry to about 1e-6 of the outputs.
# Batched and single programs likewise (the config's floats traced instead of folded
# into constants, matrix products batched).
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _other(config, names):
    """``config`` with every declared field moved (halved, or 0.1 from 0): still valid."""
    return dataclasses.replace(config, **{n: getattr(config, n) / 2 if getattr(config, n)
                                          else 0.1 for n in names})


@functools.cache
def _as_the_runner_runs_it(name: str):
    """The outputs of the agent's configs trained as a sweep trains them: on padded data
    where it ``accepts_padding``, and vmapped over the small config and :func:`_other`
    where it declares ``batchable`` fields (``config_batches``, as the runner builds
    them); with those configs. One program checks both, as a sweep runs both at once."""
    spec = agents.get_agent(name)
    shapes = base.Shapes.of(PROBLEMS[_primary(spec)])
    data, prior, _ = _instance(_primary(spec))
    if spec.make(SMALL[name], shapes).accepts_padding:
        data = _padded(data)
    configs = (SMALL[name], _other(SMALL[name], spec.batchable)) if spec.batchable else (
        SMALL[name],)
    names = config_batches.array_fields(configs, spec.batchable)
    assert set(names) == set(spec.batchable), name  # each declared field is exercised
    x = _inputs(_primary(spec))

    def one(values):  # one config's agent, inside the vmap over configs (as the runner)
        made = spec.make(config_batches.with_arrays(configs[0], names, values), shapes)
        return _outputs_program(made.enn)(made.train(jax.random.key(0), data, prior), x,
                                          SEEDS)[0]

    return configs, jax.jit(jax.vmap(one))(config_batches.values_of(configs, names))


def test_an_agent_that_accepts_padding_predicts_as_on_its_pairs_alone(trained):
    """Trained on its pairs with rows of garbage among them (in the batch of configs the
    agent declares, as a sweep pads and batches at once)."""
    name, _, agent, *_, state, _, outputs = trained
    if not getattr(agent, "accepts_padding", False):
        pytest.skip(f"{name} declares accepts_padding=False: it is never padded")
    _, together = _as_the_runner_runs_it(name)
    np.testing.assert_allclose(together[0], outputs(state, _x(trained), SEEDS)[0],
                               **TOLERANCE, err_msg=name)


def test_configs_vmapped_together_give_what_each_gives_alone(trained):
    name, spec, _, shapes, data, prior, state, _, outputs = trained
    if not spec.batchable:
        pytest.skip(f"{name} declares no batchable fields: one config at a time")
    configs, together = _as_the_runner_runs_it(name)
    other = spec.make(configs[1], shapes)

    @jax.jit
    def other_alone(data, prior, x):
        return _outputs_program(other.enn)(other.train(jax.random.key(0), data, prior), x,
                                           SEEDS)[0]

    alone = [outputs(state, _x(trained), SEEDS)[0], other_alone(data, prior, _x(trained))]
    for c in range(2):
        np.testing.assert_allclose(together[c], alone[c], **TOLERANCE,
                                   err_msg=f"{name}, config {c}")


@pytest.mark.parametrize("name", [n for n in NAMES if len(agents.get_agent(n).targets) > 1])
def test_agents_of_both_targets_give_one_value_per_input_on_regression(name):
    problem = PROBLEMS["regression"]
    shapes = base.Shapes.of(problem)
    agent = agents.get_agent(name).make(SMALL[name], shapes)
    data, prior, _ = _instance("regression")
    state = jax.eval_shape(agent.train, jax.random.key(0), data, prior)
    index = jax.eval_shape(agent.enn.sample_index, jax.random.key(0))
    outputs = jax.eval_shape(agent.enn.apply, state, _inputs("regression"), index)
    assert (outputs.shape, outputs.dtype) == ((7, 1), jnp.float32), name
