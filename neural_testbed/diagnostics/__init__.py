"""What is computed beside the KL from the same belief samples: calibration (the
reliability diagram), the aleatoric / epistemic split, rejection of
out-of-distribution inputs, and uncertainty-probability diagrams with their
average uncertainty divergence (Li & Zhu)."""

from neural_testbed.diagnostics.calibration import (
    accuracy,
    expected_calibration_error,
    reliability_bins,
)
from neural_testbed.diagnostics.divergence import (
    average_uncertainty_divergence,
    binned_sums,
    diagram,
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

__all__ = [
    "CONDITIONS",
    "METRICS",
    "NUM_BINS",
    "UNCERTAINTIES",
    "Diagnostics",
    "Inputs",
    "Split",
    "accuracy",
    "as_record",
    "average_uncertainty_divergence",
    "binned_sums",
    "covariances",
    "diagram",
    "ecdf_area",
    "expected_calibration_error",
    "rejection_ability",
    "reliability_bins",
    "rescaled_confidence",
    "split",
    "summarise",
    "summarise_batch",
]
