"""k-nearest neighbours: the class frequencies among the k training points closest to x.

A non-parametric baseline of the paper (appendix B.8): one model, no
epistemic uncertainty, so its joint prediction is the product of its
marginals. Probabilities are truncated to [0.01, 0.99] so that no label gets
probability 0; the logits are their logarithms, so the softmax renormalises
them when K > 2.

Two cases the paper leaves open, handled as follows (the reference instead
adds one training point of every class at the origin, which biases the
prediction where test inputs are densest):

- T smaller than k: the k-neighbourhood is the whole training set (k = T).
- a class absent from the training data: its frequency is 0, then 0.01
  after truncation; nothing is added to the data.

Reference: Cover & Hart, "Nearest neighbor pattern classification", 1967.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import base
from neural_testbed.agents import validation

__all__ = ["KnnConfig", "KnnState", "knn_sweep", "make_knn_agent", "truncated_logits"]

Weighting = Literal["uniform", "distance"]
# The distance computation's block of test inputs: at most 4096 of them, fewer where T x d
# is large, so that its [block, T, d] differences stay within 2^25 floats (128 MB),
# whatever number of inputs the evaluator passes (T = 100,000 pairs of d = 100 inputs
# would otherwise need 164 GB).
_MAX_BLOCK = 4096
_BLOCK_FLOATS = 2**25


def _block_size(rows: int, input_dim: int) -> int:
    return max(1, min(_MAX_BLOCK, _BLOCK_FLOATS // max(1, rows * input_dim)))


@dataclasses.dataclass(frozen=True)
class KnnConfig:
    """Hyperparameters of the knn agent (the reference's default)."""

    num_neighbors: int = 3  # k; the whole training set when T < k
    weighting: Weighting = "uniform"  # "uniform" votes or "distance" (1 / distance) votes

    def __post_init__(self):
        if isinstance(self.num_neighbors, int) and self.num_neighbors < 1:
            raise ValueError(f"num_neighbors must be >= 1, got {self.num_neighbors!r}")
        validation.check_fields(self)


class KnnState(NamedTuple):
    """The training set, kept whole."""

    x: jax.Array  # [rows, d] training inputs
    labels: jax.Array  # [rows, K] one-hot training labels
    pairs: jax.Array  # [rows] bool: the row is a training pair (False: padding)


def truncated_logits(probs: jax.Array, low: float = 0.01, high: float = 0.99) -> jax.Array:
    """``log(clip(probs, low, high))``: the paper's truncation, as logits (softmax renormalises)."""
    return jnp.log(jnp.clip(probs, low, high))


def make_knn_agent(config: KnnConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the knn agent: training keeps the data; ``apply`` votes among neighbours.

    Example:
      >>> agent = make_knn_agent(KnnConfig(num_neighbors=10, weighting="distance"),
      ...                        base.Shapes(2, 2))
      >>> state = agent.train(jax.random.key(0), data, prior)
      >>> logits = agent.enn.apply(state, x, agent.enn.sample_index(key))
    """

    def train(key: jax.Array, data: base.Data, prior: base.PriorKnowledge) -> KnnState:
        del key, prior  # nothing random, nothing to fit
        pairs = jnp.ones(data.x.shape[0], bool) if data.mask is None else data.mask
        return KnnState(x=data.x, labels=jax.nn.one_hot(data.y, shapes.num_outputs), pairs=pairs)

    def class_probs(state: KnnState, x: jax.Array) -> jax.Array:
        """``x [n, d]`` -> ``[n, K]``: the (weighted) class frequencies among the neighbours."""
        # Static: the rows are a shape. With padding, a padding row is infinitely far and
        # casts no vote, so when T < k the extra neighbours count for nothing.
        k = min(config.num_neighbors, state.x.shape[0])
        sq_dist = jnp.sum((x[:, None, :] - state.x[None, :, :]) ** 2, axis=-1)  # [n, rows]
        sq_dist = jnp.where(state.pairs, sq_dist, jnp.inf)
        neg_sq, nearest = jax.lax.top_k(-sq_dist, k)  # [n, k]
        if config.weighting == "uniform":
            votes = jnp.ones_like(neg_sq)
        else:  # as scikit-learn: points at distance 0, if any, take all the weight
            dist = jnp.sqrt(jnp.maximum(-neg_sq, 0.0))
            exact = dist == 0
            votes = jnp.where(exact.any(axis=-1, keepdims=True), exact, 1.0 / dist)
        votes = jnp.where(state.pairs[nearest], votes, 0.0)
        counts = jnp.einsum("nk,nkc->nc", votes, state.labels[nearest])
        return counts / counts.sum(axis=-1, keepdims=True)

    def apply(state: KnnState, x: jax.Array, index: jax.Array) -> jax.Array:
        del index  # a single model
        n = x.shape[0]
        block = _block_size(state.x.shape[0], x.shape[-1])
        if n <= block:
            return truncated_logits(class_probs(state, x))
        pad = -n % block
        blocks = jnp.pad(x, ((0, pad), (0, 0))).reshape(-1, block, x.shape[-1])
        logits = jax.lax.map(lambda block: truncated_logits(class_probs(state, block)), blocks)
        return logits.reshape(-1, logits.shape[-1])[:n]

    def sample_index(key: jax.Array) -> jax.Array:
        del key
        return jnp.zeros((), jnp.int32)

    return base.Agent(train=train, enn=base.ENN(apply, sample_index, num_indices=1),
                      accepts_padding=True)


def knn_sweep() -> tuple[KnnConfig, ...]:
    """The paper's sweep: k in {1, 5, 10, 30, 50, 100} x uniform or distance weights (12)."""
    return tuple(KnnConfig(k, w) for k, w in itertools.product(
        (1, 5, 10, 30, 50, 100), ("uniform", "distance")))
