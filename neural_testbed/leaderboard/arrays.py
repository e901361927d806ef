"""Scoring joint predictions from arrays, for a model in any framework.

A JAX agent is called by the evaluator; a model in PyTorch, scikit-learn or NumPy
need not be. :func:`problem_arrays` hands over what it must predict, as NumPy arrays:
a problem's training set and, for each tau, each test tau-sample's distinct inputs
(dyadic sampling keeps them few: kappa per tau-sample, however large tau) and its
out-of-distribution input. The model returns, for each test tau-sample, M samples of
its belief: class probabilities (or logits) at those inputs, sample m of tau-sample n
being one network at all of them. :func:`score_predictions` scores them with the same
estimators, test labels, keys and standard errors as the evaluator gives a JAX agent,
and returns the same store rows.

Arrays, per problem and tau: ``x`` is ``[N, A + 1, d]`` float32 (A distinct inputs,
A <= kappa, or tau with i.i.d. inputs, then the out-of-distribution input) and the
predictions ``[N, M, A + 1, K]`` float32: ``4 N M (A + 1) K`` bytes, 24 MB at
N = M = 1000, tau = 10, kappa = 2, K = 2 (and 808 MB at tau = 100 with i.i.d. inputs).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base, diagnostics, evaluation
from neural_testbed.leaderboard import configs
from neural_testbed.likelihood import kl
from neural_testbed.run import programs as run_programs
from neural_testbed.run import rows as run_rows

__all__ = ["ProblemArrays", "ScoredDirectory", "TestInputs", "member_draws", "problem_arrays",
           "read_predictions", "score_directory", "score_predictions", "write_problem_arrays"]


@dataclasses.dataclass(frozen=True)
class TestInputs:
    """What a model predicts at for one tau: each test tau-sample's distinct inputs, then its
    out-of-distribution input; ``index`` says which of them each of its tau inputs is."""

    tau: int
    x: np.ndarray  # [N, A + 1, d] float32
    index: np.ndarray  # [N, tau] int32, in [0, A)


@dataclasses.dataclass(frozen=True)
class ProblemArrays:
    """A problem as arrays: its training pairs and its test inputs at each tau."""

    problem_id: str
    x_train: np.ndarray  # [T, d] float32
    y_train: np.ndarray  # [T] int32
    num_classes: int  # K
    num_samples: int  # M belief samples asked for per test tau-sample
    tests: Mapping[int, TestInputs]


def _test(problem: base.Problem, tau: int, env: Any):
    """The problem's test tau-samples and the evaluator's key at ``tau``: the draws of the
    run path (``run.programs.UnitRunner.evaluate``), so both score the same samples."""
    data_key, eval_key = jax.random.split(
        jax.random.fold_in(base.problem_keys(problem.key_seed).test, tau))
    return problem.sample_test(data_key, env, tau), eval_key


def _distinct(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x [N, tau, d]`` -> each tau-sample's distinct inputs ``[N, A, d]`` (A the most any
    has; fewer are padded by repeating the first) and ``index [N, tau]`` into them."""
    found = [np.unique(sample, axis=0, return_inverse=True) for sample in x]
    width = max(len(inputs) for inputs, _ in found)
    inputs = np.stack([np.concatenate([u, np.repeat(u[:1], width - len(u), 0)])
                       for u, _ in found])
    index = np.stack([inverse.reshape(-1) for _, inverse in found]).astype(np.int32)
    return inputs.astype(np.float32), index


def problem_arrays(problem: base.Problem) -> ProblemArrays:
    """The problem's training pairs and its test inputs at each of its taus."""
    if problem.target != "classification":
        raise ValueError(f"{problem.problem_id}: scoring from arrays is for classification "
                         f"problems; this one is {problem.target}")
    instance = problem.instance()
    tests = {}
    for tau in problem.taus:
        test, _ = _test(problem, tau, instance.env)
        inputs, index = _distinct(np.asarray(test.x))
        x = np.concatenate([inputs, np.asarray(test.ood_x)[:, None]], axis=1)
        tests[tau] = TestInputs(tau, x, index)
    mask = None if instance.data.mask is None else np.asarray(instance.data.mask)
    keep = slice(None) if mask is None else mask
    return ProblemArrays(problem.problem_id, np.asarray(instance.data.x)[keep],
                         np.asarray(instance.data.y, np.int32)[keep], problem.num_classes,
                         problem.num_samples, tests)


