"""The evaluators: an agent's belief samples on a problem's test samples, reduced to one
:class:`Evaluation` (d_KL^tau or the NLL, accuracy, ECE and the diagnostics).

They compose the likelihood estimators (:mod:`neural_testbed.likelihood`) with the
diagnostics (:mod:`neural_testbed.diagnostics`) over one forward pass of the belief
samples, so that neither of those layers imports the other.
"""

from neural_testbed.evaluation import classification, regression
from neural_testbed.evaluation.classification import (
    Evaluation,
    evaluate_sampler,
    make_evaluator,
)
from neural_testbed.evaluation.regression import make_regression_evaluator

__all__ = [
    "Evaluation",
    "classification",
    "evaluate_sampler",
    "make_evaluator",
    "make_regression_evaluator",
    "regression",
]
