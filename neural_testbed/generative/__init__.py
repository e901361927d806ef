"""Problem families behind the problem protocol: random-MLP classification."""

from neural_testbed.generative.mlp_classification import (
    Environment,
    MLPClassificationProblem,
    check_temperature,
    environment_logits,
    sample_environment,
    sample_test_data,
    sample_train_data,
)

__all__ = [
    "Environment",
    "MLPClassificationProblem",
    "check_temperature",
    "environment_logits",
    "sample_environment",
    "sample_test_data",
    "sample_train_data",
]