def member_draws(member_predictions: np.ndarray, num_samples: int, seed: int = 0) -> np.ndarray:
    """An ensemble's belief samples: ``[members, N, A + 1, K]`` (each member at every test
    input) -> ``[N, M, A + 1, K]``, each of the M samples of each tau-sample a member drawn
    uniformly at random, afresh per tau-sample (as the evaluator draws a JAX ensemble's)."""
    members = np.asarray(member_predictions)
    draws = np.random.default_rng(seed).integers(0, members.shape[0],
                                                 (members.shape[1], num_samples))
    return members[draws, np.arange(members.shape[1])[:, None]]


def _log_probs(predictions: np.ndarray, kind: str, shape: tuple[int, ...]) -> jax.Array:
    if kind not in ("probs", "logits"):
        raise ValueError(f"kind must be 'probs' or 'logits', got {kind!r}")
    predictions = np.asarray(predictions)
    if predictions.shape != shape:
        raise ValueError(f"predictions of shape {predictions.shape}; expected {shape} "
                         "(N test tau-samples, M belief samples, the inputs of "
                         "problem_arrays, K classes)")
    values = jnp.asarray(predictions, jnp.float32)
    if kind == "logits":
        return jax.nn.log_softmax(values)
    if not np.all(np.isfinite(predictions)) or predictions.min() < 0:
        raise ValueError("probabilities must be finite and >= 0")
    sums = predictions.sum(-1)
    if not np.allclose(sums, 1, atol=1e-3):
        raise ValueError(f"probabilities must sum to 1 over the classes; sums range "
                         f"{sums.min():.4g} to {sums.max():.4g}")
    return jnp.log(values / values.sum(-1, keepdims=True))


def score_predictions(problem: base.Problem, predictions: Mapping[int, np.ndarray],
                      agent_name: str, config: Any = None, *, kind: str = "probs",
                      estimator: str = "auto", agent_seed: int = 0,
                      train_seconds: float = math.nan) -> list[base.ProblemResult]:
    """The store rows of a model's belief samples on ``problem``: ``predictions[tau]`` is
    ``[N, M, A + 1, K]`` at the inputs of :func:`problem_arrays` (class probabilities, or
    logits with ``kind="logits"``), one array per tau of the problem.

    ``config`` (a config dataclass, or None) names the model's settings in the
    rows, as an agent's config does; ``train_seconds`` is the model's own training time.
    """
    missing = sorted(set(problem.taus) - set(predictions))
    if missing:
        raise ValueError(f"{problem.problem_id}: no predictions at tau {missing}; it is "
                         f"scored at tau {list(problem.taus)}")
    env = problem.instance().env
    config_json = configs.config_json(config)
    keys = dict(agent_name=agent_name, config_hash=configs.config_hash(agent_name, config),
                config_json=config_json, agent_seed=agent_seed)
    rows = []
    for tau, tau_estimator in kl.evaluations(problem.taus, estimator,
                                             problem.max_monte_carlo_tau):
        start = time.perf_counter()
        test, eval_key = _test(problem, tau, env)
        inputs, index = _distinct(np.asarray(test.x))
        width = inputs.shape[1] + 1
        log_probs = _log_probs(predictions[tau], kind, (problem.num_test, problem.num_samples,
                                                        width, problem.num_classes))
        # Each tau input's row, then the out-of-distribution input's (the last).
        take = np.concatenate([index, np.full((len(index), 1), width - 1, np.int32)], axis=1)
        scored = jnp.take_along_axis(log_probs, jnp.asarray(take)[:, None, :, None], axis=2)
        ev = evaluation.evaluate_log_probs(
            eval_key, scored, test,
            kl.choose_estimator(tau, tau_estimator, problem.max_monte_carlo_tau),
            num_hyperplanes=problem.num_hyperplanes)
        ev = jax.tree.map(lambda a: jnp.asarray(a)[None], ev)  # a batch of one, as a run's
        with jax.default_matmul_precision(run_programs.MATMUL_PRECISION):
            ev = ev._replace(diagnostics=diagnostics.summarise_batch(ev.diagnostics))
        seconds = (train_seconds if tau == min(problem.taus) else 0.0, 0.0,
                   time.perf_counter() - start)
        rows.append(run_rows.evaluated_row(ev, 0, problem, tau, tau_estimator,
                                           keep_predictive=False, seconds=seconds, **keys))
    return rows


