"""Joint log-likelihood estimators and the KL (or NLL) estimate over any problem's test
samples; ``regression`` for regression problems. The package needs nothing of the
testbed but :mod:`neural_testbed.base`: the evaluators that apply it to an agent's belief
samples, with the diagnostics, are :mod:`neural_testbed.evaluation`."""

from neural_testbed.likelihood import regression
from neural_testbed.likelihood.estimators import (
    monte_carlo_log_likelihood,
    partition_cells,
    partition_log_likelihood,
    partition_log_likelihood_and_cells,
)
from neural_testbed.likelihood.kl import (
    ESTIMATORS,
    Estimator,
    choose_estimator,
    clip_infinite_terms,
    evaluations,
    kl_estimate,
)

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "choose_estimator",
    "clip_infinite_terms",
    "evaluations",
    "kl_estimate",
    "monte_carlo_log_likelihood",
    "partition_cells",
    "partition_log_likelihood",
    "partition_log_likelihood_and_cells",
    "regression",
]
