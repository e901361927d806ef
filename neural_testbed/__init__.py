"""neural-testbed: evaluate the joint predictions of learning agents.

A JAX reimplementation of the Neural Testbed (Osband et al., "Evaluating
predictive distributions: does Bayesian deep learning work?").
"""

from neural_testbed import agents, base, evaluation, generative, leaderboard, likelihood
from neural_testbed.base import (
    ENN,
    Agent,
    Data,
    EpistemicSampler,
    PriorKnowledge,
    ProblemResult,
    as_sampler,
    sampler_as_enn,
)

__version__ = "0.1.0"

__all__ = [
    "ENN",
    "Agent",
    "Data",
    "EpistemicSampler",
    "PriorKnowledge",
    "ProblemResult",
    "agents",
    "as_sampler",
    "base",
    "evaluation",
    "generative",
    "leaderboard",
    "likelihood",
    "sampler_as_enn",
]
