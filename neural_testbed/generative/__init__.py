"""Problem families behind the problem protocol: random-MLP classification, real datasets
(classification and regression), Gaussian-process regression."""

from neural_testbed.generative.gp_regression import GPEnvironment, GPRegressionProblem
from neural_testbed.generative.mlp_classification import (
    Environment,
    MLPClassificationProblem,
    check_temperature,
    environment_logits,
    sample_environment,
    sample_test_data,
    sample_train_data,
)
from neural_testbed.generative.real_classification import (
    RealClassificationProblem,
    dataset_problems,
    file_problems,
)
from neural_testbed.generative.real_regression import RealRegressionProblem

__all__ = [
    "Environment",
    "GPEnvironment",
    "GPRegressionProblem",
    "MLPClassificationProblem",
    "RealClassificationProblem",
    "RealRegressionProblem",
    "check_temperature",
    "dataset_problems",
    "environment_logits",
    "file_problems",
    "sample_environment",
    "sample_test_data",
    "sample_train_data",
]
