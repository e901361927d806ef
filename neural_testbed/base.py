"""Core types: data, prior knowledge, the problem and agent protocols, result rows.

An agent is an *epistemic neural network* (ENN): training returns a state
pytree, and a posterior sample at inputs ``x`` is
``apply(state, x, sample_index(key))``. Any plain ``sampler(x, key) -> logits``
(the reference testbed's ``EpistemicSampler``) is accepted too, see
:func:`sampler_as_enn`, so agents from any framework can be evaluated.

The agent contract, in one place (``agents.AgentSpec`` registers an agent under it;
``tests/agents/test_contract.py`` runs every registered agent through it):

- ``make(config, shapes) -> Agent | HostAgent`` builds the agent. ``config`` is an
  instance of the agent's frozen config dataclass, validated when it was made;
  ``shapes`` (:class:`Shapes`) is the problem's input dimension and number of
  outputs (K class logits, or 1 value on regression): the networks are built from
  it, never read off the data or off weight shapes.
- ``Agent.train(key, data, prior) -> state``: ``data`` (:class:`Data`) holds plain
  arrays ``x [rows, input_dim]``, ``y [rows]`` and ``mask``; ``prior`` is the
  problem's frozen prior knowledge (:class:`PriorKnowledge`, or
  :class:`RegressionPriorKnowledge`), whose only leaf is the temperature (the noise
  variance); ``state`` is any pytree. It is pure and jittable: the runner ``vmap``-s
  it over problems of one shape.
- ``ENN.apply(state, x [n, input_dim], index) -> [n, shapes.num_outputs]`` float32,
  pure and jittable; ``ENN.sample_index(key) -> index`` draws from the belief.
- Padding is data. ``Data.mask`` marks the rows that are training pairs; T is
  :func:`num_pairs`. Only an agent built with ``Agent(..., accepts_padding=True)`` is
  ever given a mask: it must then ignore the other rows (they may hold anything)
  and give the predictions it gives on the pairs alone. The runner then trains
  problems of every T of a sweep with one program (each padded to the largest T).
  The shared training helpers honour the mask (``agents.training.train_minibatch``,
  ``agents.sgmcmc.run_chain``). Any other agent gets exactly its T pairs
  (``mask=None``, and :func:`num_pairs` is a Python int): one whose shapes depend
  on T, or that cannot honour a mask.
- Config batching is declared. ``AgentSpec(..., batchable=(names))`` lists float
  fields of the config that may be arrays: configs that differ only in those
  fields are trained and evaluated in one program, ``vmap``-ped over configs, in
  which ``make`` is called with an instance of the config's class whose declared
  fields are float32 scalar arrays (``leaderboard.config_batches.with_arrays``:
  the batch's values, each validated when its config was made, and not again).
  Such an agent uses them only in array arithmetic (never ``if``, ``float()``, a
  shape or another config's constructor); if it does, the batched program fails
  and its rows are failed rows that say why. An agent that declares nothing is
  run one config at a time.
- ``HostAgent``: training in ordinary Python, on NumPy data of the problem's own T
  rows (never padded), and ``sample`` for many networks at once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, NamedTuple, Protocol

import flax.struct
import jax
import jax.numpy as jnp

__all__ = [
    "ENN",
    "Agent",
    "AgentBuilder",
    "Data",
    "HostAgent",
    "EpistemicSampler",
    "Metric",
    "PriorKnowledge",
    "Problem",
    "ProblemInstance",
    "ProblemKeys",
    "ProblemResult",
    "RegressionPriorKnowledge",
    "Shapes",
    "Target",
    "TestSamples",
    "as_sampler",
    "build_instance",
    "definition_hash",
    "definition_seed",
    "num_pairs",
    "ood_key",
    "problem_keys",
    "sampler_as_enn",
]


class Data(NamedTuple):
    """Labelled inputs, and which rows of them are training pairs.

    ``mask`` is None when every row is a pair. Otherwise the rows where it is False
    are padding, which may hold anything: only an agent that ``accepts_padding`` is
    given such data (see :class:`Agent`).
    """

    x: jax.Array  # [rows, input_dim] float32
    y: jax.Array  # [rows] int32 class labels, or float32 targets for regression
    mask: jax.Array | None = None  # [rows] bool, True where the row is a pair; None: all are


def num_pairs(data: Data) -> int | jax.Array:
    """T, the number of training pairs in ``data``: its rows (a Python int) without a
    mask, else the mask's count (an int32 scalar, traced under ``jit``)."""
    return data.x.shape[0] if data.mask is None else jnp.sum(data.mask, dtype=jnp.int32)


