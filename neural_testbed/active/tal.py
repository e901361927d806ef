"""Transductive active learning (TAL): do an agent's predictive correlations pick
useful labels? (Wang et al., section 3.2 and Algorithm 1.)

The agent under test is the *selection model*. Each round it is trained on the
current training set (``agent.train``), its predictive covariance of ``f`` over
the candidate (pool) inputs and the target (test) inputs picks a batch of
candidates by BatchMIG, MIG, TIG or at random (:mod:`.selection`), and their
labels (``f`` plus noise) join the training set. The *prediction model* is the
same for every agent: the exact posterior with the true kernel and noise (the
oracle, as in the paper's synthetic setting), conditioned on the augmented
training set. The score after each round is its test log-likelihood: the mean
over the targets of ``log N(y_u; mean_u, var_u + noise)``, marginal per point as
the paper's (and its code's) test log-likelihood. Only the selection depends on
the agent, so a higher score means its uncertainty chose more useful labels.

A problem's targets are its first Q pool inputs (its probes; on
``regression-wang`` the 500 test inputs) and its candidates the pool inputs
after them (the 200 pool inputs there). Every random draw comes from the
problem's keys: the noise of each target's test label and of each candidate's
label is drawn once per problem, so every method and every agent meets the same
labels, and the round-0 training uses the same key as the leaderboard's run of
the agent (round ``r`` folds ``r`` into it).

On real data (``real-regression``, or a user's file with ``--target-column``) the
targets are the split's first Q test rows and the candidates its pool rows, with
their observed targets as labels; the prediction model is the Gaussian process
fitted to the split's training and pool rows (squared-exponential ARD kernel and
noise, :mod:`neural_testbed.generative.real_regression`), standing in for the
paper's 'Oracle' GP fitted to the same rows (with a neural kernel network kernel).
There is no exact posterior, so no metacorrelation (NaN).

The selection covariance is exact for :mod:`~neural_testbed.agents.oracle_gp`
(its posterior), the belief's own for an agent of at most M members (each member
once, equal weights), and otherwise the covariance (1/M) of M belief samples
drawn with the problem's keys. A single model's is 0: every criterion scores 0
and picks the first candidates, which, the pool being i.i.d. N(0, I) inputs, is a
uniformly random choice. Beside the scores each result holds the agent's
metacorrelation at the targets before any query, from the same covariance.

Training sets grow by B points a round, so ``agent.train`` compiles once per
round and problem shape (problems of one d share the programs).

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
sections 3.2 and 5, Appendices B and C.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from neural_testbed import base, gaussian_process, kernels
from neural_testbed.active import selection
from neural_testbed.agents import oracle_gp
from neural_testbed.diagnostics import correlations

__all__ = [
    "TALResult",
    "TALSettings",
    "check_problems",
    "fitted_prediction_log_likelihood",
    "iter_tal",
    "mean_metacorrelation",
    "paired_difference",
    "pick_problems",
    "prediction_log_likelihood",
    "run_tal",
    "summarise",
]

# fold_in data for TAL's stream of a problem's test key: apart from split's small counters
# and from the out-of-distribution stream (2**31 - 1), so no other draw changes.
_TAL_STREAM = 2**31 - 2


@dataclasses.dataclass(frozen=True)
class TALSettings:
    """How TAL runs on each problem.

    The defaults follow Wang et al.'s code for the synthetic setting: each round
    queries 1% of the T + test + pool points (7 on ``regression-wang``), for 10
    rounds as in its UCI experiments (the paper's Figure 4 scores one round).
    """

    num_rounds: int = 10  # R: rounds of queries
    batch_size: int = 7  # B: candidates queried per round
    num_samples: int = 1000  # M >= 2: belief samples for the selection covariance
    methods: tuple[str, ...] = selection.METHODS  # selection rules, of selection.METHODS
    agent_seed: int = 0  # folded into each problem's agent key, as `run --seed`

    def __post_init__(self):
        for name, flag, least in (("num_rounds", "--rounds", 1), ("batch_size", "--batch", 1),
                                  ("num_samples", "--samples", 2)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} ({flag}) must be an integer >= {least}, got {value!r}")
        if not isinstance(self.agent_seed, int) or not 0 <= self.agent_seed < 2**32:
            raise ValueError(f"agent_seed must be an integer from 0 to {2**32 - 1} (fold_in "
                             f"data), got {self.agent_seed!r}")
        unknown = [m for m in self.methods if m not in selection.METHODS]
        if unknown or not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods (--method) {','.join(self.methods) or '(none)'}: expected "
                             f"distinct names among {', '.join(selection.METHODS)}")


class TALResult(NamedTuple):
    """One problem's TAL run: the prediction model's score after each round, per method."""

    problem_id: str
    num_queried: np.ndarray  # [R + 1] labels queried before each score: 0, B, 2B, ...
    log_likelihood: dict[str, np.ndarray]  # method -> [R + 1] mean test log-likelihood
    selected: dict[str, np.ndarray]  # method -> [R, B] candidate indices queried each round
    metacorrelation: float  # the agent's at the targets before any query; NaN: not applicable
    seconds: float  # wall time of the problem, compilation included


def check_problems(problems: Sequence[base.Problem], settings: TALSettings) -> None:
    """Refuses, in one line, a problem TAL cannot run on with ``settings``."""
    for problem in problems:
        if problem.target != "regression":
            raise ValueError(f"tal needs regression problems; {problem.problem_id} is a "
                             f"{problem.target} problem")
        candidates = _num_candidates(problem)
        needed = settings.num_rounds * settings.batch_size
        if candidates < needed:
            raise ValueError(
                f"{problem.problem_id} has {candidates} pool inputs after its "
                f"{problem.num_probes} test inputs; {settings.num_rounds} rounds x "
                f"{settings.batch_size} queries need {needed}")


def _num_candidates(problem: base.Problem) -> int:
    """The pool inputs a problem's rounds may query: its own count (real data), else the
    pool inputs after the probes."""
    candidates = getattr(problem, "num_candidates", None)
    return candidates if candidates is not None else problem.num_pool - problem.num_probes


def pick_problems(problems: Mapping[str, base.Problem], which: str | None) -> list[base.Problem]:
    """The problems of a sweep that ``which`` names: all of them (None), the first N in
    seed order (seed 0 of every setting, then seed 1, ...: N problems cover the
    settings evenly), or comma-separated problem ids."""
    if which is None:
        return list(problems.values())
    which = which.strip()
    if which.isdigit():
        count = int(which)
        if not 1 <= count <= len(problems):
            raise ValueError(f"{which}: expected from 1 to {len(problems)}, the problems of "
                             "the sweep")
        return sorted(problems.values(), key=lambda p: p.seed)[:count]
    ids = [i.strip() for i in which.split(",") if i.strip()]
    unknown = [i for i in ids if i not in problems]
    if unknown or not ids:
        raise ValueError(f"{which!r}: expected a number or problem ids of the sweep; "
                         f"unknown: {', '.join(unknown) or '(none given)'}")
    return [problems[i] for i in dict.fromkeys(ids)]


@functools.partial(jax.jit, static_argnames="kernel")
def prediction_log_likelihood(kernel: str, data: base.Data, noise_variance, x: jax.Array,
                              y: jax.Array) -> jax.Array:
    """The prediction model's score: the mean over inputs ``x [n, d]`` of the exact
    posterior's marginal log-density of the noisy labels ``y [n]``."""
    return _marginal_log_likelihood(kernel, data, noise_variance, x, y)


@jax.jit
def fitted_prediction_log_likelihood(signal_variance, lengthscales: jax.Array, data: base.Data,
                                     noise_variance, x: jax.Array, y: jax.Array) -> jax.Array:
    """The prediction model's score on real data: as :func:`prediction_log_likelihood`,
    with the squared-exponential ARD kernel of a fitted process (its ``lengthscales [d]``
    divide the inputs of an isotropic kernel of lengthscale 1)."""
    kernel = functools.partial(kernels.rbf_kernel, signal_variance=signal_variance)
    return _marginal_log_likelihood(kernel, base.Data(data.x / lengthscales, data.y),
                                    noise_variance, x / lengthscales, y)


def _marginal_log_likelihood(kernel, data: base.Data, noise_variance, x: jax.Array,
                             y: jax.Array) -> jax.Array:
    posterior = gaussian_process.condition(kernel, data, noise_variance)
    mean, cov = gaussian_process.posterior_at(kernel, posterior, x)
    variance = jnp.diag(cov) + noise_variance
    return jnp.mean(-0.5 * ((y - mean) ** 2 / variance + jnp.log(2 * jnp.pi * variance)))


def _covariance_program(enn: base.ENN, num_samples: int):
    """``covariance(key, state, x [n, d]) -> [n, n]``, the selection model's covariance
    of ``f`` (see the module docstring for which one); jitted."""
    counted = enn.num_indices is not None and enn.num_indices <= num_samples

    def covariance(key, state, x):
        if isinstance(state, oracle_gp.OracleGPState):  # exact: what its samples are drawn from
            return oracle_gp.posterior(state, x)[1]
        indices = (jnp.arange(enn.num_indices) if counted
                   else jax.vmap(enn.sample_index)(jax.random.split(key, num_samples)))
        f = jax.vmap(lambda index: enn.apply(state, x, index))(indices)
        if f.shape[1:] != (x.shape[0], 1):
            raise ValueError(f"agent returned outputs of shape {f.shape[1:]} for inputs of "
                             f"shape {x.shape}; expected ({x.shape[0]}, 1), one value per input")
        centred = f[..., 0] - jnp.mean(f[..., 0], axis=0)
        return centred.T @ centred / f.shape[0]

    return jax.jit(covariance)


class _Problem(NamedTuple):
    """What one problem's rounds need, drawn once."""

    score: Callable[[base.Data], float]  # the prediction model's test log-likelihood
    data: base.Data
    prior: base.RegressionPriorKnowledge
    candidates_x: jax.Array  # [P, d]
    candidate_y: jax.Array  # [P] noisy labels, revealed when queried
    inputs: jax.Array  # [P + U, d] candidates then targets: the covariance's inputs
    target_x: jax.Array  # [U, d]
    target_y: jax.Array  # [U] noisy test labels
    reference_correlation: jax.Array | None  # [U, U] the oracle's before any query; None: real
    agent_key: jax.Array
    random_key: jax.Array
    belief_key: jax.Array


def _draw(problem: base.Problem, agent_seed: int) -> _Problem:
    data, prior, env = problem.instance()
    keys = base.problem_keys(problem.key_seed)
    noise_key, random_key, belief_key = jax.random.split(
        jax.random.fold_in(keys.test, _TAL_STREAM), 3)
    q = problem.num_probes
    if hasattr(env, "pool_f"):  # a known function: labels are f plus fresh noise
        labels = env.pool_f + jnp.sqrt(prior.noise_variance) * jax.random.normal(
            noise_key, env.pool_f.shape)
        candidates_x, candidate_y = env.pool_x[q:], labels[q:]
        target_x, target_y, reference = env.pool_x[:q], labels[:q], env.probe_correlation

        def score(data, x, y):
            return prediction_log_likelihood(prior.kernel, data, prior.noise_variance, x, y)
    else:  # real data: the observed targets, and the process fitted to the split
        candidates_x, candidate_y = env.pool_x, env.pool_y
        target_x, target_y, reference = env.test_x[:q], env.test_y[:q], None

        def score(data, x, y):
            return fitted_prediction_log_likelihood(env.signal_variance, env.lengthscales, data,
                                                    prior.noise_variance, x, y)
    return _Problem(lambda data: float(score(data, target_x, target_y)), data, prior,
                    candidates_x, candidate_y, jnp.concatenate([candidates_x, target_x]),
                    target_x, target_y, reference,
                    jax.random.fold_in(keys.agent, agent_seed), random_key, belief_key)


def _with_queries(drawn: _Problem, queried: np.ndarray) -> base.Data:
    """The training set after querying candidates ``queried``."""
    return base.Data(jnp.concatenate([drawn.data.x, drawn.candidates_x[queried]]),
                     jnp.concatenate([drawn.data.y, drawn.candidate_y[queried]]))


def _run_problem(problem, drawn: _Problem, train, covariance, settings: TALSettings,
                 advance) -> TALResult:
    start = time.perf_counter()
    num_candidates = drawn.candidates_x.shape[0]
    noise_variance = drawn.prior.noise_variance

    def score(queried):
        return drawn.score(_with_queries(drawn, queried))

    def selection_covariance(round_index, queried):
        data = _with_queries(drawn, queried)
        key = drawn.agent_key if round_index == 0 else jax.random.fold_in(drawn.agent_key,
                                                                          round_index)
        state = train(key, data, drawn.prior)
        return covariance(jax.random.fold_in(drawn.belief_key, round_index), state,
                          drawn.inputs)

    first_covariance = None  # round 0's: the same data and keys for every method
    initial = score(np.zeros(0, int))
    log_likelihood, selected = {}, {}
    for method in settings.methods:
        queried, available = np.zeros(0, int), jnp.ones(num_candidates, bool)
        scores, batches = [initial], []
        for round_index in range(settings.num_rounds):
            cov = None
            if method != "random":
                if round_index == 0:
                    if first_covariance is None:
                        first_covariance = selection_covariance(0, queried)
                    cov = first_covariance
                else:
                    cov = selection_covariance(round_index, queried)
            batch = selection.select(method, jax.random.fold_in(drawn.random_key, round_index),
                                     cov, available, settings.batch_size, noise_variance)
            batch = np.asarray(batch)
            available = available.at[batch].set(False)
            queried = np.concatenate([queried, batch])
            batches.append(batch)
            scores.append(score(queried))
            advance()
        log_likelihood[method], selected[method] = np.array(scores), np.stack(batches)
    metacorrelation = math.nan
    if first_covariance is not None and drawn.reference_correlation is not None:
        targets = first_covariance[num_candidates:, num_candidates:]
        metacorrelation = float(correlations.metacorrelation_of_correlation(
            gaussian_process.correlation(targets), drawn.reference_correlation))
    return TALResult(problem.problem_id,
                     np.arange(settings.num_rounds + 1) * settings.batch_size,
                     log_likelihood, selected, metacorrelation, time.perf_counter() - start)


def iter_tal(build: base.AgentBuilder, problems: Sequence[base.Problem],
             settings: TALSettings = TALSettings(),
             progress: bool = False) -> Iterator[TALResult]:
    """As :func:`run_tal`, yielding each problem's result as soon as it is done (so a
    caller can store it before the next problem starts). Builds and checks the agent of
    each problem shape, and checks the problems, before returning."""
    problems = list(problems)
    agents = {}  # shapes -> agent
    for problem in problems:
        shapes = base.Shapes.of(problem)
        if shapes not in agents:
            agents[shapes] = build(shapes)
            if not isinstance(agents[shapes], base.Agent):
                raise TypeError(f"tal needs a JAX agent (base.Agent), got "
                                f"{type(agents[shapes]).__name__}")
    check_problems(problems, settings)
    return _results(agents, problems, settings, progress)


def _results(agents: dict[base.Shapes, base.Agent], problems: Sequence[base.Problem],
             settings: TALSettings, progress: bool) -> Iterator[TALResult]:
    programs = {shapes: (jax.jit(agent.train),
                         _covariance_program(agent.enn, settings.num_samples))
                for shapes, agent in agents.items()}
    total = len(problems) * len(settings.methods) * settings.num_rounds
    with tqdm(total=total, unit="round", disable=not progress or total == 0, file=sys.stderr,
              desc="tal", dynamic_ncols=True) as bar:
        for problem in problems:
            bar.set_postfix_str(problem.problem_id)
            drawn = _draw(problem, settings.agent_seed)
            train, covariance = programs[base.Shapes.of(problem)]
            yield _run_problem(problem, drawn, train, covariance, settings,
                               lambda: bar.update(1))


def run_tal(build: base.AgentBuilder, problems: Sequence[base.Problem],
            settings: TALSettings = TALSettings(), progress: bool = False) -> list[TALResult]:
    """TAL with the agent of ``build`` as the selection model on each problem, one after
    another.

    Args:
      build: ``shapes -> agent``: a JAX agent whose ENN gives one value per input (a
        regression agent), built for each problem shape.
      problems: regression problems with pool inputs after their probes.
      settings: rounds, batch size, belief samples, methods, agent seed.
      progress: show a progress bar (problems x methods x rounds) on stderr.

    Returns:
      One :class:`TALResult` per problem, in order.

    Example:
      >>> problems = list(leaderboard.get_sweep("regression-wang").values())[10:13]
      >>> build = functools.partial(agents.make_oracle_gp_agent, agents.OracleGPConfig())
      >>> results = run_tal(build, problems, TALSettings(num_rounds=3))
      >>> summarise(results)[-1]["batchmig"]  # mean test log-likelihood after 21 queries
    """
    return list(iter_tal(build, problems, settings, progress))


def _mean_and_stderr(values: np.ndarray) -> tuple[float, float]:
    values = np.asarray(values, float)
    stderr = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else math.nan
    return float(values.mean()), float(stderr)


def summarise(results: Sequence[TALResult]) -> list[dict]:
    """Per round: the number queried and, per method, the mean test log-likelihood over
    the problems and its standard error (``<method>_se``)."""
    methods = list(results[0].log_likelihood)
    records = []
    for r, queried in enumerate(results[0].num_queried):
        record = {"round": r, "queried": int(queried)}
        for method in methods:
            mean, stderr = _mean_and_stderr([res.log_likelihood[method][r] for res in results])
            record[method], record[f"{method}_se"] = mean, stderr
        records.append(record)
    return records


def paired_difference(results: Sequence[TALResult], method: str, baseline: str = "random",
                      round_index: int = -1) -> tuple[float, float]:
    """Mean over problems of ``method``'s score minus ``baseline``'s after round
    ``round_index`` (default: the last), and its standard error (paired by problem)."""
    return _mean_and_stderr([res.log_likelihood[method][round_index]
                             - res.log_likelihood[baseline][round_index] for res in results])


def mean_metacorrelation(results: Sequence[TALResult]) -> tuple[float, float, int]:
    """The agent's mean metacorrelation over the problems where it applies, its standard
    error and how many problems that is (0: not applicable anywhere)."""
    values = [res.metacorrelation for res in results if not math.isnan(res.metacorrelation)]
    if not values:
        return math.nan, math.nan, 0
    return (*_mean_and_stderr(values), len(values))
