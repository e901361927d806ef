"""What is computed beside the KL from the same belief samples: calibration (the
reliability diagram), the aleatoric / epistemic split, rejection of
out-of-distribution inputs, and uncertainty-probability diagrams with their
average uncertainty divergence (Li & Zhu); on regression problems, posterior
predictive correlations and the cross-normalized log-likelihood (Wang et al.),
and probes of predictive uncertainty (Grover et al.)."""

from neural_testbed.diagnostics.calibration import (
    RELIABILITY_DIAGRAM_BINS,
    accuracy,
    expected_calibration_error,
    reliability_bins,
    reliability_diagram,
)
from neural_testbed.diagnostics.correlations import (
    REGRESSION_METRICS,
    RegressionDiagnostics,
    as_regression_record,
    metacorrelation,
    regression_diagnostics,
    sample_correlation,
)
from neural_testbed.diagnostics.divergence import (
    average_uncertainty_divergence,
    binned_sums,
    diagram,
)
from neural_testbed.diagnostics.probes import (
    belief_inclusion,
    inclusion,
    mean_squared_error,
    self_certainty,
    uncertainty_increase,
    uncertainty_reduction,
)
from neural_testbed.diagnostics.rejection import ecdf_area, rejection_ability, rescaled_confidence
from neural_testbed.diagnostics.report import (
    CONDITIONS,
    METRICS,
    NUM_BINS,
    UNCERTAINTIES,
    Diagnostics,
    Inputs,
    as_record,
    summarise,
    summarise_batch,
)
from neural_testbed.diagnostics.uncertainty import Split, covariances, split
from neural_testbed.diagnostics.xll import (
    Predictive,
    cross_normalized_log_likelihood,
    xll_and_xllr,
)

__all__ = [
    "CONDITIONS",
    "METRICS",
    "NUM_BINS",
    "REGRESSION_METRICS",
    "RELIABILITY_DIAGRAM_BINS",
    "RegressionDiagnostics",
    "UNCERTAINTIES",
    "Diagnostics",
    "Inputs",
    "Predictive",
    "Split",
    "accuracy",
    "as_record",
    "as_regression_record",
    "average_uncertainty_divergence",
    "belief_inclusion",
    "binned_sums",
    "covariances",
    "cross_normalized_log_likelihood",
    "diagram",
    "metacorrelation",
    "regression_diagnostics",
    "ecdf_area",
    "expected_calibration_error",
    "inclusion",
    "mean_squared_error",
    "rejection_ability",
    "reliability_bins",
    "reliability_diagram",
    "rescaled_confidence",
    "sample_correlation",
    "self_certainty",
    "split",
    "summarise",
    "summarise_batch",
    "uncertainty_increase",
    "uncertainty_reduction",
    "xll_and_xllr",
]