@dataclasses.dataclass(frozen=True)
class Shapes:
    """What an agent is built for (``make(config, shapes)``): the problem's shapes.

    Every problem of one shape has these, whatever its T and temperature, so one
    agent serves them all and the runner trains them together.
    """

    input_dim: int  # d: inputs are [n, input_dim]
    num_outputs: int  # K class logits, or 1 real value per input on regression

    def __post_init__(self):
        for name in ("input_dim", "num_outputs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Shapes.{name} must be an integer >= 1, got {value!r}")

    @classmethod
    def of(cls, problem: "Problem") -> "Shapes":
        """The shapes of ``problem``'s inputs and of an agent's outputs on it."""
        outputs = 1 if problem.target == "regression" else problem.num_classes
        return cls(input_dim=problem.input_dim, num_outputs=outputs)


@flax.struct.dataclass
class PriorKnowledge:
    """What an agent is told about a problem before training, beside its data.

    A pytree whose only leaf is ``temperature``, so that problems of the same
    shape but different temperatures can be trained together under ``vmap``.
    T is the data's (:func:`num_pairs`), not a field here: problems of every T
    share one prior when they are trained padded. The tau of the evaluation is
    not included: one trained agent is evaluated at every tau of the problem.
    """

    input_dim: int = flax.struct.field(pytree_node=False)
    num_classes: int = flax.struct.field(pytree_node=False)
    env_hidden: tuple[int, ...] = flax.struct.field(pytree_node=False)  # environment MLP widths
    temperature: Any  # float or float32 scalar array


@flax.struct.dataclass
class RegressionPriorKnowledge:
    """What an agent is told about a regression problem before training, beside its data.

    The targets are ``y = f(x) + noise`` with Gaussian noise of the known
    ``noise_variance`` (the only leaf, so that problems of one shape but
    different noise train together under ``vmap``) and ``f`` drawn from a
    Gaussian process with the kernel named by ``kernel``.
    """

    input_dim: int = flax.struct.field(pytree_node=False)
    kernel: str = flax.struct.field(pytree_node=False)  # e.g. "relu_nngp"
    noise_variance: Any  # float or float32 scalar array


State = Any  # an agent's trained state, any pytree
Index = Any  # an ENN index: a member id, a key, a Gaussian vector...
EpistemicSampler = Callable[[jax.Array, jax.Array], jax.Array]  # (x, key) -> logits


class ENN(NamedTuple):
    """The sampling side of an agent.

    Attributes:
      apply: ``(state, x [n, input_dim], index) -> [n, num_outputs]`` float32 logits
        (one value per input on regression). Pure and jittable.
      sample_index: ``key -> index``, a draw from the agent's belief.
      num_indices: ``None`` for a continuous index; ``n`` when every index is
        an integer in ``[0, n)`` (an ensemble, SG-MCMC snapshots). Then the
        evaluator counts how often each index is drawn and evaluates each
        distinct member once, weighted by its count.
    """

    apply: Callable[[State, jax.Array, Index], jax.Array]
    sample_index: Callable[[jax.Array], Index]
    num_indices: int | None = None


class Agent(NamedTuple):
    """An agent: a pure training function plus its ENN (the contract: module docstring).

    Attributes:
      train: ``(key, data, prior) -> state``. Pure and jittable, so that the
        runner can ``vmap`` it over problems of the same shape.
      enn: how to draw posterior samples from the trained state.
      accepts_padding: the agent's declaration that ``train`` honours ``data.mask``:
        given rows beyond the pairs, with any values, it predicts as it does on the
        pairs alone. Only then is it given padded data (the runner's one program
        for every T of a sweep); otherwise its data never has a mask.
      report: ``state -> {name: scalar}``, what the agent says of its own training
        (a sampler's convergence diagnostics), a function of the trained state alone;
        each row stores it in its diagnostics as ``agent_<name>``, and a ``converged``
        of 0 flags the row's problem in the leaderboard. None: nothing to report.
    """

    train: Callable[[jax.Array, Data, PriorKnowledge], State]
    enn: ENN
    accepts_padding: bool = False
    report: Callable[[State], Mapping[str, jax.Array]] | None = None


