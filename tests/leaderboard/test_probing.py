"""The probes of a trained agent over problems: the exact posterior's through its belief
samples, a single model's exact zeros through the command, and the command's refusals."""

import csv
import io
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from neural_testbed import base, cli
from neural_testbed.agents import oracle_gp
from neural_testbed.diagnostics import probes
from neural_testbed.generative import gp_regression
from neural_testbed.leaderboard import probing

NOISE = 0.1
PROBLEM = gp_regression.GPRegressionProblem(
    "regression/test", input_dim=2, num_train=10, seed=1, noise_variance=NOISE, num_pool=100,
    num_probes=2)
ORACLE = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(), base.Shapes.of(PROBLEM))
SETTINGS = probing.ProbeSettings(inclusion_ks=(1.0, 2.0), reduction_ks=(1, 5), num_bins=4,
                                 num_samples=4000)


@jax.jit
def _exact(instance, added):
    """The exact posterior's mean and variance of f at the pool, its variance at the
    training inputs, and at the pool after each k of SETTINGS more pairs."""
    data, prior, env = instance
    state = ORACLE.train(None, data, prior)
    mean, cov = oracle_gp.posterior(state, env.pool_x)
    after = []
    for k in SETTINGS.reduction_ks:
        more = base.Data(jnp.concatenate([data.x, added.x[:k]]),
                         jnp.concatenate([data.y, added.y[:k]]))
        state_k = ORACLE.train(None, more, prior)
        after.append(jnp.diag(oracle_gp.posterior(state_k, env.pool_x)[1]))
    return mean, jnp.diag(cov), jnp.diag(oracle_gp.posterior(state, data.x)[1]), after


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_exact_posteriors_probes_through_its_belief_samples():
    instance = PROBLEM.instance()
    agent_key, probe_key = probing.probe_keys(PROBLEM, 0)
    got = jax.device_get(probing.make_prober(ORACLE, SETTINGS)(
        agent_key, probe_key, instance))
    added = probing.added_data(probe_key, instance.env, max(SETTINGS.reduction_ks))
    mean, variance, train_variance, after = jax.device_get(_exact(instance, added))
    data, _, env = jax.device_get(instance)
    m = SETTINGS.num_samples
    # The variance of M exact Gaussian draws is v chi^2_{M-1} / M: relative standard error
    # sqrt(2 / M). 5 of them bound it at all 110 inputs at once (the largest of 110
    # standard normals is below 5 with probability 1 - 6e-5); every bound below follows.
    eps = 5 * math.sqrt(2 / m)
    sampled = got.variance - NOISE
    assert np.all(np.abs(sampled - variance) <= eps * variance)

    def std(v):
        return np.sqrt(v + NOISE)

    def sc(v):  # increasing in v, so the bounds of v bound it
        return float(probes.self_certainty(std(v), NOISE))

    assert sc(train_variance * (1 - eps)) <= got.self_certainty <= sc(train_variance * (1 + eps))

    distance = np.min(np.linalg.norm(env.pool_x[:, None] - data.x[None], axis=-1), axis=1)
    nearest = np.argmin(np.linalg.norm(env.pool_x[:, None] - data.x[None], axis=-1), axis=1)
    np.testing.assert_allclose(got.distance, distance, rtol=1e-5)
    delta, ui = probes.uncertainty_increase(distance, std(variance), std(train_variance)[nearest],
                                            SETTINGS.num_bins)
    np.testing.assert_allclose(got.delta, delta, rtol=1e-5)
    # UI can differ only where s and s at the nearest training input are within the
    # variances' bounds of each other: at most that fraction of a bin's inputs.
    low = std(variance * (1 - eps)) - std(train_variance * (1 + eps))[nearest]
    high = std(variance * (1 + eps)) - std(train_variance * (1 - eps))[nearest]
    undecided = (low <= 0) & (high > 0)
    bins = np.argsort(np.argsort(distance)) * SETTINGS.num_bins // len(distance)
    for b in range(SETTINGS.num_bins):
        assert abs(got.uncertainty_increase[b] - ui[b]) <= np.mean(undecided[bins == b]) + 1e-6

    # |s_sampled - s| <= eps v / (2 s) at each input, before and after: so for both means.
    for i, v_after in enumerate(after):
        exact = probes.uncertainty_reduction(std(variance), std(v_after))
        bound = np.mean(eps * variance / (2 * std(variance)) + eps * v_after / (2 * std(v_after)))
        assert abs(got.uncertainty_reduction[i] - exact[0]) <= bound
        assert abs(got.uncertainty_reduction_signed[i] - exact[1]) <= bound
    assert got.uncertainty_reduction_signed[1] > got.uncertainty_reduction_signed[0] > 0

    # The sampled mean is off by at most e = 5 sqrt(v / M) at each input (as above), so its
    # squared error of f by at most e (2 |f - mean| + e) there: the MSE by their mean.
    off = 5 * np.sqrt(variance / m)
    exact_mse = np.mean((env.pool_f - mean) ** 2)
    assert abs(got.mse - exact_mse) <= np.mean(off * (2 * np.abs(env.pool_f - mean) + off))

    ks = np.array(SETTINGS.inclusion_ks)[:, None]
    # The sampled mean is off by at most 5 sqrt(v / M), s by eps v / (2 s): inclusion can
    # differ only at inputs whose |f - mean| is within those of k s.
    margin = 5 * np.sqrt(variance / m) + ks * eps * variance / (2 * std(variance))
    gap = np.abs(env.pool_f - mean) - ks * std(variance)
    inclusion = np.mean(gap < 0, axis=1)
    assert np.all(np.abs(got.inclusion - inclusion) <= np.mean(np.abs(gap) <= margin, axis=1)
                  + 1e-6)
    # Expected inclusion: a fraction of M draws at each input, against 2 Phi(k s / sqrt(v))
    # - 1 with the sampled s and v; within 4 binomial standard errors (at most 0.5 / sqrt(M))
    # of the mean over inputs, whatever their correlation.
    gaussian = np.mean(2 * norm.cdf(ks * np.sqrt(got.variance / sampled)) - 1, axis=1)
    assert np.all(np.abs(got.inclusion_expected - gaussian) <= 4 * 0.5 / math.sqrt(m))


