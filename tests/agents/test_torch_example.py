"""The PyTorch MC-dropout agent of the "Writing an agent" page (examples/torch_dropout.py), run
as a user would."""

import functools
import pathlib

import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import plugins

torch = pytest.importorskip("torch", reason="the PyTorch example needs torch")

ROOT = pathlib.Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "torch_dropout.py"


@pytest.fixture(scope="module")
def module():
    loaded = plugins.import_agent_module(str(EXAMPLE))
    yield loaded
    agents.unregister("torch_dropout")


def test_the_agent_page_shows_the_example_as_it_is():
    code = EXAMPLE.read_text()
    body = code[code.index("import dataclasses"):]
    assert body in (ROOT / "docs" / "writing-an-agent.md").read_text()


@pytest.mark.slow
def test_runs_through_the_runner_with_fresh_networks_per_belief_sample(module):
    config = module.TorchDropoutConfig(num_steps=50)
    problems = list(leaderboard.get_sweep("smoke").values())[:1]
    rows = leaderboard.run_agent(functools.partial(module.make_torch_dropout, config), problems,
                                 "torch_dropout", config=config, progress=False)
    assert [r.status for r in rows] == ["ok", "ok"], [r.error for r in rows]
    assert all(np.isfinite(r.kl) and r.kl_stderr > 0 for r in rows)


def test_one_seed_is_one_network_for_all_its_inputs(module):
    problem = leaderboard.get_sweep("smoke")["classification_2d/90"]
    agent = module.make_torch_dropout(module.TorchDropoutConfig(num_steps=5, dropout_rate=0.5),
                                      base.Shapes.of(problem))
    data, prior, _ = problem.instance()
    import jax

    layers = agent.train(0, jax.device_get(data), prior)
    x = np.random.default_rng(0).normal(size=(1, 6, 2)).astype(np.float32)
    seeds = np.array([3], np.uint32)
    together = agent.sample(layers, x, seeds)
    alone = np.concatenate([agent.sample(layers, x[:, i:i + 1], seeds) for i in range(6)], 1)
    np.testing.assert_allclose(together, alone, rtol=1e-5)
    other = agent.sample(layers, x, np.array([4], np.uint32))
    assert not np.allclose(together, other)  # another seed, another mask
