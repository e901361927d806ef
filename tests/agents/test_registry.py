"""The agent registry and --set parsing."""

import dataclasses

import pytest

from neural_testbed import agents
from neural_testbed.agents import registry


def test_builtin_registry_is_read_only():
    with pytest.raises(TypeError):
        agents.AGENTS["mlp"] = agents.AGENTS["mlp"]  # type: ignore[index]


def test_every_agent_default_is_in_its_type_and_sweep_is_nonempty():
    for name, spec in agents.AGENTS.items():
        assert isinstance(spec.default, spec.config_type), name
        assert len(spec.sweep()) > 0, name
        assert all(isinstance(c, spec.config_type) for c in spec.sweep()), name


def test_a_make_written_before_shapes_is_refused_in_one_line_saying_what_changed():
    def make_old_agent(config):  # today's agents are built knowing the problem's shapes
        return agents.make_mlp_agent(config, None)

    with pytest.raises(TypeError, match=r"^make must take \(config, shapes\): agents are now "
                                        r"built knowing the problem's shapes \(base.Shapes: "
                                        r"input_dim, num_outputs\); .*make_old_agent\(config\) "
                                        r"does not$"):
        agents.AgentSpec(agents.MLPConfig, agents.MLPConfig(), lambda: (), make_old_agent)


@pytest.mark.parametrize("batchable", [("num_steps",), ("nope",), "learning_rate"])
def test_batchable_names_float_fields_of_the_config(batchable):
    with pytest.raises(ValueError, match=r"^batchable must be a tuple of float fields of "
                                         r"MLPConfig \(learning_rate, l2_weight_decay\), got"):
        agents.AgentSpec(agents.MLPConfig, agents.MLPConfig(), lambda: (),
                         agents.make_mlp_agent, batchable=batchable)


@pytest.fixture
def user_agents():
    """The users' agents as they were before the test, afterwards."""
    saved = dict(registry._USER)
    yield
    registry._USER.clear()
    registry._USER.update(saved)


def test_register_adds_a_user_agent_and_refuses_to_overwrite(user_agents):
    spec = agents.get_agent("mlp")
    agents.register("my_mlp", spec)
    assert registry.get_agent("my_mlp") is spec
    with pytest.raises(ValueError, match="'my_mlp' is already registered"):
        agents.register("my_mlp", spec)


def test_unregister_removes_a_user_agent_but_never_a_built_in(user_agents):
    spec = agents.get_agent("mlp")
    agents.register("my_mlp", spec)
    assert agents.unregister("my_mlp") is spec
    assert "my_mlp" not in registry.AGENTS
    with pytest.raises(ValueError, match="no agent named 'my_mlp' is registered"):
        agents.unregister("my_mlp")
    with pytest.raises(ValueError, match="'mlp' is a built-in agent"):
        agents.unregister("mlp")
    assert "mlp" in registry.AGENTS


def test_no_private_dict_of_the_registry_can_replace_a_built_in(user_agents):
    """A module that writes the registry's private dicts (not through register()) still
    gets the built-in agent back: built-ins sit in a read-only mapping that comes first."""
    impostor = dataclasses.replace(agents.get_agent("knn"), description="an impostor")
    private = [value for name, value in vars(registry).items()
               if name.startswith("_") and isinstance(value, dict)]
    assert private  # the users' agents' dict
    for table in private:
        table["mlp"] = impostor
    assert agents.get_agent("mlp").description.startswith("one MLP")
    assert agents.AGENTS["mlp"] is agents.get_agent("mlp")
    with pytest.raises(TypeError):
        registry._BUILT_IN["mlp"] = impostor  # type: ignore[index]


def test_unknown_agent_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown agent 'nope'; registered agents: .*mlp"):
        agents.get_agent("nope")


def test_parse_overrides_converts_types():
    spec = agents.get_agent("mlp")
    config = agents.parse_overrides(
        spec, ["l2_weight_decay=0.1", "adaptive_weight_scale=false", "num_steps=10", "hidden=20,30"])
    assert config == dataclasses.replace(
        spec.default, l2_weight_decay=0.1, adaptive_weight_scale=False, num_steps=10, hidden=(20, 30))


@pytest.mark.parametrize(
    "override, message",
    [("bogus=1", "--set bogus: unknown hyperparameter for MLPConfig; known: .*l2_weight_decay"),
     ("num_steps=ten", "--set num_steps='ten': expected a value of type int"),
     ("adaptive_weight_scale=maybe", "expected true or false"),
     ("num_steps", "--set expects key=value, got 'num_steps'"),
     ("num_steps=0", "num_steps must be >= 1, got 0")],
)
def test_parse_overrides_rejects_bad_input(override, message):
    with pytest.raises(ValueError, match=message):
        agents.parse_overrides(agents.get_agent("mlp"), [override])


def test_a_hyperparameter_set_twice_is_refused_not_overridden():
    with pytest.raises(ValueError, match=r"^--set hidden is given twice \('hidden=10' and "
                                         r"'hidden=20'\); give each hyperparameter once$"):
        agents.parse_overrides(agents.get_agent("mlp"), ["hidden=10", "hidden=20"])


@pytest.mark.parametrize(
    "override, message",
    [("num_steps=1000000000000", "num_steps must be an integer that fits int32"),
     (f"num_steps={2**31}", "num_steps must be an integer that fits int32"),
     ("num_steps=100000001", "num_steps must be at most 100000000 steps"),
     ("batch_size=1000000000000", "batch_size must be an integer that fits int32"),
     ("learning_rate=1e-320", "learning_rate must be a number float32 holds"),
     ("learning_rate=1e-40", "learning_rate must be a number float32 holds"),
     ("l2_weight_decay=1e39", "l2_weight_decay must be a number float32 holds")],
)
def test_values_that_jax_cannot_hold_are_refused_when_the_config_is_made(override, message):
    """Ints past int32 (JAX's integers), loops of absurd length, and floats that float32
    turns into 0, a subnormal or inf: refused by the config, not later inside jit."""
    with pytest.raises(ValueError, match=message):
        agents.parse_overrides(agents.get_agent("mlp"), [override])
