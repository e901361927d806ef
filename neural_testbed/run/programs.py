"""The compiled programs of a run, and the rows of one work unit computed with them.

A batch of same-shape problems is built (``lax.map`` over problems), the agent trained
(``vmap`` over problems, and over configs for a batch of configs) and evaluated at
every tau (``lax.map`` over problems, so memory stays that of one problem), by
programs compiled once per (config batch, shape, batch size) and kept in the run's
:class:`Programs`, never in the process. Compilation is timed apart from training
and evaluation. A batch that raises is retried problem by problem, so one failing
problem gets failed rows and the others still run.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core
import numpy as np

from neural_testbed import base, diagnostics, evaluation
from neural_testbed.agents import host, registry
from neural_testbed.leaderboard import config_batches
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import predictives
from neural_testbed.likelihood import kl
from neural_testbed.run.plan import WorkUnit, accepts_padding

__all__ = ["MATMUL_PRECISION", "Programs", "UnitRunner", "build_program", "compile_traced",
           "compute_unit", "error_text", "failed_rows", "failed_rows_of", "largest_array",
           "result_row", "unit_runner", "use_full_float32_products"]

log = logging.getLogger(__name__)

# Matrix products in full float32 on every device (a GPU's default, TensorFloat-32, made
# the problems' draws depend on the device); a CPU multiplies in float32 either way.
MATMUL_PRECISION = "float32"

# LAPACK-style primitives. JAX 0.10's CPU kernels for them deadlock when two programs
# that call them run at once in one process (benchmarks/lapack_threads.py: two threads,
# batched Cholesky, hung for good on 2 cores), so such programs run one at a time.
FACTORISATIONS = frozenset({"cholesky", "eig", "eigh", "lu", "qr", "geqrf", "geqp3",
                            "householder_product", "svd", "triangular_solve", "schur",
                            "hessenberg", "tridiagonal", "tridiagonal_solve"})
MAX_RUNNERS = 8  # unit runners a run keeps compiled (their programs' memory)


def use_full_float32_products() -> None:
    """Makes :data:`MATMUL_PRECISION` this process's default, for what the run path does
    not trace itself (probe, xll, figures): only for processes the command owns."""
    jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION)


def error_text(error: BaseException | str) -> str:
    """An exception as text of at most about 1000 characters, for a failed row or a log."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text if len(text) <= 1000 else text[:1000] + " ..."


