"""Joint log-likelihood estimators and the KL (or NLL) estimate; ``regression`` for
regression problems."""

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
    Evaluation,
    choose_estimator,
    evaluate_sampler,
    make_evaluator,
)

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "Evaluation",
    "choose_estimator",
    "evaluate_sampler",
    "make_evaluator",
    "monte_carlo_log_likelihood",
    "partition_cells",
    "partition_log_likelihood",
    "partition_log_likelihood_and_cells",
    "regression",
]
