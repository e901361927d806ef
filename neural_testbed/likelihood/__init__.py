"""Joint log-likelihood estimators, the KL estimate, accuracy and ECE."""

from neural_testbed.likelihood.calibration import accuracy, expected_calibration_error
from neural_testbed.likelihood.estimators import (
    monte_carlo_log_likelihood,
    partition_cells,
    partition_log_likelihood,
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
    "accuracy",
    "choose_estimator",
    "evaluate_sampler",
    "expected_calibration_error",
    "make_evaluator",
    "monte_carlo_log_likelihood",
    "partition_cells",
    "partition_log_likelihood",
]
