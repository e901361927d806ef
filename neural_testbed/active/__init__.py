"""Active learning as a downstream test of an agent's beliefs: transductive active learning
for regression with BatchMIG, MIG, TIG and random selection (Wang et al.), and active
learning for classification with enn's priorities (:mod:`.classification`)."""

from neural_testbed.active import classification, selection, tal
from neural_testbed.active.selection import METHODS
from neural_testbed.active.tal import TALResult, TALSettings, run_tal, summarise

__all__ = ["METHODS", "TALResult", "TALSettings", "classification", "run_tal", "selection",
           "summarise", "tal"]
