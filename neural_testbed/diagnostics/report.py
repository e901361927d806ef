"""Everything computed beside the KL of one evaluation, and how a row stores it.

The evaluator hands over (as :class:`Inputs`) the reliability bins of every
test input, and for the first input of each test tau-sample the mean prediction and the uncertainty
split of the same belief samples it scored, and the same for one
out-of-distribution input per test tau-sample (see each problem family's
``sample_test``): N inputs of each kind at every tau, so that the diagnostics
cost the same at tau = 100 as at tau = 1. :func:`summarise` reduces them to sums and
means that fit in a row; :func:`as_record` turns one problem's share into the
JSON-ready dict the results store keeps in its ``diagnostics`` column.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed.diagnostics import correlations, divergence, rejection, uncertainty

__all__ = ["CONDITIONS", "Diagnostics", "Inputs", "METRICS", "NUM_BINS", "ROW_METRICS",
           "UNCERTAINTIES",
           "as_record", "summarise", "summarise_batch"]

NUM_BINS = 15  # confidence histograms and UPDS (as the ECE); the reliability diagram has 10
UNCERTAINTIES = ("aleatoric", "epistemic", "total")  # traces, see diagnostics.uncertainty
CONDITIONS = ("in", "out", "correct", "wrong")  # the UPDS curves
# Scalars a row's diagnostics hold, by the names `leaderboard --metrics` takes.
METRICS = (
    "aleatoric", "epistemic", "total_uncertainty", "total_entropy", "expected_entropy",
    "mutual_information", "aleatoric_ood", "epistemic_ood", "total_uncertainty_ood",
    "rejection_ability", "aud_ood_aleatoric", "aud_ood_epistemic", "aud_ood_total",
    "aud_correct_aleatoric", "aud_correct_epistemic", "aud_correct_total",
    "distinct_samples", "occupied_cells",
)
# Every scalar a row's diagnostics may hold: classification's and regression's.
ROW_METRICS = METRICS + correlations.REGRESSION_METRICS


class Diagnostics(NamedTuple):
    """Sums and means of one evaluation (arrays; a leading problem axis when vmapped)."""

    reliability: jax.Array  # [3, 10]: count, number correct, summed confidence per bin
    # The rest is over the first input of each test tau-sample (N inputs at every tau,
    # the same distribution as all N x tau) and its out-of-distribution input.
    split_in: jax.Array  # [6]: means over test inputs of the uncertainty.Split fields
    split_out: jax.Array  # [3]: means over out-of-distribution inputs of aleatoric, epistemic, total
    rejection_ability: jax.Array  # equation 5, signed (diagnostics.rejection)
    confidence_counts: jax.Array  # [2, B]: rescaled-confidence histograms, in and out
    upds_counts: jax.Array  # [4, B] per condition (CONDITIONS)
    upds_sums: jax.Array  # [4, 3, B] per condition and uncertainty (UNCERTAINTIES)
    aud_ood: jax.Array  # [3] in vs out, per uncertainty
    aud_correct: jax.Array  # [3] right vs wrong predictions (in distribution)
    distinct_samples: jax.Array  # mean over test tau-samples of distinct belief samples
    occupied_cells: jax.Array  # Algorithm 4: mean occupied cells; NaN for Monte Carlo


def _traces(split: uncertainty.Split) -> jax.Array:
    return jnp.stack([split.aleatoric, split.epistemic, split.total], axis=-1)


class Inputs(NamedTuple):
    """What the evaluator hands over (``Evaluation.diagnostics``): per-input arrays of one
    evaluation, reduced by :func:`summarise` in a program of its own, so that every
    agent and tau shares one compilation of the reduction."""

    reliability: jax.Array  # [3, 10] calibration.reliability_diagram of every test input
    probs_in: jax.Array  # [n, K] mean prediction at the first input of each test sample
    split_in: uncertainty.Split  # [n] each
    labels: jax.Array  # [n]
    probs_out: jax.Array | None  # [n, K] at the out-of-distribution inputs, or None
    split_out: uncertainty.Split | None
    distinct_samples: jax.Array  # mean over test samples of distinct belief samples
    occupied_cells: jax.Array  # Algorithm 4's mean occupied cells; NaN for Monte Carlo


def summarise(inputs: Inputs) -> Diagnostics:
    """Reduces one evaluation's :class:`Inputs` to the sums and means a row stores."""
    (reliability, probs_in, split_in, labels, probs_out, split_out, distinct_samples,
     occupied_cells) = inputs
    confidence_in = rejection.rescaled_confidence(probs_in)
    correct = jnp.argmax(probs_in, axis=-1) == labels
    traces_in = _traces(split_in)
    every = jnp.ones_like(correct)
    counts_in, sums_in = divergence.binned_sums(confidence_in, traces_in, every, NUM_BINS)
    counts_right, sums_right = divergence.binned_sums(confidence_in, traces_in, correct, NUM_BINS)
    counts_wrong, sums_wrong = divergence.binned_sums(confidence_in, traces_in, ~correct, NUM_BINS)
    nan3 = jnp.full((3,), jnp.nan)
    if probs_out is None:
        counts_out, sums_out = jnp.zeros(NUM_BINS), jnp.zeros((3, NUM_BINS))
        means_out, ability, aud_ood = nan3, jnp.array(jnp.nan), nan3
    else:
        confidence_out = rejection.rescaled_confidence(probs_out)
        traces_out = _traces(split_out)
        counts_out, sums_out = divergence.binned_sums(
            confidence_out, traces_out, jnp.ones(confidence_out.shape, bool), NUM_BINS)
        means_out = jnp.mean(traces_out.reshape(-1, 3), axis=0)
        ability = rejection.rejection_ability(confidence_in, confidence_out)
        aud_ood = divergence.average_uncertainty_divergence(counts_in, sums_in, counts_out,
                                                            sums_out)
    return Diagnostics(
        reliability=reliability,
        split_in=jnp.stack([jnp.mean(v) for v in split_in]),
        split_out=means_out,
        rejection_ability=ability,
        confidence_counts=jnp.stack([counts_in, counts_out]),
        upds_counts=jnp.stack([counts_in, counts_out, counts_right, counts_wrong]),
        upds_sums=jnp.stack([sums_in, sums_out, sums_right, sums_wrong]),
        aud_ood=aud_ood,
        aud_correct=divergence.average_uncertainty_divergence(counts_right, sums_right,
                                                              counts_wrong, sums_wrong),
        distinct_samples=jnp.asarray(distinct_samples, jnp.float32),
        occupied_cells=jnp.asarray(occupied_cells, jnp.float32),
    )


