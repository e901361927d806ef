"""The joint NLL on real data with dyadic sampling: enn's polyadic NLL
(``enn/metrics/joint.py::make_nll_polyadic_calculator``, which uncertainty-baselines
reports with tau = 10, kappa = 2), computed on our test draws."""

import dataclasses

import jax
import numpy as np
import pytest

from neural_testbed import leaderboard
from neural_testbed.generative import real_classification
from neural_testbed.leaderboard import arrays


def _enn_polyadic_nll(logits, labels, selected):
    """A float64 NumPy transcription of enn's formula, given its inputs: ``logits``
    ``[M, N * kappa, K]`` (enn's batch of N * kappa anchor points, each sample m one
    network at all of them), ``labels [N * kappa]`` and ``selected [N, tau]``, which of
    its kappa anchors each of a batch's tau inputs repeats (enn draws it from a key per
    batch, shared by the M samples). Per batch: the joint log-likelihood of the tau
    repeated labels under each sample, averaged over the samples in probability
    space (log-mean-exp); the NLL is minus its mean over the N batches."""
    num_samples, n_kappa, _ = logits.shape
    kappa = n_kappa // len(selected)
    logits = np.asarray(logits, np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    assigned = log_probs[:, np.arange(n_kappa), labels]  # [M, N * kappa]
    nlls = []
    for n, chosen in enumerate(selected):
        anchors = assigned[:, n * kappa:(n + 1) * kappa]  # [M, kappa]
        joint = anchors[:, chosen].sum(-1)  # [M]
        top = joint.max()
        nlls.append(-(np.log(np.mean(np.exp(joint - top))) + top))
    return float(np.mean(nlls))


def test_anchor_rows_give_at_most_kappa_distinct_rows_and_iid_rows_are_unchanged():
    key = jax.random.key(3)
    rows = np.asarray(real_classification.test_rows(key, 500, 10, 30, 2))
    assert rows.shape == (500, 10)
    assert max(len(set(r)) for r in rows) == 2 and (rows >= 0).all() and (rows < 30).all()
    # kappa None is the draw the real sweep's rows were computed with
    np.testing.assert_array_equal(real_classification.test_rows(key, 500, 10, 30, None),
                                  jax.random.randint(key, (500, 10), 0, 30))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.parametrize("pid", ["iris_dyadic/12", "digits_dyadic/3"])
def test_the_joint_nll_is_enns_polyadic_nll_on_the_same_draws(pid):
    """Random logits for M belief samples at each tau-sample's anchor rows, scored by the
    array path (the run path's evaluator, tested equal to it in test_arrays.py), equal
    the float64 transcription of enn's formula to float32 rounding (relative 1e-5: a
    sum of 10 float32 log-probabilities and a log-mean-exp over M = 50)."""
    problem = dataclasses.replace(leaderboard.get_sweep("real-dyadic")[pid], num_test=300,
                                  num_samples=50)
    given = arrays.problem_arrays(problem)
    rng = np.random.default_rng(0)
    predictions, expected = {}, {}
    for tau, test_inputs in given.tests.items():
        n, width, _ = test_inputs.x.shape
        logits = rng.normal(0.0, 2.0, (n, problem.num_samples, width, problem.num_classes))
        predictions[tau] = logits.astype(np.float32)
        test, _ = arrays._test(problem, tau, problem.instance().env)
        y = np.asarray(test.y)
        # The distinct rows of each tau-sample, padded to the most any has by repeating the
        # first: kappa at tau 10; one at tau 1 (enn's one input drawn from kappa anchors
        # is that anchor alone).
        kappa = width - 1
        assert kappa == (problem.kappa if tau > 1 else 1)
        labels = np.empty((n, kappa), np.int64)
        for i in range(n):
            labels[i] = y[i, 0]  # a padding slot repeats the first row, so its label
            for t, slot in enumerate(test_inputs.index[i]):
                labels[i, slot] = y[i, t]
        enn_logits = predictions[tau][:, :, :kappa].transpose(1, 0, 2, 3).reshape(
            problem.num_samples, n * kappa, problem.num_classes)
        expected[tau] = _enn_polyadic_nll(enn_logits, labels.reshape(-1),
                                          test_inputs.index)
    rows = arrays.score_predictions(problem, predictions, "random", kind="logits")
    assert sorted(r.tau for r in rows) == [1, 10]
    for r in rows:
        assert r.metric == "nll" and r.estimator == "auto"
        np.testing.assert_allclose(r.nll, expected[r.tau], rtol=1e-5)
    assert rows[1].nll > rows[0].nll  # ten labels are harder to predict jointly than one