class HostAgent(NamedTuple):
    """An agent whose training runs as ordinary Python (NumPy, scikit-learn, PyTorch).

    The runner trains it problem by problem (no ``vmap``) and the evaluator
    asks it for the logits of many networks at once, so that a model from any
    framework is evaluated exactly as a JAX agent is.

    Attributes:
      train: ``(seed: int, data: Data of NumPy arrays, prior) -> state``, any
        Python object; the data are the problem's own T pairs (never padded).
      sample: ``(state, x [networks, n, d], indices [networks]) -> logits
        [networks, n, K]``, NumPy arrays: network ``i`` is the one of index
        ``indices[i]`` (a uint32 seed, or a member id) applied to ``x[i]``.
      num_indices: ``None`` when every index is a random seed (each network a
        fresh posterior sample), ``n`` for members ``0 .. n-1`` (1 for a single
        model: then each distinct member is evaluated once, weighted).
    """

    train: Callable[[int, Data, PriorKnowledge], Any]
    sample: Callable[[Any, Any, Any], Any]
    num_indices: int | None = None


# ``shapes -> agent``: a config's ``make`` with the config given, e.g.
# ``functools.partial(spec.make, config)``. What runs an agent over problems takes one,
# and builds the agent once per shape of its problems.
AgentBuilder = Callable[[Shapes], "Agent | HostAgent"]


def sampler_as_enn(sampler: EpistemicSampler) -> ENN:
    """Wraps a plain ``sampler(x, key) -> logits`` as an ENN with a key index.

    The state passed to ``apply`` is ignored, so evaluate it with any state,
    e.g. ``None``.
    """
    return ENN(apply=lambda state, x, key: sampler(x, key), sample_index=lambda key: key)


def as_sampler(enn: ENN, state: State) -> EpistemicSampler:
    """The ENN's ``sampler(x, key) -> logits`` for a trained state."""

    def sampler(x: jax.Array, key: jax.Array) -> jax.Array:
        return enn.apply(state, x, enn.sample_index(key))

    return sampler


Metric = Literal["kl", "nll"]  # d_KL where the exact likelihood is known, else NLL
Target = Literal["classification", "regression"]


class TestSamples(NamedTuple):
    """N independent test tau-samples, and the exact log-likelihood of their labels.

    ``ood_x`` holds one out-of-distribution input per test sample (each family
    says how it draws them); the evaluator scores the agent's confidence and
    uncertainty on them (:mod:`neural_testbed.diagnostics`) with the same
    belief samples, never its KL.
    """

    x: jax.Array  # [num_test, tau, input_dim]
    y: jax.Array  # [num_test, tau] int32 labels, or float32 targets for regression
    log_likelihood: jax.Array | None  # [num_test], or None where it is not known (real data)
    ood_x: jax.Array | None = None  # [num_test, input_dim], or None: no rejection diagnostics
    # Regression only: the known variance of the targets' Gaussian noise, and
    # probe inputs with the exact posterior's correlations of f between them
    # (for the metacorrelation), its means and variances of f there and one
    # draw of noisy targets there (for XLL); None for classification.
    noise_variance: jax.Array | None = None
    probe_x: jax.Array | None = None  # [Q, input_dim]
    probe_correlation: jax.Array | None = None  # [Q, Q]
    probe_y: jax.Array | None = None  # [Q] f plus noise
    probe_mean: jax.Array | None = None  # [Q]
    probe_variance: jax.Array | None = None  # [Q]


class ProblemInstance(NamedTuple):
    """A problem's random draws, built inside ``jit`` (and ``vmap``-ed over problems)."""

    data: Data  # the T training pairs
    prior: PriorKnowledge  # what the agent is told
    env: Any  # a pytree: whatever the problem's ``sample_test`` needs


