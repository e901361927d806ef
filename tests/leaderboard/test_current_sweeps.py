"""The reference's current sweeps (google-deepmind/neural_testbed at f2090d1,
``leaderboard/sweep.py``): the same problem definitions, in its order, under ids of their
own; and the known answer on each, an agent that is the environment scoring d_KL 0."""

import dataclasses
import functools
import itertools

import pytest

from neural_testbed import agents, leaderboard

# f2090d1's grids, transcribed: (its loops, outermost first), its N, M and taus.
REFERENCE = {
    "classification": dict(
        loops=itertools.product((2, 10, 100), (1, 10, 100, 1000), (0.01, 0.1, 0.5), range(5)),
        taus=(1, 10), kappa=2, num_test=1000, num_samples=1000),
    "classification-2d-current": dict(
        loops=itertools.product((1, 3, 10, 30, 100, 300, 1000), (0.01, 0.1, 0.5), range(10)),
        taus=(1, 10), kappa=None, num_test=1000, num_samples=1000),
    "regression-current": dict(
        loops=itertools.product((1, 10, 100), (1, 10, 100), (0.01, 0.1, 1), range(10)),
        taus=(1,), num_test=1001, num_samples=100),
}


def _definition(sweep, problem):
    if sweep == "classification":
        return (problem.input_dim, problem.num_train / problem.input_dim, problem.temperature,
                problem.seed)
    if sweep == "classification-2d-current":
        return problem.num_train, problem.temperature, problem.seed
    return (problem.input_dim, problem.num_train / problem.input_dim,
            round(problem.noise_variance ** 0.5, 6), problem.seed)


@pytest.mark.parametrize("sweep", sorted(REFERENCE))
def test_a_current_sweep_is_the_references_grid_in_its_order(sweep):
    reference = REFERENCE[sweep]
    problems = leaderboard.get_sweep(sweep)
    prefix = next(iter(problems)).split("/")[0]
    expected = list(reference["loops"])
    assert list(problems) == [f"{prefix}/{i}" for i in range(len(expected))]
    assert [_definition(sweep, p) for p in problems.values()] == [
        tuple(e) for e in expected]
    for p in problems.values():
        assert p.taus == reference["taus"]
        assert (p.num_test, p.num_samples) == (reference["num_test"], reference["num_samples"])
        assert getattr(p, "kappa", None) == reference.get("kappa")
        assert p.max_monte_carlo_tau == 10 or p.target == "regression"


def test_the_current_2d_grid_is_the_papers_draws_at_the_references_taus():
    """Same (T, temperature, seed): the same environment and training data, so its tau = 1
    rows pair with the paper's; ids of its own, since the paper's classification_2d/i
    number another order."""
    paper = {(p.num_train, p.temperature, p.seed): p
             for p in leaderboard.get_sweep("paper").values()}
    for p in leaderboard.get_sweep("classification-2d-current").values():
        twin = paper[(p.num_train, p.temperature, p.seed)]
        assert p.key_seed == twin.key_seed and p.problem_id != twin.problem_id
    assert set(leaderboard.get_sweep("classification-2d-current")).isdisjoint(
        leaderboard.get_sweep("paper"))


def test_real_dyadic_trains_on_reals_rows_and_tests_from_two_anchors():
    real, dyadic = leaderboard.get_sweep("real"), leaderboard.get_sweep("real-dyadic")
    assert len(real) == len(dyadic)
    for (rid, r), (did, d) in zip(real.items(), dyadic.items()):
        name, i = rid.split("/")
        assert did == f"{name}_dyadic/{i}"
        assert d.key_seed == r.key_seed and (d.kappa, d.taus) == (2, (1, 10))


@pytest.mark.parametrize("sweep, pid", [
    ("classification-2d-current", "classification_2d_current/65"),
    ("regression-current", "regression_current/125"),
    ("real-dyadic", None),
])
@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_environment_scores_zero_on_a_current_sweep(environment_agent, sweep, pid):
    """d_KL is 0 (to float32 rounding) at every tau for an agent that is the environment:
    exact at any N and M for a one-member agent, so N = M = 100 keep the test short.
    Real data has no environment: there the sweep is checked to run end to end."""
    if pid is None:
        problem = dataclasses.replace(leaderboard.get_sweep(sweep)["iris_dyadic/12"],
                                      num_test=100, num_samples=100)
        build = functools.partial(agents.make_mlp_agent, agents.MLPConfig(num_steps=20))
        rows = leaderboard.run_agent(build, [problem], "mlp", progress=False)
        assert sorted(r.tau for r in rows) == [1, 10]
        assert all(r.status == "ok" and r.metric == "nll" and r.nll > 0 for r in rows)
        return
    problem = dataclasses.replace(leaderboard.get_sweep(sweep)[pid], num_test=100,
                                  num_samples=100)
    agent = environment_agent(problem)
    rows = leaderboard.run_agent(lambda shapes: agent, [problem], "oracle", progress=False)
    assert sorted(r.tau for r in rows) == sorted(problem.taus)
    assert all(r.status == "ok" and abs(r.kl) < 1e-5 for r in rows), [
        (r.tau, r.kl, r.error) for r in rows]


def test_settings_of_the_classification_sweep_are_its_d_t_and_temperature_cells():
    """T = ratio x d repeats a T across d (T = 100: d = 10 at ratio 10, d = 100 at ratio 1):
    the strata that standard errors and per-setting tuning use keep them apart."""
    sweep = leaderboard.get_sweep("classification")
    strata = {}
    for p in sweep.values():
        strata.setdefault(p.stratum, set()).add((p.input_dim, p.num_train, p.temperature))
    assert len(strata) == 3 * 4 * 3 and all(len(cells) == 1 for cells in strata.values())
    assert leaderboard.get_sweep("paper")["classification_2d/17"].stratum == (0.01, 3)
