"""Computes the rows of one agent config (or a batch of configs that differ only in the
fields the agent declares batchable, vmapped: ``config_batches``) on a batch of
same-shape problems.

The problems' instances are built (one after another), the agent is
trained (``vmap`` over problems) and evaluated at every tau (``lax.map`` over
problems, so memory stays that of one problem) by programs compiled once per
(shape, batch size) and reused for every batch. Compilation is timed apart
from training and evaluation. A batch that raises is retried one problem at a
time, so one failing problem gets a failed row and the others still run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import jax
import jax.extend.core
import numpy as np

from neural_testbed import base, diagnostics, evaluation
from neural_testbed.agents import host
from neural_testbed.leaderboard import config_batches
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import predictives
from neural_testbed.likelihood import kl

__all__ = ["MATMUL_PRECISION", "BatchRunner", "accepts_padding", "error_text", "failed_rows",
           "run_batch", "use_full_float32_products"]

# Matrix products in full float32 on every device. A GPU's default is TensorFloat-32
# (10 mantissa bits): the problems' draws then depended on the device. (It was not the
# cause of the GP agents' NaN predictions on an H200: see gaussian_process.joint_sample.)
# A CPU multiplies in float32 either way: its rows are unchanged.
MATMUL_PRECISION = "float32"


def use_full_float32_products() -> None:
    """Makes :data:`MATMUL_PRECISION` this process's default, for what the runner does not
    trace itself (probe, xll, plots' one-problem figures): only for processes the command
    owns (its own and its workers), as it is a process-wide JAX setting."""
    jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION)

log = logging.getLogger(__name__)


def error_text(error: BaseException | str) -> str:
    """An exception as text of at most about 1000 characters, for a failed row or a log."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text if len(text) <= 1000 else text[:1000] + " ..."


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree.map(lambda *leaves: np.stack(leaves), *trees)


class BatchRunner:
    """Compiled programs for one agent config (or batch of configs) and one problem shape.

    Reuse one for every batch of that shape: each program compiles once per
    batch size, ahead of time, so its compile time is measured apart. With a
    template of more training rows than its problems' T (their padding group's
    largest T) and an agent that ``accepts_padding``, it runs the problems of
    every T of the group: each is built padded, its ``Data.mask`` marking its own
    first T rows.
    """

    def __init__(self, agent: base.Agent | base.HostAgent, agent_name: str, config: Any,
                 template: base.Problem, estimator: str, agent_seed: int, *,
                 more_configs: Sequence[Any] = (),
                 make: Callable[[Any, base.Shapes], base.Agent] | None = None,
                 batchable: Collection[str] = ()):
        """``more_configs``: configs computed in the same programs, which differ from
        ``config`` only in fields of ``batchable`` (the agent's declaration), traced;
        ``make`` builds an agent from a config and shapes (needed with ``more_configs``)."""
        self.agent_name = agent_name
        self.configs = (config, *more_configs)
        self.config_jsons = [configs_lib.config_json(c) for c in self.configs]
        self.config_hashes = [configs_lib.config_hash(agent_name, c) for c in self.configs]
        self.template = template
        self.estimator = estimator
        self.agent_seed = agent_seed
        self._compiled: dict[tuple[str, int], tuple[Callable, Any]] = {}
        self._compiling = threading.Lock()  # units computed at once compile a program once
        self._programs: dict[str, Callable] = {}
        # A host agent's states live in this runner between training and evaluation, so
        # its batches run one at a time when units are computed at once (executors).
        self._exclusive = contextlib.nullcontext()
        self._values: tuple[np.ndarray, ...] = ()  # the traced floats, [configs, fields]
        self.array_fields: tuple[str, ...] = ()  # the fields vmapped over, with more_configs
        if more_configs:
            names = self.array_fields = config_batches.array_fields(self.configs, batchable)
            self._values = (config_batches.values_of(self.configs, names),)
            shapes = base.Shapes.of(template)

            def agent_for(values):  # one config's agent, inside the vmap over configs
                return make(config_batches.with_arrays(config, names, values), shapes)
        if isinstance(agent, base.HostAgent):
            if more_configs:
                raise TypeError("a host agent trains outside JAX: one config at a time")
            self._host_agent, self._host_states = agent, host.HostStates()
            self._exclusive = threading.Lock()
            enn = host.host_enn(agent, self._host_states, template.num_classes)
        else:
            self._host_agent, enn = None, agent.enn
            pads = accepts_padding(agent)

            def train_problems(agent, agent_keys, instances, num_train):
                def one(key, data, prior, num_train):
                    if pads:  # T may be fewer than the (padded) rows: mark its own
                        data = data._replace(mask=jax.numpy.arange(data.x.shape[0]) < num_train)
                    return agent.train(jax.random.fold_in(key, agent_seed), data, prior)
                return jax.vmap(one)(agent_keys, instances.data, instances.prior, num_train)

            def train(agent_keys, instances, num_train, *values):
                if not more_configs:
                    return train_problems(agent, agent_keys, instances, num_train)
                return jax.vmap(lambda v: train_problems(agent_for(v), agent_keys, instances,
                                                         num_train))(values[0])

            self._programs["train"] = train
        # Every evaluation at one tau sees the same test samples and belief samples.
        self.evaluations = kl.evaluations(template.taus, estimator)
        # The evaluation whose rows keep a regression agent's predictive at the probes.
        self._keeps_predictive = next(e for e in self.evaluations if e[0] == min(template.taus))
        for tau, tau_estimator in self.evaluations:
            def evaluator(enn, tau=tau, tau_estimator=tau_estimator):
                if template.target == "regression":
                    return evaluation.make_regression_evaluator(
                        enn, tau, template.num_test, template.num_samples, tau_estimator)
                return evaluation.make_evaluator(
                    enn, tau, template.num_classes, template.num_test,
                    template.num_samples, tau_estimator, num_hyperplanes=template.num_hyperplanes)

            def evaluate(test_keys, states, envs, *values, tau=tau, evaluator=evaluator,
                         evaluate_one=evaluator(enn)):
                def one(args):
                    test_key, state, env = args
                    data_key, eval_key = jax.random.split(jax.random.fold_in(test_key, tau))
                    test = template.sample_test(data_key, env, tau)
                    if not more_configs:
                        return evaluate_one(eval_key, state, test)
                    # Every config sees the problem's test samples and belief-sample keys.
                    return jax.vmap(lambda s, v: evaluator(agent_for(v).enn)(eval_key, s, test))(
                        state, values[0])
                if more_configs:  # states are [configs, problems, ...]: map over problems
                    states = jax.tree.map(lambda s: jax.numpy.swapaxes(s, 0, 1), states)
                return jax.lax.map(one, (test_keys, states, envs))

            self._programs[f"evaluate{tau}/{tau_estimator}"] = evaluate

    def _call(self, name: str, *args) -> tuple[Any, float, float]:
        """Runs program ``name``; returns (result, compile seconds, run seconds)."""
        if name == "build":  # depends on the problem shape only: shared by every agent
            cache, lock, cache_key, program = (_BUILD_PROGRAMS, _BUILD_COMPILING,
                                               self.template.shape,
                                               _build_program(self.template))
        else:
            cache, lock, cache_key, program = (self._compiled, self._compiling, name,
                                               self._programs[name])
        return _run_compiled(cache, lock, (cache_key, len(jax.tree.leaves(args)[0])), program,
                             args)

    def __call__(self, batch: Sequence[base.Problem], num_real: int) -> list[base.ProblemResult]:
        """Rows for the first ``num_real`` problems of ``batch`` (the rest is
        padding), for each config; raises if anything in the batch fails."""
        with self._exclusive:
            return self._rows(batch, num_real)

    def _compile_ahead(self, key_seeds, args, num_train) -> float:
        """Compiles a batch size's build, training and evaluation programs side by side,
        before any runs: a cold run otherwise compiles them one after another, and XLA
        compiles in the thread that asks (tracing and lowering, in Python, still take
        turns). The later programs are traced from the earlier ones' output shapes.
        Returns the seconds it took (0 when they are compiled already)."""
        size = len(key_seeds)
        names = ["train", *(f"evaluate{tau}/{estimator}" for tau, estimator in self.evaluations)]
        build_key = (self.template.shape, size)
        with self._compiling, contextlib.ExitStack() as building:
            if all((name, size) in self._compiled for name in names):
                return 0.0
            start = time.perf_counter()
            building.enter_context(_BUILD_COMPILING)
            if build_key in _BUILD_PROGRAMS:  # built by another runner: let others build too
                building.close()
            jobs = []  # (cache, cache key, traced program)
            with jax.default_matmul_precision(MATMUL_PRECISION):  # fixed when traced
                build = jax.jit(_build_program(self.template)).trace(key_seeds, args)
                if build_key not in _BUILD_PROGRAMS:
                    jobs.append((_BUILD_PROGRAMS, build_key, build))
                instances, agent_keys, test_keys = build.out_info
                train_args = (agent_keys, instances, num_train, *self._values)
                train = jax.jit(self._programs["train"]).trace(*train_args)
                jobs.append((self._compiled, ("train", size), train))
                for name in names[1:]:
                    eval_args = (test_keys, train.out_info, instances.env, *self._values)
                    jobs.append((self._compiled, (name, size),
                                 jax.jit(self._programs[name]).trace(*eval_args)))
            with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
                compiled = list(pool.map(lambda job: _compile(job[2]), jobs))
            for (cache, cache_key, traced), program in zip(jobs, compiled):
                cache[cache_key] = _cache_entry(traced, program)
            return time.perf_counter() - start

    def largest_array(self, problem: base.Problem) -> tuple[int, str]:
        """Bytes of the largest array in the programs of ``problem`` alone (of this runner's
        shape), and which program holds it: traced, not compiled or run. Every program
        needs at least that much memory."""
        key_seeds = np.array([problem.key_seed], np.uint32)
        args = _stack([problem.build_args()])
        with jax.default_matmul_precision(MATMUL_PRECISION):
            build = jax.jit(_build_program(self.template)).trace(key_seeds, args)
            instances, agent_keys, test_keys = build.out_info
            sizes = {"build": _largest_array(build.jaxpr.jaxpr)}
            if self._host_agent is None:
                train = jax.jit(self._programs["train"]).trace(
                    agent_keys, instances, np.array([problem.num_train], np.int32),
                    *self._values)
                sizes["training"], states = _largest_array(train.jaxpr.jaxpr), train.out_info
            else:  # trained on the host; its states are handles
                states = jax.ShapeDtypeStruct((1,), np.int32)
            for tau, estimator in self.evaluations:
                evaluate = jax.jit(self._programs[f"evaluate{tau}/{estimator}"]).trace(
                    test_keys, states, instances.env, *self._values)
                sizes[f"tau = {tau} evaluation"] = _largest_array(evaluate.jaxpr.jaxpr)
        name = max(sizes, key=sizes.get)
        return sizes[name], name

    def _rows(self, batch: Sequence[base.Problem], num_real: int) -> list[base.ProblemResult]:
        key_seeds = np.array([p.key_seed for p in batch], np.uint32)
        args = _stack([p.build_args() for p in batch])
        num_train = np.array([p.num_train for p in batch], np.int32)
        ahead = 0.0 if self._host_agent is not None else self._compile_ahead(
            key_seeds, args, num_train)
        (instances, agent_keys, test_keys), build_compile, build_run = self._call(
            "build", key_seeds, args)
        if self._host_agent is None:
            states, train_compile, train_run = self._call(
                "train", agent_keys, instances, num_train, *self._values)
        else:
            states, train_compile, train_run = self._train_on_host(
                agent_keys, instances, batch[:num_real])
        compile_seconds = ahead + build_compile + train_compile
        evaluations = {}
        try:
            for tau, estimator in self.evaluations:
                ev, eval_compile, eval_run = self._call(
                    f"evaluate{tau}/{estimator}", test_keys, states, instances.env, *self._values)
                compile_seconds += eval_compile
                evaluations[tau, estimator] = jax.device_get(ev), eval_run
        except Exception:
            failure = self._host_agent is not None and self._host_states.take_failure()
            if failure:  # the agent's error in one line, not XLA's wrapping of it
                raise failure from None
            raise
        finally:
            if self._host_agent is not None:
                self._host_states.clear()
        shares = num_real * len(self.configs)  # (problem, config) pairs the times are split over
        rows = []
        for c in range(len(self.configs)):
            of_config = {}
            for (tau, estimator), (ev, eval_run) in evaluations.items():
                if self._values:  # [problems, configs, ...]: this config's
                    ev = jax.tree.map(lambda a, c=c: a[:, c], ev)
                if isinstance(ev.diagnostics, diagnostics.Inputs):  # classification
                    with jax.default_matmul_precision(MATMUL_PRECISION):
                        ev = ev._replace(diagnostics=diagnostics.summarise_batch(ev.diagnostics))
                of_config[tau, estimator] = ev, eval_run / shares
            rows += [self._row(p, tau, estimator, ev, i, c, (build_run + train_run) / shares,
                               compile_seconds / shares, eval_seconds)
                     for i, p in enumerate(batch[:num_real])
                     for (tau, estimator), (ev, eval_seconds) in of_config.items()]
        return rows

    def _train_on_host(self, agent_keys, instances, problems) -> tuple[jax.Array, float, float]:
        """Trains a host agent problem by problem, each on its own T pairs (the first
        rows of a padded set, without a mask); returns its states' handles.

        Padding problems reuse the last real problem's state.
        """
        start = time.perf_counter()
        data = jax.device_get(instances.data)
        temperatures = np.asarray(jax.device_get(instances.prior.temperature))
        handles = []
        for i, problem in enumerate(problems):
            key = jax.random.fold_in(agent_keys[i], self.agent_seed)
            rows = problem.num_train
            prior = instances.prior.replace(temperature=float(temperatures[i]))
            state = self._host_agent.train(host.host_seed(key), base.Data(
                x=data.x[i, :rows], y=data.y[i, :rows]), prior)
            handles.append(self._host_states.put(state))
        handles += [handles[-1]] * (len(agent_keys) - len(problems))
        return np.array(handles, np.int32), 0.0, time.perf_counter() - start

    def _row(self, problem, tau, estimator, ev: evaluation.Evaluation, i, c, train_seconds,
             compile_seconds, eval_seconds) -> base.ProblemResult:
        values = {name: float(np.asarray(getattr(ev, name))[i])
                  for name in ("kl", "kl_stderr", "accuracy", "ece")}
        status, error = "ok", ""
        if not bool(np.asarray(ev.logits_valid)[i]):
            status, error = "failed", "the agent produced NaN or +inf logits"
        elif not np.isfinite(values["kl"]):
            status, error = "failed", (
                f"the {problem.metric} estimate is not finite ({values['kl']}): the agent gave "
                "probability 0 to the observed labels of every test sample")
        predictive = None
        if (status == "ok" and (tau, estimator) == self._keeps_predictive
                and isinstance(ev.diagnostics, diagnostics.RegressionDiagnostics)):
            belief = ev.diagnostics.predictive
            predictive = predictives.encode(np.asarray(belief.mean)[i],
                                            np.asarray(belief.spread)[i],
                                            np.asarray(belief.noise_variance)[i])
        return result_row(self.agent_name, self.config_hashes[c], self.config_jsons[c], problem,
                          tau, estimator, self.agent_seed, **values,
                          num_clipped=int(np.asarray(ev.num_clipped)[i]),
                          train_seconds=train_seconds, compile_seconds=compile_seconds,
                          eval_seconds=eval_seconds, status=status, error=error,
                          diagnostics=json.dumps(_record(ev.diagnostics, i)),
                          predictive=predictive)


def accepts_padding(agent: base.Agent | base.HostAgent) -> bool:
    """Whether problems of every T of a padding group can share ``agent``'s programs: a
    JAX agent says so; a host agent always can (the runner hands it its own T rows), and
    then its evaluation, which cannot be cached across processes, compiles once, not per T."""
    return isinstance(agent, base.HostAgent) or getattr(agent, "accepts_padding", False)


def _record(evaluation_diagnostics, i: int) -> dict:
    """Problem ``i``'s diagnostics as the JSON-ready dict a row stores."""
    if isinstance(evaluation_diagnostics, diagnostics.RegressionDiagnostics):
        return diagnostics.as_regression_record(evaluation_diagnostics, i)
    return diagnostics.as_record(evaluation_diagnostics, i)


def _largest_array(jaxpr) -> int:
    """Bytes of the largest value a jaxpr (or any jaxpr inside it: a loop's body, a
    branch) takes or makes."""
    largest = 0
    for var in (*jaxpr.invars, *(v for eqn in jaxpr.eqns for v in eqn.outvars)):
        shape, dtype = getattr(var.aval, "shape", None), getattr(var.aval, "dtype", None)
        if shape is not None and dtype is not None:
            largest = max(largest, math.prod(shape) * dtype.itemsize)
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(inner, jax.extend.core.ClosedJaxpr):
                    inner = inner.jaxpr
                if isinstance(inner, jax.extend.core.Jaxpr):
                    largest = max(largest, _largest_array(inner))
    return largest


def _build_program(template: base.Problem) -> Callable:
    """Instances, agent keys and test keys of a batch of problems of ``template``'s shape."""

    def build(key_seeds, args):
        def one(problem):
            key_seed, problem_args = problem
            keys = base.problem_keys(key_seed)
            return template.build(keys.build, problem_args), keys.agent, keys.test
        # One problem after another: a vmapped GP regression build (two problems'
        # factorisations in one program) hung XLA's CPU runtime in 3 runs of 4.
        return jax.lax.map(one, (key_seeds, args))

    return build


# Compiled build programs of this process, by (problem shape, batch size): every
# agent config of a sweep builds its problems with the same program.
_BUILD_PROGRAMS: dict[tuple, tuple[Callable, Any]] = {}
_BUILD_COMPILING = threading.Lock()


# JAX's CPU LAPACK kernels split a batch of factorisations over the thread pool that runs
# the programs, and wait for the parts: two such programs at once (units computed side by
# side) can hold every pool thread while waiting for parts no thread is free to run. Seen
# on 2 cores: two units' batched Cholesky factorisations, every thread waiting, for good.
# So programs that factorise run one at a time in a process.
_FACTORISING = threading.Lock()
_FACTORISATION = re.compile(r"= (cholesky|eigh?|lu|qr|geqrf|geqp3|householder_product|svd|"
                            r"triangular_solve|schur|hessenberg|tridiagonal(_solve)?)[\[ ]")


def _factorises(traced) -> bool:
    """Whether a traced program calls a LAPACK-style factorisation or solve."""
    return bool(_FACTORISATION.search(str(traced.jaxpr)))


def _compile(traced) -> Any:
    """Every program the runner runs is compiled here (through JAX's persistent cache)."""
    return traced.lower().compile()


def _cache_entry(traced, compiled) -> tuple[Callable, Any]:
    """A compiled program and the guard it runs under (``_FACTORISING`` if it factorises)."""
    return compiled, _FACTORISING if _factorises(traced) else contextlib.nullcontext()


def _run_compiled(
    cache: dict, lock: threading.Lock, cache_key: tuple, program: Callable, args
) -> tuple[Any, float, float]:
    """Compiles ``program`` for ``args`` once per ``cache_key`` (timed), then runs it (timed).

    ``lock`` guards ``cache``: units computed at once that need the same program compile it
    once (the second waits); other runners' programs compile side by side. A program that
    factorises runs while no other such program runs (``_FACTORISING``). Every program
    multiplies matrices in full float32 (:data:`MATMUL_PRECISION`)."""
    compile_seconds = 0.0
    with lock:
        entry = cache.get(cache_key)
        if entry is None:
            start = time.perf_counter()
            with jax.default_matmul_precision(MATMUL_PRECISION):  # fixed when traced
                traced = jax.jit(program).trace(*args)
            entry = cache[cache_key] = _cache_entry(
                traced, _compile(traced))
            compile_seconds = time.perf_counter() - start
    compiled, guard = entry
    with guard:
        start = time.perf_counter()
        result = jax.block_until_ready(compiled(*args))
        return result, compile_seconds, time.perf_counter() - start


def result_row(agent_name: str, config_hash: str, config_json: str, problem: base.Problem,
               tau: int, estimator: str, agent_seed: int, **values) -> base.ProblemResult:
    """A row with every key column filled in from the problem and the run settings."""
    return base.ProblemResult(
        agent=agent_name, config_hash=config_hash, config=config_json,
        problem_id=problem.problem_id, problem_hash=base.definition_hash(problem),
        temperature=problem.temperature,
        num_train=problem.num_train, seed=problem.seed, input_dim=problem.input_dim,
        num_classes=problem.num_classes, tau=tau, num_test=problem.num_test,
        num_samples=problem.num_samples, estimator=estimator, agent_seed=agent_seed,
        metric=problem.metric, **values)


def failed_rows(agent_name: str, config: Any, problems: Sequence[base.Problem],
                estimator: str, agent_seed: int, error: BaseException | str):
    """Failed rows for every (problem, tau) of problems that could not be computed."""
    nan = float("nan")
    config_hash = configs_lib.config_hash(agent_name, config)
    config_json = configs_lib.config_json(config)
    return [
        result_row(agent_name, config_hash, config_json, p, tau, tau_estimator, agent_seed,
                   kl=nan, kl_stderr=nan, num_clipped=0, accuracy=nan, ece=nan,
                   train_seconds=nan, compile_seconds=nan, eval_seconds=nan,
                   status="failed", error=error_text(error))
        for p in problems for tau, tau_estimator in kl.evaluations(p.taus, estimator)
    ]


def run_batch(runner: BatchRunner, batch: Sequence[base.Problem],
              size: int) -> list[base.ProblemResult]:
    """Rows of a batch of same-shape problems, padded to ``size`` problems, for each of the
    runner's configs.

    On an error, runs its problems one by one, so that only the failing ones
    get failed rows (for every config of the runner).
    """
    padded = list(batch) + [batch[-1]] * (size - len(batch))
    try:
        return runner(padded, num_real=len(batch))
    except Exception as error:  # an agent may raise anything; record, don't stop
        if len(runner.configs) > 1:  # say where it ran: make may have used a field in Python
            error = (f"{len(runner.configs)} configs vmapped over "
                     f"{', '.join(runner.array_fields)} (the agent's batchable fields, float32 "
                     f"arrays there): {error_text(error)}")
        if len(batch) == 1:
            log.warning("%s failed on %s: %s", runner.agent_name, batch[0].problem_id, error)
            return [row for config in runner.configs
                    for row in failed_rows(runner.agent_name, config, batch, runner.estimator,
                                           runner.agent_seed, error)]
        log.warning("%s: a batch of %d problems failed (%s); retrying one by one",
                    runner.agent_name, len(batch), error_text(error))
        return [row for p in batch for row in run_batch(runner, [p], 1)]
