"""Random forest: scikit-learn's forest, trained on the host through the HostAgent bridge.

A non-parametric baseline of the paper (appendix B.8): one model (the
forest's averaged tree votes), so its joint prediction is the product of its
marginals. Probabilities are truncated to [0.01, 0.99] as for knn. A class
absent from the training data gets probability 0 from the forest, then 0.01
after truncation; unlike the reference, nothing is added to the data.
It needs scikit-learn: ``pip install 'neural-testbed[forest]'``.

Reference: Breiman, "Random forests", Machine Learning 45, 2001.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Literal

import numpy as np

from neural_testbed import base
from neural_testbed.agents import validation

__all__ = ["RandomForestConfig", "make_random_forest_agent", "random_forest_sweep"]

Criterion = Literal["gini", "entropy"]


@dataclasses.dataclass(frozen=True)
class RandomForestConfig:
    """Hyperparameters of the random_forest agent (the reference's default)."""

    num_trees: int = 100  # trees in the forest
    criterion: Criterion = "gini"  # split quality: Gini impurity or information gain

    def __post_init__(self):
        if isinstance(self.num_trees, int) and self.num_trees < 1:
            raise ValueError(f"num_trees must be >= 1, got {self.num_trees!r}")
        validation.check_fields(self)


def _forest_class():
    try:
        from sklearn.ensemble import RandomForestClassifier
    except ImportError:
        raise ImportError("the random_forest agent needs scikit-learn: "
                          "pip install 'neural-testbed[forest]'") from None
    return RandomForestClassifier


def make_random_forest_agent(config: RandomForestConfig, shapes: base.Shapes) -> base.HostAgent:
    """Builds the random_forest agent (a :class:`base.HostAgent`).

    Example:
      >>> agent = make_random_forest_agent(RandomForestConfig(num_trees=10), base.Shapes(2, 2))
      >>> forest = agent.train(0, data, prior)     # NumPy data
      >>> logits = agent.sample(forest, x[None], np.zeros(1))   # [1, n, K]
    """
    forest_class = _forest_class()

    num_classes = shapes.num_outputs

    def train(seed: int, data: base.Data, prior: base.PriorKnowledge):
        del prior  # a forest needs no prior knowledge
        forest = forest_class(n_estimators=config.num_trees, criterion=config.criterion,
                              random_state=seed)
        forest.fit(np.asarray(data.x), np.asarray(data.y))
        return forest

    def sample(forest, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        del indices  # a single model
        networks, n, d = x.shape
        seen = forest.predict_proba(x.reshape(networks * n, d))  # [rows, classes seen]
        probs = np.zeros((networks * n, num_classes))
        probs[:, forest.classes_.astype(int)] = seen
        return np.log(np.clip(probs, 0.01, 0.99)).reshape(networks, n, num_classes)

    return base.HostAgent(train=train, sample=sample, num_indices=1)


def random_forest_sweep() -> tuple[RandomForestConfig, ...]:
    """The paper's sweep: 10, 100 or 1000 trees x Gini or entropy (6 configs)."""
    return tuple(RandomForestConfig(n, c)
                 for n, c in itertools.product((10, 100, 1000), ("gini", "entropy")))
