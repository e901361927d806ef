"""The evaluators: an agent's belief samples on a problem's test samples, reduced to one
:class:`Evaluation` (d_KL^tau or the NLL, accuracy, ECE and the diagnostics).

They compose the likelihood estimators (:mod:`neural_testbed.likelihood`) with the
diagnostics (:mod:`neural_testbed.diagnostics`) over one forward pass of the belief
samples, so that neither of those layers imports the other.
"""

from collections.abc import Callable

from neural_testbed import base
from neural_testbed.evaluation import classification, regression
from neural_testbed.evaluation.classification import (
    Evaluation,
    evaluate_log_probs,
    evaluate_sampler,
    make_evaluator,
)
from neural_testbed.evaluation.regression import make_regression_evaluator
from neural_testbed.likelihood import kl

__all__ = [
    "Evaluation",
    "classification",
    "evaluate_log_probs",
    "evaluate_sampler",
    "evaluator_for",
    "make_evaluator",
    "make_regression_evaluator",
    "regression",
]


def evaluator_for(problem: base.Problem, enn: base.ENN, tau: int, estimator: str) -> Callable:
    """``(key, state, test) -> Evaluation`` of ``enn`` at ``tau`` on problems of
    ``problem``'s shape and target, with the likelihood estimator ``estimator``."""
    if problem.target == "regression":
        return make_regression_evaluator(enn, tau, problem.num_test, problem.num_samples,
                                         estimator)
    method = kl.choose_estimator(tau, estimator, problem.max_monte_carlo_tau)  # its protocol's
    return make_evaluator(enn, tau, problem.num_classes, problem.num_test, problem.num_samples,
                          method, num_hyperplanes=problem.num_hyperplanes)
