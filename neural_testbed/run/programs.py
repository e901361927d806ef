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
import logging
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
from neural_testbed.likelihood import kl
from neural_testbed.run import rows as rows_lib
from neural_testbed.run.plan import WorkUnit, accepts_padding

__all__ = ["MATMUL_PRECISION", "Programs", "UnitRunner", "build_program", "compile_traced",
           "compute_unit", "equations", "padded_problems", "trace_program", "unit_runner",
           "use_full_float32_products"]

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


def equations(jaxpr) -> Iterator[Any]:
    """Every equation of a jaxpr and of the jaxprs inside it (loop bodies, branches)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(inner, jax.extend.core.ClosedJaxpr):
                    inner = inner.jaxpr
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from equations(inner)


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
        self._traced: dict[Hashable, jax.stages.Traced] = {}  # ahead of run(), by trace()
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
                    for kept in (self._compiled, self._traced):
                        for name in [k for k in kept if k[0] == id(dropped)]:
                            del kept[name]
            self._runners.move_to_end(key)
            return self._runners[key]

    def trace(self, key: Hashable, program: Callable, args) -> jax.stages.Traced:
        """``program`` traced at ``args`` (arrays, or ``jax.ShapeDtypeStruct`` of the
        arrays it will get), kept for :meth:`run` of ``key`` to compile."""
        with self._lock:  # the memory check traces ahead, before any unit runs
            if key not in self._traced:
                self._traced[key] = trace_program(program, args)
            return self._traced[key]

    def run(self, key: Hashable, program: Callable, args) -> tuple[Any, float, float]:
        """Runs ``program`` on ``args``, compiled once per ``key`` (from its trace if
        :meth:`trace` made one); returns (result, compile seconds, run seconds)."""
        with self._lock:
            entry = self._compiled.get(key)
            mine = entry is None
            if mine:
                entry = self._compiled[key] = concurrent.futures.Future()
                traced = self._traced.pop(key, None)
        compile_seconds = 0.0
        if mine:
            start = time.perf_counter()
            try:
                traced = traced or trace_program(program, args)
                entry.set_result((compile_traced(traced), any(
                    e.primitive.name in FACTORISATIONS for e in equations(traced.jaxpr.jaxpr))))
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


def trace_program(program: Callable, args) -> jax.stages.Traced:
    """``jax.jit(program)`` traced at ``args``, with the run's matrix-product precision."""
    with jax.default_matmul_precision(MATMUL_PRECISION):  # fixed when traced
        return jax.jit(program).trace(*args)


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
        self.evaluations = kl.evaluations(template.taus, estimator,  # (tau, estimator)
                                          template.max_monte_carlo_tau)
        # The evaluation whose rows keep a regression agent's predictive at the probes.
        self._keeps_predictive = next(e for e in self.evaluations if e[0] == min(template.taus))
        self.values: tuple[np.ndarray, ...] = ()  # the traced floats, [configs, fields]
        self.array_fields: tuple[str, ...] = ()  # the fields vmapped over, for a batch
        self.on_host = isinstance(agent, base.HostAgent)  # no training program
        self._exclusive = threading.Lock() if self.on_host else contextlib.nullcontext()
        if self.on_host:
            if len(self.configs) > 1:
                raise TypeError("a host agent trains outside JAX: one config at a time")
            # Its states live here between training and evaluation: one batch at a time.
            self._host_states = host.HostStates()
            self._enn = host.host_enn(agent, self._host_states, template.num_classes)
        elif len(self.configs) > 1:
            self.array_fields = config_batches.array_fields(self.configs, batchable)
            self.values = (config_batches.values_of(self.configs, self.array_fields),)
            self._make, self._shapes = make, base.Shapes.of(template)
        self._agent, self._pads = agent, accepts_padding(agent)

    def _over_configs(self, f: Callable, values: tuple, *per_config):
        """``f(agent, *per_config)`` of the one config, or vmapped over a batch's
        configs (each its own agent, made from its traced values)."""
        if not values:
            return f(self._agent, *per_config)
        return jax.vmap(lambda v, *a: f(self._make(config_batches.with_arrays(
            self.configs[0], self.array_fields, v), self._shapes), *a))(values[0], *per_config)

    def train(self, agent_keys, instances, num_train, *values):
        """The trained states of a batch of problems ([configs,] problems, ...)."""
        def problems(agent):
            def one(key, data, prior, num_train):
                if self._pads:  # T may be fewer than the (padded) rows: mark its own
                    data = data._replace(mask=jax.numpy.arange(data.x.shape[0]) < num_train)
                return agent.train(jax.random.fold_in(key, self.agent_seed), data, prior)
            return jax.vmap(one)(agent_keys, instances.data, instances.prior, num_train)
        return self._over_configs(problems, values)

    def evaluate(self, test_keys, states, envs, *values, tau, tau_estimator):
        """Evaluations at ``tau`` of a batch's states, one problem after another (memory
        of one problem): [problems, [configs,] ...]."""
        def one(args):
            test_key, state, env = args
            data_key, eval_key = jax.random.split(jax.random.fold_in(test_key, tau))
            test = self.template.sample_test(data_key, env, tau)
            # Every config sees the problem's test samples and belief-sample keys.
            return self._over_configs(lambda agent, state: evaluation.evaluator_for(
                self.template, self._enn if self.on_host else agent.enn, tau, tau_estimator)(
                eval_key, state, test), values, state)
        if values:  # states are [configs, problems, ...]: map over problems
            states = jax.tree.map(lambda s: jax.numpy.swapaxes(s, 0, 1), states)
        return jax.lax.map(one, (test_keys, states, envs))

    def key(self, program: str, size: int, *evaluation) -> tuple:
        """A program's key in :class:`Programs` (a batch build is shared by runners)."""
        if program == "build":
            return ("build", self.template.shape, size)
        return (id(self), program, *evaluation, size)

    def evaluation(self, tau: int, estimator: str) -> Callable:
        """The evaluation program at ``tau`` (:meth:`evaluate`)."""
        return lambda *a: self.evaluate(*a, tau=tau, tau_estimator=estimator)

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
            self.key("build", size), build_program(self.template),
            (key_seeds, args))
        if self.on_host:
            start = time.perf_counter()
            states = host.train_on_host(self._agent, self._host_states, agent_keys,
                                        instances, batch[:num_real], self.agent_seed)
            train_compile, train_s = 0.0, time.perf_counter() - start
        else:
            states, train_compile, train_s = programs.run(
                self.key("train", size), self.train,
                (agent_keys, instances, num_train, *self.values))
        compile_s += train_compile
        reports = self._reports(states)
        evaluations = {}
        try:
            for tau, estimator in self.evaluations:
                ev, eval_compile, eval_s = programs.run(
                    self.key("evaluate", size, tau, estimator), self.evaluation(tau, estimator),
                    (test_keys, states, instances.env, *self.values))
                compile_s += eval_compile
                evaluations[tau, estimator] = jax.device_get(ev), eval_s
        except Exception:
            failure = self.on_host and self._host_states.take_failure()
            if failure:  # the agent's error in one line, not XLA's wrapping of it
                raise failure from None
            raise
        finally:
            if self.on_host:
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
            keys = {"agent_name": self.agent_name, "config_hash": self.config_hashes[c],
                    "config_json": self.config_jsons[c], "agent_seed": self.agent_seed}
            rows += [rows_lib.evaluated_row(
                ev, i, p, tau, estimator, keep_predictive=(tau, estimator) == self._keeps_predictive,
                seconds=((build_s + train_s) / shares, compile_s / shares, eval_seconds),
                report={k: v[c][i] if self.values else v[i] for k, v in reports.items()}, **keys)
                     for i, p in enumerate(batch[:num_real])
                     for (tau, estimator), (ev, eval_seconds) in of_config.items()]
        return rows

    def _reports(self, states) -> dict[str, np.ndarray]:
        """The agent's report of each trained state (:attr:`base.Agent.report`): name ->
        [[configs,] problems]; empty for an agent with none."""
        report = None if self.on_host else self._agent.report
        if report is None:
            return {}
        over_problems = jax.vmap(report)
        values = (jax.vmap(over_problems) if self.values else over_problems)(states)
        return {name: np.asarray(value, np.float64) for name, value in
                jax.device_get(dict(values)).items()}


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


def padded_problems(unit: WorkUnit) -> list[base.Problem]:
    """The unit's problems, the last repeated up to ``unit.pad_to``."""
    return [*unit.problems, *[unit.problems[-1]] * (unit.pad_to - len(unit.problems))]


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
        return rows_lib.failed_rows_of(unit, error)
    padded = padded_problems(unit)
    try:
        return runner.rows(programs, padded, num_real=len(unit.problems))
    except Exception as error:  # an agent may raise anything; record, don't stop
        if unit.more_configs:  # say where it ran: make may have used a field in Python
            error = (f"{len(unit.configs)} configs vmapped over "
                     f"{', '.join(runner.array_fields)} (the agent's batchable fields, float32 "
                     f"arrays there): {rows_lib.error_text(error)}")
        if len(unit.problems) == 1:
            log.warning("%s failed on %s: %s", unit.agent, unit.problems[0].problem_id, error)
            return rows_lib.failed_rows_of(unit, error)
        log.warning("%s: a batch of %d problems failed (%s); one problem at a time",
                    unit.agent, len(unit.problems), rows_lib.error_text(error))
        return [row for p in unit.problems for row in compute_unit(
            dataclasses.replace(unit, problems=(p,), pad_to=1), programs, build)]
