"""The diagnostics the evaluator computes beside the KL (``Evaluation.diagnostics``), on
agents with known answers, and d_KL^tau / tau of one network across taus.

Compilation dominates: two ENNs whose behaviour is set by their state serve every test,
and their jitted evaluators are built once per (ENN, tau, with or without OOD inputs).
"""

import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import base, diagnostics, evaluation, generative
from neural_testbed.likelihood import kl

ENV = generative.sample_environment(jax.random.key(0), temperature=0.1)
K = 2  # the environment's classes
NUM_TEST, NUM_SAMPLES = 200, 50  # N and M of the three-member evaluations
SPLIT_IN = ("aleatoric", "epistemic", "total", "total_entropy", "expected_entropy",
            "mutual_information")  # the order of Diagnostics.split_in


def _test(key, tau, num_test=NUM_TEST):
    return generative.sample_test_data(key, ENV, num_test, tau)


# Three members: member i's logits are scale[i] * (environment logits) + bias[i]. With
# scale 0 the outputs do not depend on the input; with bias 0 they are scaled copies of
# the environment. One compiled evaluator per tau serves both.
THREE = base.ENN(
    apply=lambda state, x, index: (
        state["scale"][index] * generative.environment_logits(state["env"], x)
        + jnp.broadcast_to(state["bias"][index], (x.shape[0], K))),
    sample_index=lambda key: jax.random.randint(key, (), 0, 3),
    num_indices=3,
)
CONSTANT = {"env": ENV, "scale": jnp.zeros(3),
            "bias": jnp.array([[3.0, -3.0], [0.0, 0.0], [-3.0, 3.0]])}
SCALED = {"env": ENV, "scale": jnp.array([0.3, 1.0, 3.0]), "bias": jnp.zeros((3, K))}

# One network: the environment's logits times ``state["scale"]`` (1: the environment itself).
ONE = base.ENN(
    apply=lambda state, x, index: state["scale"] * generative.environment_logits(state["env"], x),
    sample_index=lambda key: jnp.zeros((), jnp.int32),
    num_indices=1,
)


@functools.cache
def _evaluator(enn_name, tau, num_test=NUM_TEST):
    """Jitted; a call with test samples without ``ood_x`` compiles a second program."""
    enn = {"three": THREE, "one": ONE}[enn_name]
    return jax.jit(evaluation.make_evaluator(enn, tau, num_classes=K, num_test=num_test,
                                             num_samples=NUM_SAMPLES))


def _evaluate(enn_name, state, tau, seed=0, num_test=NUM_TEST, ood=True):
    data_key, eval_key = jax.random.split(jax.random.fold_in(jax.random.key(seed), tau))
    test = _test(data_key, tau, num_test)
    assert test.ood_x is not None and test.ood_x.shape == (num_test, 2)
    if not ood:
        test = test._replace(ood_x=None)
    ev = _evaluator(enn_name, tau, num_test)(eval_key, state, test)
    return ev._replace(diagnostics=_SUMMARISE(ev.diagnostics))


_SUMMARISE = jax.jit(diagnostics.summarise)


@pytest.mark.parametrize("tau", [1, 10])
def test_an_agent_blind_to_the_input_cannot_reject_or_diverge(tau):
    """Constant members: each test sample's OOD input gets the same mean prediction and
    split as its tau inputs (the same belief samples), so the in and out confidences have
    equal means and the in / out diagrams are equal in every bin (both are over the
    first input and the OOD input of each of the N test samples, so their in-bin counts
    are equal). Only float32 rounding is left: 1e-6."""
    ev = _evaluate("three", CONSTANT, tau)
    d = ev.diagnostics
    # Not trivially equal: the belief draws vary the confidence between test samples
    # (a bug drawing other members for the OOD inputs would give an ability of ~5e-3).
    assert np.count_nonzero(d.confidence_counts[0]) > 1
    np.testing.assert_array_equal(d.confidence_counts[0], d.confidence_counts[1])
    np.testing.assert_allclose(d.rejection_ability, 0.0, atol=1e-6)
    assert d.aud_ood.shape == (3,)
    np.testing.assert_allclose(d.aud_ood, np.zeros(3), atol=1e-6)  # also: not NaN
    np.testing.assert_allclose(d.split_out, d.split_in[:3], rtol=1e-5)
    assert bool(ev.logits_valid)


def test_the_environment_as_an_agent_has_no_epistemic_uncertainty():
    """One network that is the environment: nothing to disagree about, and KL 0."""
    ev = _evaluate("one", {"env": ENV, "scale": jnp.ones(())}, 1, num_test=1000)
    d = ev.diagnostics
    assert abs(float(ev.kl)) < 1e-5  # float32 rounding only, as in test_kl
    np.testing.assert_allclose(d.split_in[SPLIT_IN.index("epistemic")], 0.0, atol=1e-7)
    np.testing.assert_allclose(d.split_in[SPLIT_IN.index("mutual_information")], 0.0,
                               atol=1e-7)
    np.testing.assert_allclose(d.split_out[1], 0.0, atol=1e-7)  # epistemic out
    np.testing.assert_allclose(d.split_in[SPLIT_IN.index("aleatoric")],
                               d.split_in[SPLIT_IN.index("total")], rtol=1e-5)
    # The labels are noisy, if not much at temperature 0.1 (the mean is about 1.5e-3).
    assert float(d.split_in[SPLIT_IN.index("aleatoric")]) > 1e-4
    assert float(d.distinct_samples) == 1.0
    assert math.isnan(float(d.occupied_cells))  # tau = 1: Monte Carlo


