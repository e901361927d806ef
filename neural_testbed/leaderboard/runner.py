"""Runs an agent over problems: train once per problem, evaluate every tau.

Problems of the same shape are batched: their environments and data are drawn,
the agent is trained (``vmap`` over problems) and evaluated (``lax.map`` over
problems, so memory stays that of one problem) by programs compiled once per
shape. A batch that raises is retried one problem at a time, so one failing
problem gets a failed row and the others still run.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from neural_testbed import base, generative
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.likelihood import kl

__all__ = ["run_agent"]

log = logging.getLogger(__name__)


@functools.partial(
    jax.jit, static_argnames=("input_dim", "num_classes", "env_hidden", "num_train")
)
def _build_batch(seeds, temperatures, *, input_dim, num_classes, env_hidden, num_train):
    """Environments, training data and agent keys of a batch of problems."""

    def build(seed, temperature):
        keys = problems_lib.problem_keys(seed)
        env = generative.sample_environment(
            keys.environment, temperature, input_dim, num_classes, env_hidden
        )
        data = generative.sample_train_data(keys.train_data, env, num_train)
        return env, data, keys

    return jax.vmap(build)(seeds, temperatures)


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 1000 else text[:1000] + " ..."


class BatchRunner:
    """Compiled functions for one agent and one problem shape.

    Reuse one for every batch of that shape: its jitted programs compile on
    the first batch only.
    """

    def __init__(self, agent: base.Agent, template: problems_lib.Problem, estimator: str,
                 agent_seed: int):
        self.template = template
        self.agent_seed = agent_seed
        self.train = jax.jit(jax.vmap(agent.train))
        self.evaluate = {}
        for tau in template.taus:
            evaluate_one = kl.make_evaluator(
                agent.enn, tau, template.num_classes, template.num_test,
                template.num_samples, estimator,
            )
            self.evaluate[tau] = jax.jit(
                lambda keys, states, envs, f=evaluate_one: jax.lax.map(
                    lambda args: f(*args), (keys, states, envs)
                )
            )

    def __call__(self, batch: Sequence[problems_lib.Problem], agent_name: str, num_real: int):
        """Rows for the first ``num_real`` problems of ``batch`` (the rest is
        padding); raises if anything in the batch fails."""
        t = self.template
        seeds = jnp.array([p.seed for p in batch], jnp.uint32)
        temperatures = jnp.array([p.temperature for p in batch], jnp.float32)
        start = time.perf_counter()
        envs, data, keys = _build_batch(
            seeds, temperatures, input_dim=t.input_dim, num_classes=t.num_classes,
            env_hidden=t.env_hidden, num_train=t.num_train,
        )
        priors = base.PriorKnowledge(
            input_dim=t.input_dim, num_classes=t.num_classes, num_train=t.num_train,
            env_hidden=t.env_hidden, temperature=temperatures,
        )
        agent_keys = jax.vmap(lambda k: jax.random.fold_in(k, self.agent_seed))(keys.agent)
        states = jax.block_until_ready(self.train(agent_keys, data, priors))
        train_seconds = (time.perf_counter() - start) / num_real
        evaluations = {}
        for tau, evaluate in self.evaluate.items():
            start = time.perf_counter()
            test_keys = jax.vmap(lambda k, tau=tau: jax.random.fold_in(k, tau))(keys.test)
            ev = jax.device_get(evaluate(test_keys, states, envs))
            evaluations[tau] = ev, (time.perf_counter() - start) / num_real
        return [
            _row(agent_name, p, tau, ev, i, train_seconds, eval_seconds)
            for i, p in enumerate(batch[:num_real])
            for tau, (ev, eval_seconds) in evaluations.items()
        ]


def _row(agent_name, problem, tau, ev: kl.Evaluation, i, train_seconds, eval_seconds):
    values = {name: float(np.asarray(getattr(ev, name))[i])
              for name in ("kl", "kl_stderr", "accuracy", "ece")}
    status, error = "ok", ""
    if not bool(np.asarray(ev.logits_finite)[i]):
        status, error = "failed", "the agent produced NaN or infinite logits"
    elif not np.isfinite(values["kl"]):
        status, error = "failed", (
            f"the KL estimate is not finite (kl={values['kl']}): the agent gave "
            "probability 0 to an observed label")
    return base.ProblemResult(
        agent=agent_name, problem_id=problem.problem_id, temperature=problem.temperature,
        num_train=problem.num_train, seed=problem.seed, tau=tau, **values,
        train_seconds=train_seconds, eval_seconds=eval_seconds, status=status, error=error,
    )


def _failed_rows(agent_name, problem, error: BaseException):
    nan = float("nan")
    return [
        base.ProblemResult(
            agent=agent_name, problem_id=problem.problem_id, temperature=problem.temperature,
            num_train=problem.num_train, seed=problem.seed, tau=tau, kl=nan, kl_stderr=nan,
            accuracy=nan, ece=nan, train_seconds=nan, eval_seconds=nan,
            status="failed", error=_error_text(error),
        )
        for tau in problem.taus
    ]


def run_agent(
    agent: base.Agent,
    problems: Sequence[problems_lib.Problem],
    agent_name: str = "agent",
    *,
    agent_seed: int = 0,
    batch_size: int | None = None,
    estimator: kl.Estimator = "auto",
    progress: bool = True,
    on_rows: Callable[[list[base.ProblemResult]], None] | None = None,
) -> list[base.ProblemResult]:
    """Trains ``agent`` once per problem and evaluates it at each of the problem's taus.

    Args:
      agent: the agent to evaluate.
      problems: the problems, e.g. ``get_sweep("quick").values()``.
      agent_name: recorded in each row.
      agent_seed: folded into each problem's agent key.
      batch_size: problems of one shape trained together; ``None`` = all of
        them (fastest; a smaller batch shows progress more often and uses
        less memory while training).
      estimator: ``"auto"``, ``"monte_carlo"`` or ``"partition"``.
      progress: show a progress bar on stderr.
      on_rows: called with the rows of each batch as soon as they are
        computed (e.g. to write them to a results store).

    Returns:
      One row per (problem, tau), failed problems included (``status="failed"``).

    Example:
      >>> from neural_testbed import agents, leaderboard
      >>> spec = agents.get_agent("mlp")
      >>> rows = leaderboard.run_agent(spec.make(spec.default),
      ...                              leaderboard.get_sweep("quick").values(), "mlp")
    """
    problems = list(problems)
    kl.choose_estimator(1, estimator)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size!r}")
    groups: dict[tuple, list[problems_lib.Problem]] = {}
    for p in problems:
        groups.setdefault(p.shape, []).append(p)
    results: list[base.ProblemResult] = []
    bar = tqdm(total=len(problems), unit="problem", disable=not progress, file=sys.stderr,
               desc=agent_name, dynamic_ncols=True)
    with bar:
        for group in groups.values():
            runner = BatchRunner(agent, group[0], estimator, agent_seed)
            size = batch_size or len(group)
            for start in range(0, len(group), size):
                batch = group[start:start + size]
                bar.set_postfix_str(f"T={batch[0].num_train}")
                rows = run_batch(runner, batch, size, agent_name)
                if on_rows is not None:
                    on_rows(rows)
                results.extend(rows)
                bar.update(len(batch))
    return results


def run_batch(runner: BatchRunner, batch, size, agent_name) -> list[base.ProblemResult]:
    """Rows of a batch of same-shape problems, padded to ``size`` problems.

    On an error, runs its problems one by one, so that only the failing ones
    get failed rows.
    """
    padded = list(batch) + [batch[-1]] * (size - len(batch))
    try:
        return runner(padded, agent_name, num_real=len(batch))
    except Exception as error:  # an agent may raise anything; record, don't stop
        if len(batch) == 1:
            log.warning("%s failed on %s: %s", agent_name, batch[0].problem_id, error)
            return _failed_rows(agent_name, batch[0], error)
        log.warning("%s: a batch of %d problems failed (%s); retrying one by one",
                    agent_name, len(batch), _error_text(error))
        return [row for p in batch for row in run_batch(runner, [p], 1, agent_name)]
