"""Loading user agents: entry points and --import."""

import importlib.metadata
import importlib.util
import pathlib
import sys

import pytest

from neural_testbed.agents import plugins, registry

TOY = pathlib.Path(__file__).parents[1] / "leaderboard" / "toy_agent.py"


@pytest.fixture
def fresh_registry(monkeypatch):
    """For one test: a registry of the built-in agents only, and toy_agent not yet imported
    (an imported module is not executed again, so it would not register again)."""
    users = dict(registry._USER)
    registry._USER.clear()
    saved = sys.modules.pop("toy_agent", None)
    yield
    registry._USER.clear()
    registry._USER.update(users)
    sys.modules.pop("toy_agent", None)
    if saved is not None:
        sys.modules["toy_agent"] = saved


def test_entry_point_registers_its_spec_under_its_name(fresh_registry, monkeypatch):
    monkeypatch.syspath_prepend(str(TOY.parent))
    points = [
        importlib.metadata.EntryPoint("my_toy", "toy_agent:SPEC", plugins.ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("broken", "no_such_module:SPEC", plugins.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: points if group == plugins.ENTRY_POINT_GROUP else [])
    assert plugins.load_entry_points() == ["my_toy"]  # the broken one is skipped with a warning
    assert registry.get_agent("my_toy").description.startswith("a tiny mlp")


def test_import_by_file_path_registers_the_agent(fresh_registry):
    plugins.import_agent_module(str(TOY))
    assert "toy" in registry.AGENTS


def test_import_errors_are_clear():
    with pytest.raises(ValueError, match="--import nowhere/x.py: no such file"):
        plugins.import_agent_module("nowhere/x.py")
    with pytest.raises(ValueError, match="--import not_a_module_xyz: No module named"):
        plugins.import_agent_module("not_a_module_xyz")


def test_import_by_name_loads_the_working_directorys_module_only(tmp_path, monkeypatch):
    """A module (and a package's submodule) in the working directory is imported by name,
    and the directory is not added to sys.path: a stray file beside it stays unimportable."""
    (tmp_path / "users_module_xyz.py").write_text("LOADED = True\n")
    (tmp_path / "users_package_xyz").mkdir()
    (tmp_path / "users_package_xyz" / "__init__.py").write_text("")
    (tmp_path / "users_package_xyz" / "agent.py").write_text("from . import helper\n")
    (tmp_path / "users_package_xyz" / "helper.py").write_text("")
    (tmp_path / "stray_xyz.py").write_text("raise AssertionError('a stray file was imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    before = list(sys.path)
    try:
        assert plugins.import_agent_module("users_module_xyz").LOADED
        assert plugins.import_agent_module("users_package_xyz.agent").helper
        assert sys.path == before
        assert importlib.util.find_spec("stray_xyz") is None
    finally:
        for name in ("users_module_xyz", "users_package_xyz", "users_package_xyz.agent",
                     "users_package_xyz.helper"):
            sys.modules.pop(name, None)
