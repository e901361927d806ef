"""Generative environments: problems with exact test log-likelihoods."""

from neural_testbed.generative.mlp_classification import (
    Environment,
    TestSamples,
    check_temperature,
    environment_logits,
    sample_environment,
    sample_test_data,
    sample_train_data,
)

__all__ = [
    "Environment",
    "TestSamples",
    "check_temperature",
    "environment_logits",
    "sample_environment",
    "sample_test_data",
    "sample_train_data",
]