def _equations(jaxpr) -> Iterator[Any]:
    """Every equation of a jaxpr and of the jaxprs inside it (loop bodies, branches)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(inner, jax.extend.core.ClosedJaxpr):
                    inner = inner.jaxpr
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from _equations(inner)


def largest_array(jaxpr) -> int:
    """Bytes of the largest value a jaxpr takes or makes: a lower bound of its memory."""
    values = [*jaxpr.invars, *(v for eqn in _equations(jaxpr) for v in eqn.outvars)]
    return max((math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in values
                if hasattr(v.aval, "shape") and hasattr(v.aval, "dtype")), default=0)


def compile_traced(traced: jax.stages.Traced) -> jax.stages.Compiled:
    """Every program of a run compiles here (through JAX's persistent cache)."""
    return traced.lower().compile()


class Programs:
    """A run's compiled programs, shared by the units it computes (in threads too).

    Each program compiles once per key (a second thread wanting it waits for the
    first); programs that factorise run one at a time (:data:`FACTORISATIONS`).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._compiled: dict[Hashable, concurrent.futures.Future] = {}
        self.factorising = threading.Lock()  # held while a program that factorises runs
        self._runners: collections.OrderedDict = collections.OrderedDict()

    def runner(self, key: Hashable, make: Callable[[], UnitRunner]) -> UnitRunner:
        """The unit runner of ``key``, made once; the least recently used beyond
        :data:`MAX_RUNNERS` is dropped with its programs."""
        with self._lock:
            if key not in self._runners:
                self._runners[key] = make()
                if len(self._runners) > MAX_RUNNERS:
                    _, dropped = self._runners.popitem(last=False)
                    for name in [k for k in self._compiled if k[0] == id(dropped)]:
                        del self._compiled[name]
            self._runners.move_to_end(key)
            return self._runners[key]

    def run(self, key: Hashable, program: Callable, args) -> tuple[Any, float, float]:
        """Runs ``program`` on ``args``, compiled once per ``key``; returns (result,
        compile seconds, run seconds)."""
        with self._lock:
            entry = self._compiled.get(key)
            mine = entry is None
            if mine:
                entry = self._compiled[key] = concurrent.futures.Future()
        compile_seconds = 0.0
        if mine:
            start = time.perf_counter()
            try:
                with jax.default_matmul_precision(MATMUL_PRECISION):  # fixed when traced
                    traced = jax.jit(program).trace(*args)
                entry.set_result((compile_traced(traced), any(
                    e.primitive.name in FACTORISATIONS for e in _equations(traced.jaxpr.jaxpr))))
            except BaseException as error:
                with self._lock:
                    del self._compiled[key]
                entry.set_exception(error)
                raise
            compile_seconds = time.perf_counter() - start
        compiled, factorises = entry.result()
        with self.factorising if factorises else contextlib.nullcontext():
            start = time.perf_counter()
            result = jax.block_until_ready(compiled(*args))
        return result, compile_seconds, time.perf_counter() - start


def build_program(template: base.Problem) -> Callable:
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


class UnitRunner:
    """The programs of one agent config (or batch of configs) on one problem shape.

    With a template of more training rows than its problems' T (their padding group's
    largest) and an agent that accepts padding, it runs the problems of every T of the
    group: each is built padded and trained on its own first T rows.
    """

    def __init__(self, agent: base.Agent | base.HostAgent, agent_name: str,
                 configs: Sequence[Any], template: base.Problem, estimator: str,
                 agent_seed: int, make: Callable[[Any, base.Shapes], base.Agent] | None = None,
                 batchable: Collection[str] = ()):
        """``configs``: one config, or a batch that differs only in fields of ``batchable``
        (the agent's declaration, ``config_batches``), traced; ``make`` builds an agent
        from a config and shapes (needed for a batch)."""
        self.agent_name, self.configs, self.template = agent_name, tuple(configs), template
        self.estimator, self.agent_seed = estimator, agent_seed
        self.config_jsons = [configs_lib.config_json(c) for c in self.configs]
        self.config_hashes = [configs_lib.config_hash(agent_name, c) for c in self.configs]
        self.evaluations = kl.evaluations(template.taus, estimator)  # (tau, estimator)
        # The evaluation whose rows keep a regression agent's predictive at the probes.
        self._keeps_predictive = next(e for e in self.evaluations if e[0] == min(template.taus))
        self._exclusive = contextlib.nullcontext()
        self.values: tuple[np.ndarray, ...] = ()  # the traced floats, [configs, fields]
        self.array_fields: tuple[str, ...] = ()  # the fields vmapped over, for a batch
        batched = len(self.configs) > 1
        if batched:
            names = self.array_fields = config_batches.array_fields(self.configs, batchable)
            self.values = (config_batches.values_of(self.configs, names),)
            shapes = base.Shapes.of(template)

            def agent_for(values):  # one config's agent, inside the vmap over configs
                return make(config_batches.with_arrays(self.configs[0], names, values), shapes)
        self._host = isinstance(agent, base.HostAgent)
        if self._host:
            if batched:
                raise TypeError("a host agent trains outside JAX: one config at a time")
            # Its states live here between training and evaluation: one batch at a time.
            self._host_agent, self._host_states = agent, host.HostStates()
            self._exclusive = threading.Lock()
            enn, self.train = host.host_enn(agent, self._host_states, template.num_classes), None
        else:
            enn, pads = agent.enn, accepts_padding(agent)

            def train_problems(agent, agent_keys, instances, num_train):
                def one(key, data, prior, num_train):
                    if pads:  # T may be fewer than the (padded) rows: mark its own
                        data = data._replace(mask=jax.numpy.arange(data.x.shape[0]) < num_train)
                    return agent.train(jax.random.fold_in(key, agent_seed), data, prior)
                return jax.vmap(one)(agent_keys, instances.data, instances.prior, num_train)

            def train(agent_keys, instances, num_train, *values):
                if not batched:
                    return train_problems(agent, agent_keys, instances, num_train)
                return jax.vmap(lambda v: train_problems(agent_for(v), agent_keys, instances,
                                                         num_train))(values[0])
            self.train = train

        def evaluate(test_keys, states, envs, *values, tau, tau_estimator):
            def evaluator(enn):
                if template.target == "regression":
                    return evaluation.make_regression_evaluator(
                        enn, tau, template.num_test, template.num_samples, tau_estimator)
                return evaluation.make_evaluator(
                    enn, tau, template.num_classes, template.num_test, template.num_samples,
                    tau_estimator, num_hyperplanes=template.num_hyperplanes)

            def one(args):
                test_key, state, env = args
                data_key, eval_key = jax.random.split(jax.random.fold_in(test_key, tau))
                test = template.sample_test(data_key, env, tau)
                if not batched:
                    return evaluator(enn)(eval_key, state, test)
                # Every config sees the problem's test samples and belief-sample keys.
                return jax.vmap(lambda s, v: evaluator(agent_for(v).enn)(eval_key, s, test))(
                    state, values[0])
            if batched:  # states are [configs, problems, ...]: map over problems
                states = jax.tree.map(lambda s: jax.numpy.swapaxes(s, 0, 1), states)
            return jax.lax.map(one, (test_keys, states, envs))
        self.evaluate = evaluate

    def arguments(self, batch: Sequence[base.Problem]):
        """The arguments of this batch's build and training programs."""
        return (np.array([p.key_seed for p in batch], np.uint32),
                jax.tree.map(lambda *leaves: np.stack(leaves), *[p.build_args() for p in batch]),
                np.array([p.num_train for p in batch], np.int32))

    def rows(self, programs: Programs, batch: Sequence[base.Problem],
             num_real: int) -> list[base.ProblemResult]:
        """Rows of the first ``num_real`` problems of ``batch`` (the rest is padding), for
        each config; raises if anything in the batch fails."""
        with self._exclusive:
            return self._rows(programs, batch, num_real)

    def _rows(self, programs: Programs, batch, num_real) -> list[base.ProblemResult]:
        key_seeds, args, num_train = self.arguments(batch)
        size = len(batch)
        (instances, agent_keys, test_keys), compile_s, build_s = programs.run(
            ("build", self.template.shape, size), build_program(self.template),
            (key_seeds, args))
        if self._host:
            states, train_compile, train_s = self._train_on_host(agent_keys, instances,
                                                                 batch[:num_real])
        else:
            states, train_compile, train_s = programs.run(
                (id(self), "train", size), self.train,
                (agent_keys, instances, num_train, *self.values))
        compile_s += train_compile
        evaluations = {}
        try:
            for tau, estimator in self.evaluations:
                program = lambda *a, tau=tau, estimator=estimator: self.evaluate(
                    *a, tau=tau, tau_estimator=estimator)
                ev, eval_compile, eval_s = programs.run(
                    (id(self), "evaluate", tau, estimator, size), program,
                    (test_keys, states, instances.env, *self.values))
                compile_s += eval_compile
                evaluations[tau, estimator] = jax.device_get(ev), eval_s
        except Exception:
            failure = self._host and self._host_states.take_failure()
            if failure:  # the agent's error in one line, not XLA's wrapping of it
                raise failure from None
            raise
        finally:
            if self._host:
                self._host_states.clear()
        shares = num_real * len(self.configs)  # (problem, config) pairs the times split over
        rows = []
        for c in range(len(self.configs)):
            of_config = {}
            for (tau, estimator), (ev, eval_s) in evaluations.items():
                if self.values:  # [problems, configs, ...]: this config's
                    ev = jax.tree.map(lambda a, c=c: a[:, c], ev)
                if isinstance(ev.diagnostics, diagnostics.Inputs):  # classification
                    with jax.default_matmul_precision(MATMUL_PRECISION):
                        ev = ev._replace(diagnostics=diagnostics.summarise_batch(ev.diagnostics))
                of_config[tau, estimator] = ev, eval_s / shares
            rows += [self._row(p, tau, estimator, ev, i, c, (build_s + train_s) / shares,
                               compile_s / shares, eval_seconds)
                     for i, p in enumerate(batch[:num_real])
                     for (tau, estimator), (ev, eval_seconds) in of_config.items()]
        return rows

    def _train_on_host(self, agent_keys, instances, problems) -> tuple[np.ndarray, float, float]:
        """Trains a host agent problem by problem, each on its own T pairs (the first rows
        of a padded set, without a mask); returns its states' handles (padding problems
        reuse the last)."""
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
        predictive = None
        if (status == "ok" and (tau, estimator) == self._keeps_predictive
                and isinstance(ev.diagnostics, diagnostics.RegressionDiagnostics)):
            belief = ev.diagnostics.predictive
            predictive = predictives.encode(np.asarray(belief.mean)[i],
                                            np.asarray(belief.spread)[i],
                                            np.asarray(belief.noise_variance)[i])
        record = (diagnostics.as_regression_record(ev.diagnostics, i)
                  if isinstance(ev.diagnostics, diagnostics.RegressionDiagnostics)
                  else diagnostics.as_record(ev.diagnostics, i))
        return result_row(self.agent_name, self.config_hashes[c], self.config_jsons[c], problem,
                          tau, estimator, self.agent_seed, **values,
                          num_clipped=int(np.asarray(ev.num_clipped)[i]),
                          train_seconds=train_seconds, compile_seconds=compile_seconds,
                          eval_seconds=eval_seconds, status=status, error=error,
                          diagnostics=json.dumps(record), predictive=predictive)


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
            for p in problems for tau, tau_estimator in kl.evaluations(p.taus, estimator)]