def _records(text):
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_probe_a_single_model_exactly_through_the_command(tmp_path, capsys):
    # A single network has no spread: s is sigma everywhere, before and after training
    # again, so every probe has an exact value whatever it learnt.
    out = tmp_path / "figures"
    assert cli.main(["probe", "--agent", "mlp", "--set", "num_steps=10", "--problems",
                     "regression/0", "--reduction-k", "1,3", "--inclusion-k", "1", "--bins",
                     "2", "--num-samples", "10", "--format", "csv", "--quiet", "--out",
                     str(out), "--db", str(tmp_path / "r.db")]) == 0
    captured = capsys.readouterr()
    records = _records(captured.out)
    values = {(r["probe"], r["at"]): r for r in records}
    assert len(values) == len(records) == 12
    assert {r["d"] for r in records} == {"1"} and {r["T"] for r in records} == {"1"}
    assert all(r["problems"] == "1" and r["se"] == "nan" for r in records)
    for (probe, at), r in values.items():
        want = {"inclusion_expected": 1.0, "delta": None, "inclusion": None,
                "mse": None}.get(probe, 0.0)
        if want is not None:
            assert float(r["mean"]) == want, (probe, at, r["mean"])
    assert 0 <= float(values["inclusion", "k=1"]["mean"]) <= 1
    assert 0 < float(values["mse", ""]["mean"]) < np.inf
    assert 0 < float(values["delta", "bin=1/2"]["mean"]) < float(values["delta", "bin=2/2"]["mean"])
    for name in ("variance_by_distance", "self_certainty", "mse", "inclusion",
                 "uncertainty_reduction"):
        assert (out / f"{name}.png").stat().st_size > 0
    assert "wrote" in captured.err and "time:" in captured.err