class Problem(Protocol):
    """What the runner, the evaluator and the store need of one problem, whatever its family.

    A problem is a static description (hashable, cheap); its random draws
    come from :meth:`build`, a pure function of :meth:`build_args`, so that
    problems of one ``shape`` are built, trained and evaluated together by
    programs compiled once. The random-MLP classification problems are one
    implementation (:mod:`neural_testbed.generative.mlp_classification`).
    """

    problem_id: str  # stable id, e.g. "classification_2d/17"
    # A classification problem also has ``temperature``, its environment's temperature
    # (told to the agent); a regression problem has ``noise_variance`` instead.
    num_train: int  # T, a stratum coordinate
    seed: int  # replicate index within its (temperature, T) stratum
    input_dim: int
    num_classes: int  # K
    taus: tuple[int, ...]  # joint sizes it is evaluated at
    num_test: int  # N, test tau-samples per tau
    num_samples: int  # M, belief samples per test tau-sample
    num_hyperplanes: int  # Algorithm 4's d
    # ``estimator="auto"`` uses Monte Carlo up to this tau and random partitioning above
    # (9 in the reference the 2021 paper ran; 10 in its current protocol).
    max_monte_carlo_tau: int
    target: Target  # "classification" (K classes) or "regression" (one real value per input)
    # ``noise_variance`` is the known variance of a regression problem's Gaussian target
    # noise, which its rows carry (classification rows carry ``temperature``).

    @property
    def metric(self) -> Metric:
        """``"kl"`` where ``sample_test`` gives exact log-likelihoods, else ``"nll"``."""
        ...

    @property
    def stratum(self) -> tuple[Hashable, ...]:
        """The fixed stratum of the problem, ``(panel, T, ...)`` (e.g. (temperature, T), or
        (temperature, T, d) where d varies): standard errors are stratified by it, and
        ``per-setting`` tuning picks a config per stratum."""
        ...

    @property
    def stratum_columns(self) -> dict[str, Hashable]:
        """The stratum's coordinates by name (``temperature``, ``dataset`` or
        ``input_dim`` and ``noise_variance``, then ``num_train``, ...): the columns of
        score records, each with one meaning on every sweep."""
        ...

    @property
    def shape(self) -> Hashable:
        """Problems of one shape build, train and evaluate with one compilation."""
        ...

    @property
    def padding_group(self) -> Hashable | None:
        """Problems of one padding group differ only in ``num_train`` (T), and their
        training sets nest: at T, a problem's pairs are the first T that the same
        problem would draw at any larger T. A template with the group's largest
        T (``dataclasses.replace(problem, num_train=largest)``) then builds every
        problem's training set, padded (``Data.mask`` marks its own T rows), so an
        agent that ``accepts_padding`` compiles once for the whole group. ``None``:
        the family cannot pad.
        """
        ...

    @property
    def key_seed(self) -> int:
        """A 32-bit seed from which every random draw of the problem derives.

        Split into (build, test, agent) keys; distinct problems must have
        distinct seeds, so that they are independent.
        """
        ...

    def build_args(self) -> Any:
        """This problem's arrays for :meth:`build` (e.g. its temperature)."""
        ...

    def build(self, key: jax.Array, args: Any) -> ProblemInstance:
        """Draws the instance from ``build_args()``; pure, jittable, vmappable.

        Depends on ``self`` only through its ``shape``, so that one problem of
        a shape can build the instances of all of them.
        """
        ...

    def sample_test(self, key: jax.Array, env: Any, tau: int) -> TestSamples:
        """Draws ``num_test`` test tau-samples of the instance with ``env``; jittable."""
        ...

    def instance(self) -> ProblemInstance:
        """The instance, computed now (for plots, notebooks and tests)."""
        ...


class ProblemKeys(NamedTuple):
    """The keys of a problem's random draws, all from its ``key_seed``."""

    build: jax.Array  # environment and training data
    test: jax.Array  # test tau-samples and the evaluator's draws; fold in tau
    agent: jax.Array  # the agent's training; fold in the agent seed


def definition_seed(definition: str) -> int:
    """A problem's 32-bit ``key_seed``: a stable hash of the text that defines its draws."""
    return int.from_bytes(hashlib.sha256(definition.encode()).digest()[:4], "little")


# Fields that are not part of what a row evaluates: the id names it, every tau is a
# row of its own (and the draws do not depend on the set of taus), N and M are key
# columns of the row, and a dataset file's path is not its contents (its digest is).
_NOT_DEFINITION = ("problem_id", "taus", "num_test", "num_samples", "dataset")
# Fields added to problems after rows were stored and published, and the value that is
# the definition before them: a problem that has it hashes as before.
_EARLIER_DEFINITION = {"kappa": None, "max_monte_carlo_tau": 9}


