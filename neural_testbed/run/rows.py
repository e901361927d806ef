"""The rows a run writes: one per (config, problem, tau), made from an evaluation or a
failure, with every key column filled in from the problem and the run's settings."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from neural_testbed import base, diagnostics, evaluation
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import predictives
from neural_testbed.likelihood import kl
from neural_testbed.run.plan import WorkUnit

__all__ = ["error_text", "evaluated_row", "failed_rows", "failed_rows_of", "result_row"]


def error_text(error: BaseException | str) -> str:
    """An exception as text of at most about 1000 characters, for a failed row or a log."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text if len(text) <= 1000 else text[:1000] + " ..."


def result_row(agent_name: str, config_hash: str, config_json: str, problem: base.Problem,
               tau: int, estimator: str, agent_seed: int, *, estimate: float,
               estimate_stderr: float, accuracy: float, ece: float,
               **values) -> base.ProblemResult:
    """A row with every key column filled in from the problem and the run settings.

    ``estimate`` (and its stderr) is of the problem's metric and goes to that metric's
    column; a regression row has its noise variance, and no temperature, class count,
    accuracy or ECE (None), which do not apply to it.
    """
    regression, exact = problem.target == "regression", problem.metric == "kl"
    return base.ProblemResult(
        agent=agent_name, config_hash=config_hash, config=config_json,
        problem_id=problem.problem_id, problem_hash=base.definition_hash(problem),
        target=problem.target, temperature=None if regression else problem.temperature,
        noise_variance=problem.noise_variance if regression else None,
        num_train=problem.num_train, seed=problem.seed, input_dim=problem.input_dim,
        num_classes=None if regression else problem.num_classes, tau=tau,
        num_test=problem.num_test, num_samples=problem.num_samples, estimator=estimator,
        agent_seed=agent_seed, metric=problem.metric,
        kl=estimate if exact else None, kl_stderr=estimate_stderr if exact else None,
        nll=None if exact else estimate, nll_stderr=None if exact else estimate_stderr,
        accuracy=None if regression else accuracy, ece=None if regression else ece, **values)


def _finite_or_none(value) -> float | None:
    """A number for the diagnostics' JSON: None (null) where it is not finite."""
    value = float(value)
    return value if math.isfinite(value) else None


def evaluated_row(ev: evaluation.Evaluation, i: int, problem: base.Problem, tau: int,
                  estimator: str, *, keep_predictive: bool, seconds: tuple[float, float, float],
                  report: Mapping[str, float] | None = None,
                  **keys: Any) -> base.ProblemResult:
    """The row of problem ``i`` of a batch's evaluation ``ev`` (diagnostics summarised);
    failed where the agent's logits or the estimate are not finite. ``seconds``: (train,
    compile, evaluate) of this row's share; ``report``: the agent's report of its
    training on this problem (:attr:`base.Agent.report`), kept in the diagnostics as
    ``agent_<name>``; ``keys``: :func:`result_row`'s agent_name, config_hash,
    config_json and agent_seed."""
    values = {name: float(np.asarray(getattr(ev, field))[i]) for name, field in (
        ("estimate", "kl"), ("estimate_stderr", "kl_stderr"), ("accuracy", "accuracy"),
        ("ece", "ece"))}  # the evaluator's kl is its estimate of the problem's metric
    status, error = "ok", ""
    if not bool(np.asarray(ev.logits_valid)[i]):
        status, error = "failed", "the agent produced NaN or +inf logits"
    elif not np.isfinite(values["estimate"]):
        status, error = "failed", (
            f"the {problem.metric} estimate is not finite ({values['estimate']}): the agent "
            "gave probability 0 to the observed labels of every test sample")
    regression = isinstance(ev.diagnostics, diagnostics.RegressionDiagnostics)
    predictive = None
    if status == "ok" and keep_predictive and regression:
        belief = ev.diagnostics.predictive
        predictive = predictives.encode(np.asarray(belief.mean)[i], np.asarray(belief.spread)[i],
                                        np.asarray(belief.noise_variance)[i])
    record = (diagnostics.as_regression_record(ev.diagnostics, i) if regression
              else diagnostics.as_record(ev.diagnostics, i))
    record.update({f"agent_{name}": _finite_or_none(value)
                   for name, value in (report or {}).items()})
    train_seconds, compile_seconds, eval_seconds = seconds
    return result_row(problem=problem, tau=tau, estimator=estimator, **keys, **values,
                      num_clipped=int(np.asarray(ev.num_clipped)[i]),
                      train_seconds=train_seconds, compile_seconds=compile_seconds,
                      eval_seconds=eval_seconds, status=status, error=error,
                      diagnostics=json.dumps(record), predictive=predictive)


def failed_rows(agent_name: str, config: Any, problems: Sequence[base.Problem],
                estimator: str, agent_seed: int, error: BaseException | str):
    """Failed rows for every (problem, tau) of problems that could not be computed."""
    nan = float("nan")
    config_hash = configs_lib.config_hash(agent_name, config)
    config_json = configs_lib.config_json(config)
    return [result_row(agent_name, config_hash, config_json, p, tau, tau_estimator, agent_seed,
                       estimate=nan, estimate_stderr=nan, num_clipped=0, accuracy=nan, ece=nan,
                       train_seconds=nan, compile_seconds=nan, eval_seconds=nan,
                       status="failed", error=error_text(error))
            for p in problems
            for tau, tau_estimator in kl.evaluations(p.taus, estimator, p.max_monte_carlo_tau)]


def failed_rows_of(unit: WorkUnit, error: BaseException | str) -> list[base.ProblemResult]:
    """Failed rows for every (config, problem, tau) of a unit that could not run at all."""
    return [row for c in unit.configs for row in failed_rows(
        unit.agent, c, unit.problems, unit.estimator, unit.agent_seed, error)]