def _number(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value  # JSON has no NaN


def _numbers(values) -> list:
    return [_number(v) if np.ndim(v) == 0 else _numbers(v) for v in np.asarray(values)]


def as_record(diagnostics: Diagnostics, i: int | None = None) -> dict[str, Any]:
    """Problem ``i``'s diagnostics (or the only one's) as a JSON-ready dict: the
    :data:`METRICS` scalars (None where undefined) and the binned curves."""
    d = jax.tree.map(lambda a: np.asarray(a) if i is None else np.asarray(a)[i], diagnostics)
    split_in = dict(zip(("aleatoric", "epistemic", "total_uncertainty", "total_entropy",
                         "expected_entropy", "mutual_information"), d.split_in))
    scalars = {
        **split_in,
        "aleatoric_ood": d.split_out[0], "epistemic_ood": d.split_out[1],
        "total_uncertainty_ood": d.split_out[2],
        "rejection_ability": d.rejection_ability,
        **{f"aud_ood_{u}": v for u, v in zip(UNCERTAINTIES, d.aud_ood)},
        **{f"aud_correct_{u}": v for u, v in zip(UNCERTAINTIES, d.aud_correct)},
        "distinct_samples": d.distinct_samples, "occupied_cells": d.occupied_cells,
    }
    assert tuple(scalars) == METRICS
    return {
        **{name: _number(v) for name, v in scalars.items()},
        "bins": NUM_BINS,
        "reliability_bins": int(d.reliability.shape[-1]),
        "reliability": dict(zip(("count", "correct", "confidence"), _numbers(d.reliability))),
        "confidence_counts": dict(zip(("in", "out"), _numbers(d.confidence_counts))),
        "upds_counts": dict(zip(CONDITIONS, _numbers(d.upds_counts))),
        "upds_sums": {c: dict(zip(UNCERTAINTIES, s)) for c, s in zip(
            CONDITIONS, _numbers(d.upds_sums))},
    }


@jax.jit
def summarise_batch(inputs: Inputs) -> Diagnostics:
    """:func:`summarise` of evaluations stacked on a leading problem axis; compiled once
    per (problems, n, K) shape and reused by every agent and tau."""
    return jax.vmap(summarise)(inputs)
