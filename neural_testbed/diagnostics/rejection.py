"""Rejection ability: does the agent's confidence fall on inputs unlike its training data?

Li & Zhu (section 3.1, equation 5): the area under the empirical CDF of the
confidence on out-of-distribution inputs minus the same area on
in-distribution inputs. The confidence (top class probability of the mean
prediction) is first min-max rescaled from ``[1/K, 1]`` to ``[0, 1]`` (their
section 4), so that K does not set its floor. The area under an empirical CDF
on [0, 1] is ``1 - mean``, so the ability is ``mean(in) - mean(out)``: in
[-1, 1], larger is better, 0 for an agent whose confidence does not depend on
the input, below 0 for one more confident away from its data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["ecdf_area", "rejection_ability", "rescaled_confidence"]


def rescaled_confidence(probs: jax.Array) -> jax.Array:
    """The top class probability of ``probs [..., K]``, mapped from [1/K, 1] to [0, 1]."""
    num_classes = probs.shape[-1]
    floor = 1.0 / num_classes
    return jnp.clip((jnp.max(probs, axis=-1) - floor) / (1.0 - floor), 0.0, 1.0)


def ecdf_area(confidence: jax.Array) -> jax.Array:
    """Area under the empirical CDF of values in [0, 1]: ``1 - mean``."""
    return 1.0 - jnp.mean(confidence)


def rejection_ability(confidence_in: jax.Array, confidence_out: jax.Array) -> jax.Array:
    """Equation 5, signed: ECDF area out of distribution minus in distribution."""
    return ecdf_area(confidence_out) - ecdf_area(confidence_in)
