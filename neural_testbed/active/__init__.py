"""Active learning as a downstream test of an agent's predictive correlations:
transductive active learning with BatchMIG, MIG, TIG and random selection
(Wang et al.)."""

from neural_testbed.active import selection, tal
from neural_testbed.active.selection import METHODS
from neural_testbed.active.tal import TALResult, TALSettings, run_tal, summarise

__all__ = ["METHODS", "TALResult", "TALSettings", "run_tal", "selection", "summarise", "tal"]
