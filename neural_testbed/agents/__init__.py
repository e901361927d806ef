"""The agent zoo and its registry."""

from neural_testbed.agents.ensemble import EnsembleConfig, ensemble_sweep, make_ensemble_agent
from neural_testbed.agents.ensemble_plus import (
    EnsemblePlusConfig,
    ensemble_plus_sweep,
    make_ensemble_plus_agent,
)
from neural_testbed.agents.hypermodel import (
    HypermodelConfig,
    hypermodel_sweep,
    make_hypermodel_agent,
)
from neural_testbed.agents.mlp import MLPConfig, make_mlp_agent, mlp_sweep
from neural_testbed.agents.registry import (
    AGENTS,
    AgentSpec,
    get_agent,
    parse_overrides,
    register,
)

__all__ = [
    "AGENTS",
    "AgentSpec",
    "EnsembleConfig",
    "EnsemblePlusConfig",
    "HypermodelConfig",
    "ensemble_plus_sweep",
    "ensemble_sweep",
    "hypermodel_sweep",
    "make_ensemble_agent",
    "make_ensemble_plus_agent",
    "make_hypermodel_agent",
    "MLPConfig",
    "get_agent",
    "make_mlp_agent",
    "mlp_sweep",
    "parse_overrides",
    "register",
]
