"""neural-testbed: evaluate the joint predictions of learning agents.

A JAX reimplementation of the Neural Testbed (Osband et al., "Evaluating
predictive distributions: does Bayesian deep learning work?").
"""

import importlib.metadata
import pathlib

from neural_testbed import agents, base, evaluation, generative, leaderboard, likelihood
from neural_testbed.base import (
    ENN,
    Agent,
    Data,
    EpistemicSampler,
    PriorKnowledge,
    ProblemResult,
    Shapes,
    as_sampler,
    num_pairs,
    sampler_as_enn,
)


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, the one source); for a
    source tree run without installing it (``PYTHONPATH``), its pyproject.toml's; else
    ``"0+unknown"``. Stored rows carry it, and published baselines are matched on it."""
    try:
        return importlib.metadata.version("neural-testbed")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import tomllib  # Python 3.11+

        with open(pathlib.Path(__file__).parent.parent / "pyproject.toml", "rb") as file:
            project = tomllib.load(file).get("project", {})
    except (ImportError, OSError, ValueError):
        return "0+unknown"
    if project.get("name") != "neural-testbed":
        return "0+unknown"
    return project.get("version", "0+unknown")


__version__ = _version()

__all__ = [
    "ENN",
    "Agent",
    "Data",
    "EpistemicSampler",
    "PriorKnowledge",
    "ProblemResult",
    "Shapes",
    "agents",
    "as_sampler",
    "base",
    "evaluation",
    "generative",
    "leaderboard",
    "likelihood",
    "num_pairs",
    "sampler_as_enn",
]
