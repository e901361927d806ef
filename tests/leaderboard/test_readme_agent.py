"""The "Writing an agent" page's own agent (an ensemble of linear models), run as written there.

Users copy it, so it must be a sound agent: on an imbalanced problem it
must do at least as well as predicting the majority class.
"""

import functools
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard

README = pathlib.Path(__file__).resolve().parents[2] / "docs" / "writing-an-agent.md"


def _readme_agent(monkeypatch):
    """Runs the page's code block; returns the spec it registers (not kept registered)."""
    blocks = re.findall(r"```python[^\n]*\n(.*?)```", README.read_text(), re.S)
    (code,) = [b for b in blocks if "class LinearEnsembleConfig" in b]
    registered = {}
    monkeypatch.setattr(agents, "register", lambda name, spec: registered.update({name: spec}))
    exec(compile(code, str(README), "exec"), {"__name__": "readme_linear_ensemble"})
    return registered["linear_ensemble"]


@pytest.mark.slow
def test_readme_linear_ensemble_beats_the_base_rate_on_an_imbalanced_problem(monkeypatch):
    spec = _readme_agent(monkeypatch)
    problem = leaderboard.get_sweep("paper")["classification_2d/110"]
    data, prior, _ = problem.instance()
    labels = np.asarray(data.y)
    base_rate = np.bincount(labels).max() / labels.size
    assert base_rate >= 0.9  # imbalanced: a model without a bias term cannot fit it

    agent = spec.make(spec.default, base.Shapes.of(problem))
    params = agent.train(jax.random.key(0), data, prior)
    members = jnp.stack([agent.enn.apply(params, data.x, i)
                         for i in range(spec.default.num_members)])
    predicted = np.argmax(jax.nn.softmax(members).mean(0), axis=-1)
    assert (predicted == labels).mean() >= base_rate

    rows = leaderboard.run_agent(functools.partial(spec.make, spec.default), [problem],
                                 "linear_ensemble", config=spec.default, progress=False)
    assert [r.status for r in rows] == ["ok", "ok"], [r.error for r in rows]
    assert rows[0].accuracy > 0.9, rows[0]  # on test inputs (without a bias: about 0.5)
