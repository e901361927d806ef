"""The agent registry: leaderboard name -> (config type, default, sweep, constructor).

Built-in agents sit in a read-only mapping and users' agents in a dict of their
own that only :func:`register` and :func:`unregister` write; :data:`AGENTS` is a
read-only view of both, built-ins first, so not even a module that writes the
private dict can replace a built-in agent. :func:`register` refuses to overwrite
a name; :func:`unregister` takes a user's agent away again (tests register their
agents for their own duration only); built-in agents cannot be removed.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from neural_testbed import base
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

__all__ = ["AGENTS", "AgentSpec", "PAPER_SWEEP", "get_agent", "parse_overrides", "register",
           "unregister"]

PAPER_SWEEP = "paper"  # the name of every agent's own hyperparameter sweep (AgentSpec.sweep)


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """Everything the leaderboard needs to know about an agent.

    Attributes:
      config_type: a frozen dataclass of the agent's hyperparameters.
      default: the default config (an instance of ``config_type``).
      sweep: returns the hyperparameter sweep, a tuple of configs.
      make: ``(config, shapes) -> Agent | HostAgent``, the agent of a config for
        problems of ``shapes`` (:class:`base.Shapes`); the contract is in
        :mod:`neural_testbed.base`.
      description: one line for ``neural-testbed agents``.
      targets: the problems it can be evaluated on: ``"classification"``,
        ``"regression"`` or both (a regression agent outputs one value per input).
      check_target: ``(config, target) -> None``, raising a one-line
        ``ValueError`` when a config cannot run on ``target`` problems although
        the agent can (ensemble+'s VAE prior on regression); None when every
        config runs on every target.
      other_sweeps: named config sweeps beside ``sweep``, for studies that vary
        other fields (ensemble+'s ``prior-functions`` for the paper's Figure 7) or
        grids other than ``sweep``'s (``appendix-b``: the grid the paper's appendix B
        prints, where it is not the reference's); ``sweep --configs NAME`` runs one.
      batchable: float fields of ``config_type`` that ``make`` uses only in array
        arithmetic, so that they may be float32 arrays: configs that differ in
        these alone are trained in one program, vmapped over configs
        (``leaderboard.config_batches``). Empty: one config at a time.
    """

    config_type: type
    default: Any
    sweep: Callable[[], Sequence[Any]]
    make: Callable[[Any], base.Agent | base.HostAgent]
    description: str = ""
    targets: tuple[str, ...] = ("classification",)
    check_target: Callable[[Any, str], None] | None = None
    other_sweeps: Mapping[str, Callable[[], Sequence[Any]]] = dataclasses.field(
        default_factory=dict)
    batchable: tuple[str, ...] = ()

    def __post_init__(self):
        if not (dataclasses.is_dataclass(self.config_type) and isinstance(self.config_type, type)):
            raise TypeError(f"config_type must be a dataclass type, got {self.config_type!r}")
        if not self.targets or set(self.targets) - {"classification", "regression"}:
            raise ValueError(f"targets must name 'classification' and/or 'regression', "
                             f"got {self.targets!r}")
        if self.check_target is not None and not callable(self.check_target):
            raise TypeError(f"check_target must be callable or None, got {self.check_target!r}")
        if PAPER_SWEEP in self.other_sweeps or not all(
                isinstance(name, str) and callable(make) for name, make in self.other_sweeps.items()):
            raise TypeError(f"other_sweeps must map names other than {PAPER_SWEEP!r} to "
                            f"callables, got {dict(self.other_sweeps)!r}")
        if not isinstance(self.default, self.config_type):
            raise TypeError(
                f"default must be an instance of {self.config_type.__name__}, got {self.default!r}"
            )
        _check_make(self.make)
        if self.batchable != () and (not isinstance(self.batchable, tuple)
                                     or set(self.batchable) - set(_float_fields(self.config_type))):
            raise ValueError(f"batchable must be a tuple of float fields of "
                             f"{self.config_type.__name__} "
                             f"({', '.join(_float_fields(self.config_type)) or 'none'}), got "
                             f"{self.batchable!r}")

    def configs(self, sweep: str = PAPER_SWEEP) -> tuple[Any, ...]:
        """The configs of the named sweep: ``"paper"`` is :attr:`sweep`, any other
        name one of :attr:`other_sweeps`."""
        if sweep == PAPER_SWEEP:
            return tuple(self.sweep())
        if sweep not in self.other_sweeps:
            allowed = ", ".join(repr(n) for n in (PAPER_SWEEP, *sorted(self.other_sweeps)))
            raise ValueError(f"--configs {sweep!r}: this agent's config sweeps are {allowed}")
        return tuple(self.other_sweeps[sweep]())


def _float_fields(config_type: type) -> list[str]:
    hints = typing.get_type_hints(config_type)
    return [f.name for f in dataclasses.fields(config_type) if hints.get(f.name) is float]


def _check_make(make: Callable) -> None:
    """Refuses a ``make`` that cannot take ``(config, shapes)``, such as one written when
    agents were built from their config alone."""
    if not callable(make):
        raise TypeError(f"make must be callable, got {make!r}")
    try:
        signature = inspect.signature(make)
    except (TypeError, ValueError):  # no signature to read (a builtin): trusted
        return
    try:
        signature.bind(None, None)
    except TypeError:
        name = getattr(make, "__qualname__", repr(make))
        raise TypeError(f"make must take (config, shapes): agents are now built knowing the "
                        f"problem's shapes (base.Shapes: input_dim, num_outputs); {name}"
                        f"{signature} does not") from None


_BUILT_IN: Mapping[str, AgentSpec] = types.MappingProxyType({
    "mlp": AgentSpec(
        config_type=mlp.MLPConfig,
        default=mlp.MLPConfig(),
        sweep=mlp.mlp_sweep,
        make=mlp.make_mlp_agent,
        batchable=("learning_rate", "l2_weight_decay"),
        description="one MLP (50, 50) with L2 weight decay; the baseline",
        targets=("classification", "regression"),
    ),
    "logistic": AgentSpec(
        config_type=logistic.LogisticConfig,
        default=logistic.LogisticConfig(),
        sweep=logistic.logistic_sweep,
        make=logistic.make_logistic_agent,
        batchable=("learning_rate", "l2_weight_decay"),
        description="a linear model (an mlp without hidden layers) with L2 weight decay",
        targets=("classification", "regression"),
    ),
    "ensemble": AgentSpec(
        config_type=ensemble.EnsembleConfig,
        default=ensemble.EnsembleConfig(),
        sweep=ensemble.ensemble_sweep,
        make=ensemble.make_ensemble_agent,
        batchable=("learning_rate", "l2_weight_decay"),
        description="deep ensemble (Lakshminarayanan et al.): independently initialised MLPs",
        targets=("classification", "regression"),
        other_sweeps={"appendix-b": ensemble.ensemble_appendix_b_sweep},
    ),
    "ensemble+": AgentSpec(
        config_type=ensemble_plus.EnsemblePlusConfig,
        default=ensemble_plus.EnsemblePlusConfig(),
        sweep=ensemble_plus.ensemble_plus_sweep,
        make=ensemble_plus.make_ensemble_plus_agent,
        batchable=("learning_rate", "l2_weight_decay", "prior_scale"),
        description="ensemble with randomised prior functions and bootstrap (Osband et al. 2018)",
        targets=("classification", "regression"),
        check_target=ensemble_plus.check_target,
        other_sweeps={"prior-functions": ensemble_plus.ensemble_plus_prior_sweep,
                      "appendix-b": ensemble_plus.ensemble_plus_appendix_b_sweep},
    ),
    "hypermodel": AgentSpec(
        config_type=hypermodel.HypermodelConfig,
        default=hypermodel.HypermodelConfig(),
        sweep=hypermodel.hypermodel_sweep,
        make=hypermodel.make_hypermodel_agent,
        batchable=("learning_rate", "l2_weight_decay", "prior_scale"),
        description="linear hypermodel with an additive prior hypermodel (Dwaracherla et al. 2020)",
        targets=("classification", "regression"),
        other_sweeps={"appendix-b": hypermodel.hypermodel_appendix_b_sweep},
    ),
    "dropout": AgentSpec(
        config_type=dropout.DropoutConfig,
        default=dropout.DropoutConfig(),
        sweep=dropout.dropout_sweep,
        make=dropout.make_dropout_agent,
        batchable=("dropout_rate", "length_scale", "learning_rate"),
        description="MC dropout (Gal & Ghahramani): an MLP that keeps dropping units when sampling",
        targets=("classification", "regression"),
        other_sweeps={"appendix-b": dropout.dropout_appendix_b_sweep},
    ),
    "bbb": AgentSpec(
        config_type=bbb.BBBConfig,
        default=bbb.BBBConfig(),
        sweep=bbb.bbb_sweep,
        make=bbb.make_bbb_agent,
        batchable=("learning_rate", "sigma_1", "sigma_2", "mixture_pi"),
        description="Bayes by backprop (Blundell et al.): a factorised Gaussian over every weight",
        targets=("classification", "regression"),
        other_sweeps={"appendix-b": bbb.bbb_appendix_b_sweep},
    ),
    "sgmcmc": AgentSpec(
        config_type=sgmcmc.SGMCMCConfig,
        default=sgmcmc.SGMCMCConfig(),
        sweep=sgmcmc.sgmcmc_sweep,
        make=sgmcmc.make_sgmcmc_agent,
        batchable=("prior_variance",),
        description="SGLD with momentum (Welling & Teh): one chain's snapshots as an ensemble",
        targets=("classification", "regression"),
        other_sweeps={"appendix-b": sgmcmc.sgmcmc_appendix_b_sweep},
    ),
    "hmc": AgentSpec(
        config_type=hmc.HMCConfig,
        default=hmc.HMCConfig(),
        sweep=hmc.hmc_sweep,
        make=hmc.make_hmc_agent,
        description="the Bayes-optimal floor: NUTS on the environment's own model and prior "
                    "(blackjax, the hmc extra), R-hat and ESS in each row",
        targets=("classification",),
    ),
    "nng": AgentSpec(
        config_type=nng.NNGConfig,
        default=nng.NNGConfig(),
        sweep=nng.nng_sweep,
        make=nng.make_nng_agent,
        batchable=("learning_rate", "prior_variance"),
        description="noisy natural gradient (Zhang et al.): noisy K-FAC, a matrix-variate "
                    "Gaussian over each layer (Wang et al.'s NNG)",
        targets=("classification", "regression"),
    ),
    "svgp": AgentSpec(
        config_type=svgp.SVGPConfig,
        default=svgp.SVGPConfig(),
        sweep=svgp.svgp_sweep,
        make=svgp.make_svgp_agent,
        description="sparse variational GP (Hensman et al.), RBF kernel with ARD and M inducing "
                    "inputs fitted on the ELBO, one GP per output",
        targets=("classification", "regression"),
    ),
    "knn": AgentSpec(
        config_type=knn.KnnConfig,
        default=knn.KnnConfig(),
        sweep=knn.knn_sweep,
        make=knn.make_knn_agent,
        description="k-nearest neighbours: neighbour class frequencies truncated to [0.01, 0.99]",
    ),
    "uniform": AgentSpec(
        config_type=trivial.TrivialConfig,
        default=trivial.TrivialConfig(),
        sweep=lambda: (trivial.TrivialConfig(),),
        make=trivial.make_uniform_agent,
        description="the trivial baseline: equal class probabilities everywhere",
    ),
    "average_class_probs": AgentSpec(
        config_type=trivial.TrivialConfig,
        default=trivial.TrivialConfig(),
        sweep=lambda: (trivial.TrivialConfig(),),
        make=trivial.make_average_class_probs_agent,
        description="the training labels' class frequencies, as logits (the reference's)",
    ),
    "random_forest": AgentSpec(
        config_type=random_forest.RandomForestConfig,
        default=random_forest.RandomForestConfig(),
        sweep=random_forest.random_forest_sweep,
        make=random_forest.make_random_forest_agent,
        description="scikit-learn's random forest (a host agent), truncated to [0.01, 0.99]",
    ),
    "deep_kernel": AgentSpec(
        config_type=deep_kernel.DeepKernelConfig,
        default=deep_kernel.DeepKernelConfig(),
        sweep=deep_kernel.deep_kernel_sweep,
        make=deep_kernel.make_deep_kernel_agent,
        batchable=("learning_rate", "l2_weight_decay", "sigma_squared"),
        description="GP on the logits with a trained MLP's last-layer features as kernel (B.9)",
    ),
    "laplace": AgentSpec(
        config_type=laplace.LaplaceConfig,
        default=laplace.LaplaceConfig(),
        sweep=laplace.laplace_sweep,
        make=laplace.make_laplace_agent,
        batchable=("learning_rate", "l2_weight_decay", "prior_precision"),
        description="mlp with a last-layer Laplace posterior (full GGN), sampled in weight space",
    ),
    "epinet": AgentSpec(
        config_type=epinet.EpinetConfig,
        default=epinet.EpinetConfig(),
        sweep=epinet.epinet_sweep,
        make=epinet.make_epinet_agent,
        batchable=("learning_rate", "l2_weight_decay", "prior_scale"),
        description="MLP plus a small epistemic network of a Gaussian index (Osband et al. 2021)",
        targets=("classification", "regression"),
    ),
    "oracle_gp": AgentSpec(
        config_type=oracle_gp.OracleGPConfig,
        default=oracle_gp.OracleGPConfig(),
        sweep=oracle_gp.oracle_gp_sweep,
        make=oracle_gp.make_oracle_gp_agent,
        description="regression only: the exact GP posterior, told the kernel and the noise",
        targets=("regression",),
    ),
    "gp": AgentSpec(
        config_type=gp.GPConfig,
        default=gp.GPConfig(),
        sweep=gp.gp_sweep,
        make=gp.make_gp_agent,
        description="regression only: a GP whose kernel (arc-cosine or RBF) is fitted by evidence",
        targets=("regression",),
    ),
    "cnp": AgentSpec(
        config_type=cnp.CNPConfig,
        default=cnp.CNPConfig(),
        sweep=cnp.cnp_sweep,
        make=cnp.make_cnp_agent,
        description="regression only: conditional neural process meta-trained on the GP prior",
        targets=("regression",),
    ),
    "np": AgentSpec(
        config_type=neural_process.NPConfig,
        default=neural_process.NPConfig(),
        sweep=neural_process.np_sweep,
        make=neural_process.make_np_agent,
        description="regression only: neural process with a global latent (correlated draws), "
                    "meta-trained on the GP prior",
        targets=("regression",),
    ),
    "anp": AgentSpec(
        config_type=neural_process.ANPConfig,
        default=neural_process.ANPConfig(),
        sweep=neural_process.anp_sweep,
        make=neural_process.make_anp_agent,
        description="regression only: attentive neural process (cross-attention and a global "
                    "latent), meta-trained on the GP prior",
        targets=("regression",),
    ),
})
_USER: dict[str, AgentSpec] = {}  # written by register() and unregister() only
AGENTS: Mapping[str, AgentSpec] = types.MappingProxyType(collections.ChainMap(_BUILT_IN, _USER))


def register(name: str, spec: AgentSpec) -> None:
    """Adds a user agent under ``name``; refuses to replace an existing one."""
    if not isinstance(spec, AgentSpec):
        raise TypeError(f"spec must be an AgentSpec, got {type(spec).__name__}")
    if not name or not isinstance(name, str):
        raise ValueError(f"agent name must be a non-empty string, got {name!r}")
    if name in AGENTS:
        raise ValueError(f"an agent named {name!r} is already registered")
    _USER[name] = spec


def unregister(name: str) -> AgentSpec:
    """Removes the user agent ``name`` and returns its spec; built-in agents stay.

    Raises:
      ValueError: if ``name`` is a built-in agent or is not registered.
    """
    if name in _BUILT_IN:
        raise ValueError(f"{name!r} is a built-in agent and cannot be unregistered")
    try:
        return _USER.pop(name)
    except KeyError:
        raise ValueError(f"no agent named {name!r} is registered") from None


def get_agent(name: str) -> AgentSpec:
    """The spec registered under ``name``, with a clear error for an unknown one."""
    try:
        return AGENTS[name]
    except KeyError:
        raise ValueError(
            f"unknown agent {name!r}; registered agents: {', '.join(sorted(AGENTS))}"
        ) from None


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _parse_value(name: str, text: str, annotation: Any) -> Any:
    """Converts ``text`` to the field's type, or raises naming what is allowed."""
    origin = typing.get_origin(annotation)
    try:
        if annotation is bool:
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        if annotation is int:
            return int(text)
        if annotation is float:
            return float(text)
        if annotation is str:
            return text
        if origin is typing.Literal:
            allowed = typing.get_args(annotation)
            if text in allowed:
                return text
            raise ValueError(
                f"--set {name}={text!r}: allowed values are {', '.join(map(str, allowed))}"
            )
        if origin is tuple:
            item_type = typing.get_args(annotation)[0]
            parts = [p for p in text.strip("()[] ").split(",") if p.strip()]
            return tuple(_parse_value(name, p.strip(), item_type) for p in parts)
    except ValueError as e:
        if str(e).startswith("--set"):
            raise
        raise ValueError(
            f"--set {name}={text!r}: expected {_describe(annotation)}"
        ) from None
    raise ValueError(f"--set {name}: fields of type {annotation!r} cannot be set from text")


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is tuple:
        return f"a comma-separated list of {typing.get_args(annotation)[0].__name__}"
    if annotation is bool:
        return "true or false"
    return f"a value of type {getattr(annotation, '__name__', annotation)}"


def parse_overrides(spec: AgentSpec, overrides: Sequence[str]) -> Any:
    """Applies ``key=value`` strings to the spec's default config.

    Raises:
      ValueError: naming the bad key (and the known ones), a key given twice, or
        the bad value (and what type is expected).
    """
    hints = typing.get_type_hints(spec.config_type)
    fields = {f.name for f in dataclasses.fields(spec.config_type)}
    changes, given = {}, {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--set expects key=value, got {item!r}")
        if key not in fields:
            raise ValueError(
                f"--set {key}: unknown hyperparameter for {spec.config_type.__name__}; "
                f"known: {', '.join(sorted(fields))}"
            )
        if key in given:  # one of the two would be dropped without a word
            raise ValueError(f"--set {key} is given twice ({given[key]!r} and {item!r}); "
                             "give each hyperparameter once")
        given[key] = item
        changes[key] = _parse_value(key, value.strip(), hints[key])
    return dataclasses.replace(spec.default, **changes)