def test_the_split_parts_add_up_through_the_evaluator():
    """Three scaled copies of the environment: aleatoric + epistemic = total and
    E H + MI = H, for the means over inputs as for each input."""
    d = _evaluate("three", SCALED, 1).diagnostics
    parts = dict(zip(SPLIT_IN, np.asarray(d.split_in)))
    assert d.split_in.shape == (6,)
    np.testing.assert_allclose(parts["aleatoric"] + parts["epistemic"], parts["total"],
                               rtol=1e-5)
    np.testing.assert_allclose(parts["expected_entropy"] + parts["mutual_information"],
                               parts["total_entropy"], rtol=1e-5)
    # They disagree (a little: the environment is confident at temperature 0.1).
    assert parts["epistemic"] > 1e-3 and parts["mutual_information"] > 1e-3
    np.testing.assert_allclose(d.split_out[0] + d.split_out[1], d.split_out[2], rtol=1e-5)
    # The reliability diagram's 10 bins (Li & Zhu's) hold every test input.
    assert d.reliability.shape == (3, diagnostics.RELIABILITY_DIAGRAM_BINS)
    assert float(jnp.sum(d.reliability[0])) == NUM_TEST


def test_without_ood_inputs_the_ood_fields_are_nan_and_the_record_is_json():
    with_ood = _evaluate("three", SCALED, 1)
    without = _evaluate("three", SCALED, 1, ood=False)
    d = without.diagnostics
    assert np.all(np.isnan(d.split_out)) and math.isnan(float(d.rejection_ability))
    assert np.all(np.isnan(d.aud_ood))
    np.testing.assert_array_equal(d.confidence_counts[1], np.zeros(diagnostics.NUM_BINS))
    # Everything else is what the same evaluation with OOD inputs gives.
    for name in ("kl", "kl_stderr", "accuracy", "ece"):
        np.testing.assert_allclose(getattr(without, name), getattr(with_ood, name), rtol=1e-5)
    for name in ("split_in", "reliability", "aud_correct", "distinct_samples"):
        np.testing.assert_allclose(getattr(d, name), getattr(with_ood.diagnostics, name),
                                   rtol=1e-5)

    record = diagnostics.as_record(d)
    undefined = ("aleatoric_ood", "epistemic_ood", "total_uncertainty_ood", "rejection_ability",
                 "aud_ood_aleatoric", "aud_ood_epistemic", "aud_ood_total", "occupied_cells")
    for name in diagnostics.METRICS:
        if name in undefined:
            assert record[name] is None, name
        else:
            assert isinstance(record[name], float), name
    json.dumps(record, allow_nan=False)  # raises on NaN or a numpy scalar
    with_record = diagnostics.as_record(with_ood.diagnostics)
    json.dumps(with_record, allow_nan=False)
    assert all(isinstance(with_record[n], float) for n in undefined if n != "occupied_cells")


def test_distinct_samples_and_occupied_cells():
    """3 members, M = 50: a test sample misses a member with probability about
    3 (2/3)^50 = 5e-9, so over N = 200 every one has all 3 (failure chance ~1e-6).
    Algorithm 4's cells (tau = 10, the default "auto") hold only drawn members: at least
    one and at most min(distinct members, M, 2^7) per test sample."""
    tau1 = _evaluate("three", SCALED, 1).diagnostics
    assert 1 < float(tau1.distinct_samples) <= 3
    assert float(tau1.distinct_samples) == 3.0
    assert math.isnan(float(tau1.occupied_cells))  # Monte Carlo has no cells

    tau10 = _evaluate("three", SCALED, 10).diagnostics
    assert kl.choose_estimator(10) == "partition"
    cells = float(tau10.occupied_cells)
    assert 1.0 <= cells <= min(NUM_SAMPLES, 2**7)
    assert cells <= float(tau10.distinct_samples) == 3.0


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_kl_of_one_network_grows_linearly_in_tau():
    """One mistaken network (the environment's logits times 0.3): its joint prediction is
    the product of its marginals, and so is the environment's, so each test tau-sample's
    term is a sum of tau i.i.d. single-input terms and E[d_KL^tau] = tau d_KL^1, for
    Monte Carlo (tau < 10) and partitioning (tau >= 10: one member, one cell) alike.
    Each tau draws its own test data, so the estimates are independent and
    KL_tau / tau - KL_1 has the standard error sqrt((se_tau / tau)^2 + se_1^2); four of
    them bound it (a false failure about once in 10^4 per tau)."""
    state = {"env": ENV, "scale": jnp.array(0.3)}
    evs = {tau: _evaluate("one", state, tau, seed=3, num_test=1000) for tau in (1, 2, 5, 10, 20)}
    kl_1, se_1 = float(evs[1].kl), float(evs[1].kl_stderr)
    assert kl_1 > 10 * se_1 > 0  # mistaken: a KL far from 0
    for tau, ev in evs.items():
        assert int(ev.num_clipped) == 0 and bool(ev.logits_valid)
        assert float(ev.diagnostics.distinct_samples) == 1.0
        combined = math.hypot(float(ev.kl_stderr) / tau, se_1)
        assert abs(float(ev.kl) / tau - kl_1) <= 4 * combined, (tau, float(ev.kl), kl_1,
                                                                combined)
    # One network falls in one cell.
    np.testing.assert_allclose(evs[10].diagnostics.occupied_cells, 1.0)
    np.testing.assert_allclose(evs[20].diagnostics.occupied_cells, 1.0)