def failed_rows_of(unit: WorkUnit, error: BaseException | str) -> list[base.ProblemResult]:
    """Failed rows for every (config, problem, tau) of a unit that could not run at all."""
    return [row for c in unit.configs for row in failed_rows(
        unit.agent, c, unit.problems, unit.estimator, unit.agent_seed, error)]


def unit_runner(unit: WorkUnit, programs: Programs,
                build: base.AgentBuilder | None = None) -> UnitRunner:
    """The runner of a unit's configs and (padded) shape, made once per run."""
    spec = registry.get_agent(unit.agent) if build is None else None
    template = unit.problems[0]
    shapes = base.Shapes.of(template)
    made = spec.make(unit.config, shapes) if build is None else build(shapes)
    if unit.train_rows and accepts_padding(made):
        template = dataclasses.replace(template, num_train=unit.train_rows)
    key = (unit.agent, tuple(configs_lib.config_hash(unit.agent, c) for c in unit.configs),
           template.shape, unit.estimator, unit.agent_seed, id(build))
    return programs.runner(key, lambda: UnitRunner(
        made, unit.agent, unit.configs, template, unit.estimator, unit.agent_seed,
        make=spec.make if spec else None, batchable=spec.batchable if spec else ()))


def compute_unit(unit: WorkUnit, programs: Programs,
                 build: base.AgentBuilder | None = None) -> list[base.ProblemResult]:
    """The rows of a work unit; failures become failed rows, never exceptions.

    ``build``: ``shapes -> agent`` of the agent to run; None builds the registered agent
    of the unit's config (workers, Ray), so only registered agents run outside this
    process. A batch of problems that fails is run again one problem at a time (logged),
    so that only the failing problems get failed rows (for every config of the unit: a
    batch of configs does not fall back to one config at a time).
    """
    if unit.study is not None:  # records of the study's own, stored beside the rows
        if build is None:
            build = functools.partial(registry.get_agent(unit.agent).make, unit.config)
        return unit.study.records(build, unit.problems, programs)
    try:
        runner = unit_runner(unit, programs, build)
    except Exception as error:  # building the agent or its runner failed: every row fails
        return failed_rows_of(unit, error)
    size = max(unit.pad_to, len(unit.problems))
    padded = list(unit.problems) + [unit.problems[-1]] * (size - len(unit.problems))
    try:
        return runner.rows(programs, padded, num_real=len(unit.problems))
    except Exception as error:  # an agent may raise anything; record, don't stop
        if unit.more_configs:  # say where it ran: make may have used a field in Python
            error = (f"{len(unit.configs)} configs vmapped over "
                     f"{', '.join(runner.array_fields)} (the agent's batchable fields, float32 "
                     f"arrays there): {error_text(error)}")
        if len(unit.problems) == 1:
            log.warning("%s failed on %s: %s", unit.agent, unit.problems[0].problem_id, error)
            return failed_rows_of(unit, error)
        log.warning("%s: a batch of %d problems failed (%s); one problem at a time",
                    unit.agent, len(unit.problems), error_text(error))
        return [row for p in unit.problems for row in compute_unit(
            dataclasses.replace(unit, problems=(p,), pad_to=1), programs, build)]