def file_name(problem_id: str) -> str:
    """The name of a problem's arrays file and of its predictions file: a flat name, so
    that one directory holds a whole sweep's."""
    return problem_id.replace("/", "_") + ".npz"


def write_problem_arrays(problems: Sequence[base.Problem], out: str | pathlib.Path) -> list[str]:
    """One ``.npz`` per problem in ``out`` (``classification_5.npz`` for
    ``classification/5``): ``x_train``, ``y_train``, ``num_classes``, ``num_samples`` and,
    per tau, ``x_tau<tau>`` and ``index_tau<tau>``; returns the paths."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for problem in problems:
        arrays = problem_arrays(problem)
        tests = {f"{name}_tau{tau}": value for tau, t in arrays.tests.items()
                 for name, value in (("x", t.x), ("index", t.index))}
        path = out / file_name(problem.problem_id)
        np.savez(path, x_train=arrays.x_train, y_train=arrays.y_train,
                 num_classes=arrays.num_classes, num_samples=arrays.num_samples, **tests)
        paths.append(str(path))
    return paths


def read_predictions(problem: base.Problem, directory: str | pathlib.Path
                     ) -> tuple[dict[int, np.ndarray], str]:
    """A problem's predictions from ``directory``: the ``.npz`` named as
    :func:`write_problem_arrays` names the problem's, holding ``probs_tau<tau>`` (or
    ``logits_tau<tau>``) for each tau; returns them and their kind."""
    path = pathlib.Path(directory) / file_name(problem.problem_id)
    if not path.exists():
        raise FileNotFoundError(f"no predictions for {problem.problem_id}: {path} is missing")
    with np.load(path) as saved:
        kinds = {kind for kind in ("probs", "logits")
                 if any(name.startswith(f"{kind}_tau") for name in saved.files)}
        if len(kinds) != 1:
            raise ValueError(f"{path}: expected arrays probs_tau<tau> or logits_tau<tau> "
                             f"(one kind), found {', '.join(saved.files) or 'none'}")
        (kind,) = kinds
        return ({tau: saved[f"{kind}_tau{tau}"] for tau in problem.taus
                 if f"{kind}_tau{tau}" in saved.files}, kind)


@dataclasses.dataclass(frozen=True)
class ScoredDirectory:
    """What :func:`score_directory` did: problem ids scored, failed (with why) and without
    a predictions file."""

    scored: list[str]
    failed: dict[str, str]
    missing: list[str]


def score_directory(problems: Sequence[base.Problem], directory: str | pathlib.Path,
                    agent_name: str, store: Any) -> ScoredDirectory:
    """Scores every problem's predictions file in ``directory`` (see
    :func:`read_predictions`) and writes the rows to ``store`` (a
    :class:`~neural_testbed.leaderboard.store.ResultsStore`) as each is scored. A problem
    whose predictions cannot be scored gets failed rows saying why, and the rest go on;
    one without a file is left out (nothing is written for it)."""
    scored, failed, missing = [], {}, []
    for problem in problems:
        try:
            predictions, kind = read_predictions(problem, directory)
        except FileNotFoundError:
            missing.append(problem.problem_id)
            continue
        try:
            rows = score_predictions(problem, predictions, agent_name, kind=kind)
        except ValueError as error:
            failed[problem.problem_id] = str(error)
            rows = run_rows.failed_rows(agent_name, None, [problem], "auto", 0, error)
        else:
            scored.append(problem.problem_id)
        store.write(rows)
    return ScoredDirectory(scored, failed, missing)