@pytest.mark.parametrize("arguments, message", [
    (["--agent", "oracle_gp", "--sweep", "smoke"],
     "the probes are for regression problems; these are classification problems"),
    (["--agent", "knn"], "agent 'knn' is not built for regression problems"),
    (["--agent", "mlp", "--inclusion-k", "0"],
     "inclusion k (--inclusion-k) must be one or more distinct finite numbers > 0, got (0.0,)"),
    (["--agent", "mlp", "--inclusion-k", "one"], "--inclusion-k 'one': expected float values"),
    (["--agent", "mlp", "--reduction-k", "1,1"],
     "uncertainty-reduction k (--reduction-k) must be one or more distinct integers >= 1"),
    (["--agent", "mlp", "--reduction-k", "2.5"], "--reduction-k '2.5': expected int values"),
    (["--agent", "mlp", "--reduction-k", "1001"],
     "uncertainty-reduction k (--reduction-k) must be at most the pool size (1000), got 1001"),
    (["--agent", "mlp", "--bins", "0"], "number of bins (--bins) must be an integer >= 1, got 0"),
    (["--agent", "mlp", "--bins", "1001"],
     "number of bins (--bins) must be at most the pool size (1000), got 1001"),
    (["--agent", "mlp", "--num-samples", "0"], "number of belief samples (--num-samples)"),
    (["--agent", "mlp", "--problems", "regression/3"],
     "--problems: regression/3 not in the regression-quick sweep"),
    (["--agent", "mlp", "--set", "depth=2"], "--set depth: unknown hyperparameter"),
])
def test_the_command_refuses_what_it_cannot_probe_in_one_line(arguments, message, capsys):
    assert cli.main(["probe", *arguments]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_the_command_refuses_an_output_it_cannot_write_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["probe", "--agent", "mlp", "--out", str(blocker / "figures")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is under the file" in err, err


def _made_up(value):
    """Probes of one problem, every entry ``value`` (two of each parameter)."""
    two = np.full(2, value)
    return probing.ProblemProbes(np.float32(value), np.float32(value), two, two, two, two, two,
                                 two, np.zeros(3), np.zeros(3))


def test_summaries_are_means_and_standard_errors_over_a_strata_problems():
    settings = probing.ProbeSettings(inclusion_ks=(1.0, 2.0), reduction_ks=(1, 5), num_bins=2)
    problems = [gp_regression.GPRegressionProblem(f"regression/{i}", input_dim=1, num_train=t,
                                                  seed=i) for i, t in enumerate((3, 3, 3, 7))]
    results = [(p, _made_up(v)) for p, v in zip(problems, (1.0, 2.0, 6.0, 5.0))]
    records = probing.summarise(results, settings)
    assert len(records) == 2 * (2 + 6 * 2)  # two strata; self-certainty, MSE, 6 probes of 2
    for r in records:
        if r["T"] == 3:  # values 1, 2, 6: mean 3, sample sd sqrt(7), se sqrt(7 / 3)
            assert (r["problems"], r["mean"]) == (3, 3.0)
            assert r["se"] == pytest.approx(math.sqrt(7 / 3))
        else:
            assert r["problems"] == 1 and r["mean"] == 5.0 and math.isnan(r["se"])
    assert [r["at"] for r in records[:6]] == ["", "", "k=1", "k=2", "k=1", "k=2"]
    assert [r["probe"] for r in records[:3]] == ["self_certainty", "mse", "inclusion"]
    text = probing.format_text(records)
    assert "d = 1, noise variance 0.01, T = 3 (3 problems, mean ± se)" in text
    assert "k=1: 3 ± 1.5 (expected 3 ± 1.5)" in text
    assert "  MSE of the mean" + " " * 13 + "3 ± 1.5\n" in text
    assert "delta=5: 5   delta=5: 5" in text  # one problem: no standard error
    per_problem = probing.summarise(results, settings, per_problem=True)
    assert len(per_problem) == 4 * 14
    assert {r["problem_id"] for r in per_problem} == {p.problem_id for p in problems}
    assert "regression/3: d = 1, noise variance 0.01, T = 7" in probing.format_text(per_problem)
