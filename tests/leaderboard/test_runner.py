"""The run's programs: batching does not change numbers, failures are isolated."""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import agents, base, evaluation, leaderboard
from neural_testbed.leaderboard import scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import programs as runner

PAPER = leaderboard.get_sweep("paper")


def _small(pids, taus=(1, 100), num_test=200, num_samples=100):
    return [dataclasses.replace(PAPER[p], taus=taus, num_test=num_test, num_samples=num_samples)
            for p in pids]


FAST_MLP = functools.partial(agents.make_mlp_agent, agents.MLPConfig(num_steps=100))
SHAPES = base.Shapes.of(PAPER["classification_2d/90"])  # every problem here: d = 2, K = 2


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_rows_have_every_field_for_every_problem_and_tau():
    problems = _small(["classification_2d/20", "classification_2d/21"])
    seen = []
    rows = leaderboard.run_agent(FAST_MLP, problems, "mlp", progress=False, on_rows=seen.extend)
    assert seen == rows
    assert [(r.problem_id, r.tau) for r in rows] == [
        ("classification_2d/20", 1), ("classification_2d/20", 100),
        ("classification_2d/21", 1), ("classification_2d/21", 100)]
    for r in rows:
        assert r.status == "ok" and r.agent == "mlp" and r.metric == "kl"
        assert np.isfinite([r.kl, r.kl_stderr, r.accuracy, r.ece]).all()
        assert r.train_seconds > 0 and r.eval_seconds > 0 and r.compile_seconds >= 0
        assert r.num_clipped == 0 and (r.num_test, r.num_samples) == (200, 100)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_compilation_is_timed_apart_and_paid_once_per_shape(monkeypatch):
    """Two batches of one shape: the first pays for compilation, the second reuses it, and
    no compile second is counted as training or evaluation. The run's clock is a fake one
    that only compiling advances (1000 s a program), so the split is exact, not a race."""
    clock = type("Clock", (), {"now": 0.0, "perf_counter": lambda self: self.now})()
    compile_traced = runner.compile_traced

    def compiling(traced):
        clock.now += 1000.0
        return compile_traced(traced)

    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setattr(runner, "compile_traced", compiling)
    problems = _small(["classification_2d/90", "classification_2d/91",
                       "classification_2d/160", "classification_2d/161"])
    rows = leaderboard.run_agent(functools.partial(agents.make_mlp_agent,
                                                   agents.MLPConfig(num_steps=20)),
                                 problems, "mlp", progress=False, problems_per_batch=2,
                                 units_at_once=1)
    first, second = rows[:4], rows[4:]
    # build, train and 2 evaluations, split over the batch's 2 problems
    assert all(r.compile_seconds == 4 * 1000.0 / 2 for r in first)
    assert all(r.compile_seconds == 0 for r in second)
    assert all(r.train_seconds == 0 and r.eval_seconds == 0 for r in rows)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_batch_sizes_programs_compile_once_per_run(monkeypatch):
    """Building, training and each tau's evaluation compile for the first batch of a size;
    the next batch of that size compiles nothing."""
    compiled, compile_traced = [], runner.compile_traced

    def recording(traced):
        compiled.append(traced)
        return compile_traced(traced)

    monkeypatch.setattr(runner, "compile_traced", recording)
    problems = _small(["classification_2d/92", "classification_2d/93", "classification_2d/94",
                       "classification_2d/95"], num_test=30, num_samples=20)
    rows = leaderboard.run_agent(FAST_MLP, problems, "mlp", progress=False, problems_per_batch=2)
    assert len(rows) == 8 and all(r.status == "ok" for r in rows)
    assert len(compiled) == 4  # build, train and 2 evaluations, for the first batch only
    assert all(r.compile_seconds > 0 for r in rows[:4])
    assert all(r.compile_seconds == 0 for r in rows[4:])


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_batched_training_gives_the_numbers_of_one_problem_at_a_time():
    problems = _small(["classification_2d/90", "classification_2d/91", "classification_2d/92"])
    together = leaderboard.run_agent(FAST_MLP, problems, "mlp", progress=False)
    alone = leaderboard.run_agent(FAST_MLP, problems, "mlp", progress=False, problems_per_batch=2)
    for a, b in zip(together, alone):
        assert (a.problem_id, a.tau) == (b.problem_id, b.tau)
        np.testing.assert_allclose(a.kl, b.kl, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_runner_matches_evaluating_the_trained_sampler_directly():
    """The runner's KL for a problem equals the Python API's evaluate_sampler with the same keys."""
    problem = _small(["classification_2d/95"], taus=(1,))[0]
    [row] = leaderboard.run_agent(FAST_MLP, [problem], "mlp", progress=False)
    keys = base.problem_keys(problem.key_seed)
    data, prior, env = problem.instance()
    agent = FAST_MLP(SHAPES)
    state = agent.train(jax.random.fold_in(keys.agent, 0), data, prior)
    data_key, eval_key = jax.random.split(jax.random.fold_in(keys.test, 1))
    test = problem.sample_test(data_key, env, 1)
    ev = evaluation.evaluate_sampler(eval_key, base.as_sampler(agent.enn, state), test, 2,
                                     num_samples=problem.num_samples)
    np.testing.assert_allclose(row.kl, float(ev.kl), rtol=1e-4, atol=1e-6)


def _flaky_agent():
    """Raises while tracing problems with T = 3; NaN logits at temperature 0.5."""

    def train(key, data, prior):
        if base.num_pairs(data) == 3:  # a Python int: the agent is never padded
            raise RuntimeError("cannot train on three points")
        return prior.temperature

    def apply(temperature, x, index):
        logits = jnp.zeros((x.shape[0], 2))
        return jnp.where(temperature > 0.3, jnp.nan, logits)

    return base.Agent(train, base.ENN(apply, lambda key: jnp.zeros((), jnp.int32), 1))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_failing_problem_is_recorded_and_the_others_run():
    problems = _small(["classification_2d/10", "classification_2d/20", "classification_2d/160",
                       "classification_2d/21"])  # T=3; T=10; T=10 at temperature 0.5; T=10
    rows = leaderboard.run_agent(lambda shapes: _flaky_agent(), problems, "flaky", progress=False)
    by_id = {}
    for r in rows:
        by_id.setdefault(r.problem_id, []).append(r)
    assert len(rows) == 8
    assert all(r.status == "failed" and "cannot train on three points" in r.error
               for r in by_id["classification_2d/10"])
    assert all(r.status == "failed" and "NaN or +inf logits" in r.error
               for r in by_id["classification_2d/160"])
    assert all(r.status == "ok" for pid in ("classification_2d/20", "classification_2d/21")
               for r in by_id[pid])


def test_true_environment_agent_scores_zero_through_the_runner(environment_agent):
    """An agent that knows its problem's environment has KL 0 at every tau of a tau curve
    (including the extra Monte Carlo row at tau 10), epistemic uncertainty 0 and one
    distinct belief sample."""
    taus = (1, 2, 10)
    for problem in _small(["classification_2d/95", "classification_2d/165"], taus=taus):
        agent = environment_agent(problem)
        rows = leaderboard.run_agent(lambda shapes: agent, [problem], "oracle", progress=False)
        assert sorted((r.tau, r.estimator) for r in rows) == sorted(
            [(t, "auto") for t in taus] + [(10, "monte_carlo")])
        assert all(abs(r.kl) < 1e-5 for r in rows), [r.kl for r in rows]
        for r in rows:
            record = json.loads(r.diagnostics)
            # 0 up to float32 rounding of sum_m w_m |p_m|^2 - |p_bar|^2 with one member
            assert abs(record["epistemic"]) < 1e-6 and abs(record["mutual_information"]) < 1e-6
            assert record["distinct_samples"] == 1


def test_problems_of_one_shape_compile_once():
    """Tracing counts: training is traced once for 4 problems in 2 batches; each tau's
    evaluation traces apply once (plus once for its shape check)."""
    traces = {"train": 0, "apply": 0}
    inner = agents.make_mlp_agent(agents.MLPConfig(num_steps=10), SHAPES)

    def train(key, data, prior):
        traces["train"] += 1
        return inner.train(key, data, prior)

    def apply(state, x, index):
        traces["apply"] += 1
        return inner.enn.apply(state, x, index)

    agent = base.Agent(train, inner.enn._replace(apply=apply))
    problems = _small(["classification_2d/90", "classification_2d/91",
                       "classification_2d/160", "classification_2d/161"])
    leaderboard.run_agent(lambda shapes: agent, problems, "mlp", progress=False,
                          problems_per_batch=2)
    assert traces["train"] == 1
    assert traces["apply"] == 2 * 2  # 2 taus x (shape check + trace)


def test_programs_that_factorise_run_one_at_a_time():
    """Two units' batched Cholesky factorisations at once hung JAX's CPU runtime (each
    waiting on the shared thread pool for the other's parts): a program that factorises
    runs holding the run's factorisation lock, and other programs do not take it."""
    held, programs = [], runner.Programs()

    def note():
        held.append(programs.factorising.locked())

    def factorising(a):
        jax.debug.callback(note)
        return jnp.linalg.cholesky(a)

    def plain(a):
        jax.debug.callback(note)
        return a @ a

    matrices = jnp.eye(3)[None].repeat(4, 0)
    for name, program in (("factorising", factorising), ("plain", plain)):
        for _ in range(2):  # compiled, then from the cache
            result, _, _ = programs.run((name, 4), program, (matrices,))
            np.testing.assert_allclose(result, matrices, atol=1e-6)
    assert held == [True, True, False, False]
    assert not programs.factorising.locked()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_every_matrix_product_is_traced_in_full_float32(monkeypatch):
    """A GPU multiplies float32 matrices in TensorFloat-32 unless told otherwise: problems'
    draws then depend on the device. Every product the runner traces (building, training,
    evaluating) asks for full float32 (a CPU computes that anyway, so this is checked in
    the programs' text)."""
    jaxprs = []
    compile_traced = runner.compile_traced

    def recording(traced):
        jaxprs.append(str(traced.jaxpr))
        return compile_traced(traced)

    monkeypatch.setattr(runner, "compile_traced", recording)
    summarise, in_effect = runner.diagnostics.summarise_batch, []

    def summarise_noting(inputs):  # jitted apart from the runner's programs
        in_effect.append(jax.config.jax_default_matmul_precision)
        return summarise(inputs)

    monkeypatch.setattr(runner.diagnostics, "summarise_batch", summarise_noting)
    # The command sets it for its whole process: a command run earlier in this process
    # must not make this pass without the runner's own setting.
    previous = jax.config.jax_default_matmul_precision
    jax.config.update("jax_default_matmul_precision", None)
    try:
        leaderboard.run_agent(FAST_MLP, _small(["classification_2d/90"], num_test=20,
                                               num_samples=10), "mlp", progress=False)
    finally:
        jax.config.update("jax_default_matmul_precision", previous)
    products = sum(text.count("dot_general[") for text in jaxprs)
    assert len(jaxprs) >= 3 and products > 0  # build, train, evaluate
    assert sum(text.count("precision=(Precision.HIGHEST, Precision.HIGHEST)")
               for text in jaxprs) == products
    assert in_effect and set(in_effect) == {runner.MATMUL_PRECISION}


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_a_sweep_compiles_once_per_config_group_and_shape(monkeypatch, tmp_path):
    """The trace count of a sweep: 4 mlp configs in 2 groups (adaptive decay on and off,
    each group's two learning rates traced together) on smoke's 4 problems. mlp trains on
    sets padded to the padding group's largest T, so T = 10 and 100 share one shape: its
    build compiles once and each group's training and 2 evaluations once, 1 + 2 x 3
    programs, whether a unit holds one problem or a whole shape's."""
    compiled, compile_traced = [], runner.compile_traced

    def recording(traced):
        compiled.append(traced)
        return compile_traced(traced)

    monkeypatch.setattr(runner, "compile_traced", recording)
    short = agents.MLPConfig(num_steps=20)
    configs = [dataclasses.replace(short, learning_rate=lr, adaptive_weight_scale=adaptive)
               for adaptive in (True, False) for lr in (1e-3, 1e-2)]
    problems = [dataclasses.replace(p, num_test=20, num_samples=10)
                for p in leaderboard.get_sweep("smoke").values()]
    assert len({p.shape for p in problems}) == 2 and len(problems) == 4
    for problems_per_batch, programs in ((None, 1 + 2 * 3), (1, 1 + 2 * 3)):
        compiled.clear()
        with leaderboard.ResultsStore(tmp_path / f"{problems_per_batch}.db") as store:
            summary = leaderboard.run_sweep("mlp", configs, problems, store, progress=False,
                                            configs_per_batch=2,
                                            problems_per_batch=problems_per_batch)
        assert summary.computed == len(configs) * len(problems) * 2 and summary.failed == 0
        assert len(compiled) == programs, problems_per_batch


def test_the_progress_bar_says_when_it_is_compiling(capsys):
    """The bar says "compiling" while the first unit of its programs runs, and not once
    the units are done."""
    problems = _small(["classification_2d/20", "classification_2d/21"], taus=(1,))
    leaderboard.run_agent(FAST_MLP, problems, "mlp", progress=True, units_at_once=1,
                          problems_per_batch=1)
    states = [s for s in capsys.readouterr().err.split("\r") if "mlp" in s]
    assert any("0/2" in s and "compiling" in s for s in states), states
    assert not any("1/2" in s and "compiling" in s for s in states), states  # same programs
    assert "2/2" in states[-1] and "compiling" not in states[-1], states


def test_an_agents_report_is_kept_in_each_row_and_an_unconverged_problem_is_flagged():
    """base.Agent.report: a toy report of the trained state (converged on the first
    problem, not on the second, told apart by T) lands in every row's diagnostics as
    agent_<name>, and the leaderboard flags the one problem."""
    problems = _small(["classification_2d/20", "classification_2d/40"], taus=(1,))

    def reporting(shapes):
        agent = FAST_MLP(shapes)
        return agent._replace(report=lambda state: {
            "converged": (jnp.abs(state[0]["w"]).sum() < 0).astype(jnp.float32),  # never
            "rhat": jnp.float32(1.5)})

    rows = leaderboard.run_agent(reporting, problems[:1], "mlp", progress=False)
    rows += leaderboard.run_agent(FAST_MLP, problems[1:], "mlp", progress=False)
    reports = [{k: v for k, v in json.loads(r.diagnostics).items() if k.startswith("agent_")}
               for r in rows]
    assert reports == [{"agent_converged": 0.0, "agent_rhat": 1.5}, {}]
    stored = [store_lib.StoredRow(**r.as_dict(), version="0", timestamp="t") for r in rows]
    records, _ = scoring.score_agents(stored, {p.problem_id: p for p in problems})
    assert records[0]["flag"] == "UNCONVERGED on 1 problem"