@functools.lru_cache(maxsize=4096)
def definition_hash(problem: "Problem") -> str:
    """A stable hash of what a problem's rows evaluate: its family, ``key_seed`` and every
    field that changes its numbers (a dataset file's digest, not its path).

    The results store keys rows by it beside the problem id, so a row is never served
    for other data under the same id (an edited file, another file of the same name,
    a built-in problem whose definition changed).
    """
    if dataclasses.is_dataclass(problem):
        fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)
                  if f.name not in _NOT_DEFINITION}
        for name, earlier in _EARLIER_DEFINITION.items():
            if name in fields and fields[name] == earlier:
                del fields[name]
    else:  # a user's problem class that is not a dataclass: its repr stands in
        fields = {"repr": repr(problem)}
    fields.update(family=type(problem).__name__, key_seed=int(problem.key_seed),
                  num_hyperplanes=int(problem.num_hyperplanes), target=str(problem.target))
    text = json.dumps(fields, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_instance(problem: "Problem", template: "Problem") -> ProblemInstance:
    """``problem``'s instance, built by a program compiled once per ``template`` (the
    problem with every field that is not part of its shape reset)."""
    return _build_jit(problem_keys(problem.key_seed).build, template, problem.build_args())


@functools.partial(jax.jit, static_argnums=1)
def _build_jit(key, template, args) -> ProblemInstance:
    return template.build(key, args)


def problem_keys(key_seed: int | jax.Array) -> ProblemKeys:
    """Splits a problem's ``key_seed`` into the keys of its draws."""
    return ProblemKeys(*jax.random.split(jax.random.key(key_seed), 3))


# fold_in data for the out-of-distribution stream of a test key: far from the small
# counters that split(key) uses, so adding these inputs left every test sample as it was.
_OOD_STREAM = 2**31 - 1


def ood_key(test_key: jax.Array) -> jax.Array:
    """The key of a test draw's out-of-distribution inputs, a stream of its own."""
    return jax.random.fold_in(test_key, _OOD_STREAM)


@dataclasses.dataclass(frozen=True)
class ProblemResult:
    """One evaluation of one trained agent config on one problem at one tau.

    Carries every key column of the results store, so a row means the same
    wherever it was computed. Each column has one meaning: a value that does not
    apply to the row's problem (d_KL where no exact likelihood exists, a temperature
    or accuracy on regression) is None, never another quantity in its place.
    """

    agent: str
    config_hash: str  # stable id of (agent, config)
    config: str  # canonical JSON of the config
    problem_id: str
    problem_hash: str  # base.definition_hash of the problem: what the row evaluated
    target: Target  # the problem's: "classification" or "regression"
    temperature: float | None  # classification: the environment's (told to agents); else None
    noise_variance: float | None  # regression: of the targets' Gaussian noise; else None
    num_train: int
    seed: int
    input_dim: int
    num_classes: int | None  # K; None for regression
    tau: int
    num_test: int  # N
    num_samples: int  # M
    estimator: str  # the estimator setting ("auto", "monte_carlo", "partition")
    agent_seed: int
    metric: Metric  # which was computed: d_KL ("kl") or the NLL ("nll": no exact likelihood)
    kl: float | None  # d_KL, mean over test tau-samples, in nats; None unless metric == "kl"
    kl_stderr: float | None  # its standard error over the test tau-samples
    nll: float | None  # the joint NLL, mean over test tau-samples; None unless metric == "nll"
    nll_stderr: float | None  # its standard error over the test tau-samples
    num_clipped: int  # infinite per-sample terms clipped to the largest finite one
    accuracy: float | None  # of the agent's mean prediction on the test inputs; None: regression
    ece: float | None  # expected calibration error of the mean prediction, 15 bins; likewise
    train_seconds: float  # training, compilation excluded
    compile_seconds: float  # compiling this problem's share of the programs (0 when reused)
    eval_seconds: float  # evaluating at this tau, compilation excluded
    status: str = "ok"  # "ok" or "failed"
    error: str = ""  # what went wrong when status == "failed"
    diagnostics: str | None = None  # JSON of neural_testbed.diagnostics.as_record, if computed
    # Regression, the row of a problem's smallest tau: the agent's predictive at the
    # probes, encoded by neural_testbed.leaderboard.predictives (for `xll`); else None.
    predictive: bytes | None = None

    def estimate(self, metric: Metric) -> tuple[float | None, float | None]:
        """The (mean, standard error) of ``metric``, which the caller takes from the
        problem it scores, so that an NLL is never read as a d_KL or the reverse."""
        if metric not in ("kl", "nll"):
            raise ValueError(f"unknown metric {metric!r}; allowed: kl, nll")
        if metric != self.metric:
            raise ValueError(f"the row of {self.agent} on {self.problem_id} (tau {self.tau}) "
                             f"holds the {self.metric}, not the {metric}")
        return (self.kl, self.kl_stderr) if metric == "kl" else (self.nll, self.nll_stderr)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
