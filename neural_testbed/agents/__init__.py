"""The agent zoo and its registry."""

from neural_testbed.agents.bbb import BBBConfig, bbb_sweep, make_bbb_agent
from neural_testbed.agents.cnp import CNPConfig, cnp_sweep, make_cnp_agent
from neural_testbed.agents.deep_kernel import (
    DeepKernelConfig,
    deep_kernel_sweep,
    make_deep_kernel_agent,
)
from neural_testbed.agents.dropout import DropoutConfig, dropout_sweep, make_dropout_agent
from neural_testbed.agents.ensemble import EnsembleConfig, ensemble_sweep, make_ensemble_agent
from neural_testbed.agents.ensemble_plus import (
    EnsemblePlusConfig,
    ensemble_plus_prior_sweep,
    ensemble_plus_sweep,
    make_ensemble_plus_agent,
)
from neural_testbed.agents.epinet import EpinetConfig, epinet_sweep, make_epinet_agent
from neural_testbed.agents.gp import GPConfig, gp_sweep, make_gp_agent
from neural_testbed.agents.hypermodel import (
    HypermodelConfig,
    hypermodel_sweep,
    make_hypermodel_agent,
)
from neural_testbed.agents.hmc import HMCConfig, hmc_sweep, make_hmc_agent
from neural_testbed.agents.knn import KnnConfig, knn_sweep, make_knn_agent
from neural_testbed.agents.laplace import LaplaceConfig, laplace_sweep, make_laplace_agent
from neural_testbed.agents.logistic import LogisticConfig, logistic_sweep, make_logistic_agent
from neural_testbed.agents.mlp import MLPConfig, make_mlp_agent, mlp_sweep
from neural_testbed.agents.neural_process import (
    ANPConfig,
    NPConfig,
    anp_sweep,
    make_anp_agent,
    make_np_agent,
    np_sweep,
)
from neural_testbed.agents.nng import NNGConfig, make_nng_agent, nng_sweep
from neural_testbed.agents.oracle_gp import OracleGPConfig, make_oracle_gp_agent, oracle_gp_sweep
from neural_testbed.agents.random_forest import (
    RandomForestConfig,
    make_random_forest_agent,
    random_forest_sweep,
)
from neural_testbed.agents.registry import (
    AGENTS,
    AgentSpec,
    get_agent,
    parse_overrides,
    register,
    unregister,
)
from neural_testbed.agents.sgmcmc import SGMCMCConfig, make_sgmcmc_agent, sgmcmc_sweep
from neural_testbed.agents.svgp import SVGPConfig, make_svgp_agent, svgp_sweep

__all__ = [
    "AGENTS",
    "ANPConfig",
    "AgentSpec",
    "BBBConfig",
    "CNPConfig",
    "DeepKernelConfig",
    "DropoutConfig",
    "EnsembleConfig",
    "EnsemblePlusConfig",
    "EpinetConfig",
    "GPConfig",
    "HypermodelConfig",
    "HMCConfig",
    "KnnConfig",
    "LaplaceConfig",
    "LogisticConfig",
    "MLPConfig",
    "NNGConfig",
    "NPConfig",
    "OracleGPConfig",
    "RandomForestConfig",
    "SGMCMCConfig",
    "SVGPConfig",
    "anp_sweep",
    "bbb_sweep",
    "cnp_sweep",
    "deep_kernel_sweep",
    "dropout_sweep",
    "ensemble_plus_prior_sweep",
    "ensemble_plus_sweep",
    "ensemble_sweep",
    "epinet_sweep",
    "get_agent",
    "gp_sweep",
    "hmc_sweep",
    "hypermodel_sweep",
    "knn_sweep",
    "laplace_sweep",
    "logistic_sweep",
    "make_anp_agent",
    "make_bbb_agent",
    "make_cnp_agent",
    "make_deep_kernel_agent",
    "make_dropout_agent",
    "make_ensemble_agent",
    "make_ensemble_plus_agent",
    "make_epinet_agent",
    "make_gp_agent",
    "make_hypermodel_agent",
    "make_hmc_agent",
    "make_knn_agent",
    "make_laplace_agent",
    "make_logistic_agent",
    "make_mlp_agent",
    "make_nng_agent",
    "make_np_agent",
    "make_oracle_gp_agent",
    "make_random_forest_agent",
    "make_sgmcmc_agent",
    "make_svgp_agent",
    "mlp_sweep",
    "nng_sweep",
    "np_sweep",
    "oracle_gp_sweep",
    "parse_overrides",
    "random_forest_sweep",
    "register",
    "sgmcmc_sweep",
    "svgp_sweep",
    "unregister",
]
