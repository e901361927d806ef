"""A conditional neural process meta-trained on functions drawn from the problem's prior.

A CNP (Garnelo et al., 2018) maps a context set of (x, y) pairs and a target
input x* to a Gaussian prediction at x*: an encoder MLP embeds each pair, the
embeddings are averaged into one representation r (so the prediction does not
depend on the order of the context), and a decoder MLP maps (x*, r) to a mean
and a variance. Here it is meta-trained, inside ``train``, on functions drawn
from the Gaussian process the agent is told about (``prior.kernel`` plus the
environment's ridge), at inputs ``x ~ N(0, I_d)``, with the known noise
variance: each step draws ``batch_size`` functions at ``C + num_targets``
inputs, ``C = 2 T`` clipped to ``[largest_context_at_least,
largest_context_at_most]`` (20 to 200), takes the first ``c ~ U{1..C}`` pairs
as the context and every pair as a target (as Garnelo et al. do), and takes
an Adam step on the Gaussian negative log-likelihood of the targets. The
context sizes reach 2 T so that T is mid-range and the same CNP can be
conditioned on up to T more points. The cap bounds the cost (a factorisation
and two MLP passes over C + num_targets inputs per function) where T is large;
above it (T > 200 by default) the CNP is conditioned on more pairs than it was
trained on, which is untested. The tasks, the context sizes, the likelihood and the
loop are :mod:`~neural_testbed.agents.meta_learning`'s, shared with the np and anp
agents (:mod:`~neural_testbed.agents.neural_process`), so that the three meta-train
alike.

Meta-training depends on the key, the prior and T only, never on the training
pairs themselves: those are the context the trained state holds. Training again
under the same key and prior with other pairs of the same T is exactly
conditioning the same CNP on them (with more pairs too, while ``2 T`` stays at
most ``largest_context_at_least``). Its context sizes depend on T, so it is
never padded (``accepts_padding`` is off: the runner gives it its T pairs).

What the variance means: the decoder's variance is that of ``f(x*)``, not of
``y``; the likelihood it is trained with adds the known noise variance, as
every regression agent's does. So a belief sample is a draw of f without a
``max(var_y - noise, floor)`` correction. A CNP has no joint predictive: its
belief samples are independent normal draws at each input of a call (the
index is a key), so its posterior predictive correlations, and its
metacorrelation, are about 0.

Reference: Garnelo et al., "Conditional neural processes", ICML 2018.
"""

from __future__ import annotations

import dataclasses
import itertools

import flax.struct
import jax
import jax.numpy as jnp

from neural_testbed import base, networks
from neural_testbed.agents import meta_learning, validation
from neural_testbed.agents.meta_learning import max_context

__all__ = ["CNPConfig", "CNPParams", "CNPState", "cnp_sweep", "init_cnp", "make_cnp_agent",
           "max_context", "predict"]


@dataclasses.dataclass(frozen=True)
class CNPConfig:
    """Hyperparameters of the cnp agent: its networks and its meta-training."""

    encoder: tuple[int, ...] = (64, 64, 64)  # encoder widths, ReLU; the last is r's size
    decoder: tuple[int, ...] = (64, 64)  # decoder hidden widths, ReLU; outputs mean, variance
    # Adam steps of meta-training. 10000, not fewer: after 4000 the CNP's self-certainty
    # (Grover et al.) is flat from 3 to 10 context pairs on the 1-d prior; after 10000 it
    # falls from 1 to 3 to 10 (tests/agents/test_cnp.py).
    num_steps: int = 10000
    learning_rate: float = 1e-3  # Adam step size
    batch_size: int = 16  # functions drawn from the prior per step
    largest_context_at_least: int = 20  # the largest context is 2 T, at least this
    largest_context_at_most: int = 200  # ... and at most this
    num_targets: int = 20  # inputs per function beyond the largest context

    def __post_init__(self):
        meta_learning.check_meta_training(self)
        meta_learning.check_widths(self, "encoder", "decoder")
        validation.check_fields(self)


class CNPParams(flax.struct.PyTreeNode):
    """The two networks."""

    encoder: networks.MLPParams  # (x, y) [d + 1] -> embedding [encoder[-1]]
    decoder: networks.MLPParams  # (x*, r) [d + encoder[-1]] -> (mean, raw variance) [2]


@flax.struct.dataclass
class CNPState:
    """The meta-trained networks and the context they are conditioned on."""

    params: CNPParams
    context: base.Data  # x [T, d], y [T]: the training pairs


def init_cnp(key: jax.Array, input_dim: int, config: CNPConfig) -> CNPParams:
    """The untrained networks (fan-in scaled, as :func:`networks.init_mlp` draws them)."""
    encoder_key, decoder_key = jax.random.split(key)
    return CNPParams(
        encoder=networks.init_mlp(encoder_key, input_dim + 1, config.encoder),
        decoder=networks.init_mlp(decoder_key, input_dim + config.encoder[-1],
                                  (*config.decoder, 2)))


def _predict(params: CNPParams, context_x, context_y, weights, x):
    """Mean and variance of f at ``x [n, d]`` given a context whose pairs count with
    ``weights [c]`` (1 for a pair, 0 for padding) in the average."""
    r = meta_learning.mean_embedding(params.encoder, context_x, context_y, weights)
    out = networks.apply_mlp(params.decoder,
                             jnp.concatenate([x, jnp.broadcast_to(r, (x.shape[0], r.size))], -1))
    return meta_learning.gaussian_head(out)


def predict(state: CNPState, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The CNP's mean ``[n]`` and variance ``[n]`` of ``f`` at inputs ``x [n, d]``."""
    context = state.context
    return _predict(state.params, context.x, context.y, jnp.ones_like(context.y), x)


def make_cnp_agent(config: CNPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the cnp agent; its belief index is a PRNG key (independent draws per input).

    Example:
      >>> agent = make_cnp_agent(CNPConfig(num_steps=500), base.Shapes(1, 1))
      >>> state = agent.train(jax.random.key(0), data, prior)  # meta-trains, then holds data
      >>> mean, variance = predict(state, x)
    """

    def train(key: jax.Array, data: base.Data, prior: base.RegressionPriorKnowledge):
        init_key, train_key = jax.random.split(key)

        def loss(params, tasks, _):  # no draws of its own: the key is unused
            x, y, weights = tasks
            mean, variance = jax.vmap(_predict, in_axes=(None, 0, 0, 0, 0))(
                params, x, y, weights, x)
            return jnp.mean(meta_learning.target_nll(y, mean, variance, prior.noise_variance))

        params = init_cnp(init_key, shapes.input_dim, config)
        # T is a Python int (the data are never padded): it sets the tasks' sizes.
        params = meta_learning.meta_train(train_key, params, loss, config, prior,
                                          base.num_pairs(data))
        return CNPState(params, data)

    def apply(state: CNPState, x: jax.Array, key: jax.Array) -> jax.Array:
        mean, variance = predict(state, x)
        return (mean + jnp.sqrt(variance) * jax.random.normal(key, mean.shape))[:, None]

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key))


def cnp_sweep() -> tuple[CNPConfig, ...]:
    """Meta-training length x network width (4 configs, the default among them)."""
    return tuple(CNPConfig(num_steps=steps, encoder=(width,) * 3, decoder=(width,) * 2)
                 for steps, width in itertools.product((10000, 20000), (64, 128)))
