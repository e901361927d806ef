"""Neural processes with a global latent variable, meta-trained on the problem's prior:
np (a neural process) and anp (an attentive neural process).

Grover et al. probe three neural processes; cnp (:mod:`~neural_testbed.agents.cnp`) is
the first, these are the other two. Both add to a CNP a *latent path*: an encoder
MLP embeds each context pair (x, y), the embeddings are averaged, and a head MLP
maps the average to a diagonal Gaussian ``q(z | context)`` over a global latent
``z`` of ``latent_dim`` numbers, with standard deviations ``0.1 + 0.9 sigmoid(.)``
(Kim et al.'s bounds: the floor keeps the KL term and its gradients finite). Beside
it runs a *deterministic path* that summarises the context for each target input
x*: np's averages an encoder MLP's embeddings of the pairs into one r, as the CNP
does (the NP of Kim et al.'s comparison, both paths; Garnelo et al.'s has only the
latent); anp's lets x* attend to the context (Kim et al.): keys and queries are an
MLP of the inputs, values an MLP of the pairs, multihead dot-product attention, so
that a target near a context input takes that pair's information rather than the
average's. A decoder MLP maps ``(x*, r(x*), z)`` to a mean and a variance of f.

Why a latent: a CNP's predictions at different inputs are independent given the
context, so it has no joint predictive (its metacorrelation is about 0), which is
what the testbed scores at tau > 1. A draw of z is one coherent function: the
decoder's means under one z move together across every input of a call.

Meta-training (:mod:`~neural_testbed.agents.meta_learning`, the same tasks, context
sizes, learning rate and loop as cnp's): each step draws ``batch_size`` functions
from the told Gaussian process, takes each one's first ``c ~ U{1..C}`` pairs as
its context and every pair as a target, and takes an Adam step on the negative
evidence lower bound per target: the Gaussian negative log-likelihood of the
targets (f's variance plus the known noise) under ``z ~ q(z | targets)``
(reparameterised, one draw per function), plus ``KL(q(z | targets) || q(z |
context))`` divided by the number of targets (Garnelo et al.'s and Kim et al.'s
objective: the latent given the context is trained to cover what the targets
would tell). As cnp's, it depends on the key, the prior and T only; the training
pairs are the context the state holds, so training again with more pairs under the
same key conditions the same network on them, and the agent is never padded.

A belief sample (the index is a key): ``z ~ q(z | context)``, then at each input of
the call ``f(x) = mean(x, z) + sqrt(variance(x, z)) eps(x)`` with independent
``eps``: a draw of the model's own joint predictive, ``prod_x N(f(x); mean,
variance)`` mixed over ``q(z | context)``. So, unlike cnp's, its draws are
correlated across inputs (through z), and its marginal at an input has the
variance the decoder was trained with plus the latent's spread. The per-input part
is drawn per call, so one index at inputs together is not that index at each alone;
the evaluator passes every input of a test sample in one call.

What the variance means: the decoder's variance is that of ``f``, not of ``y``;
the likelihood adds the known noise, as cnp's and every regression agent's does.

References: Garnelo et al., "Neural processes", ICML 2018 workshop (arXiv
1807.01622); Kim et al., "Attentive neural processes", ICLR 2019; Grover et al.,
"Probing uncertainty estimates of neural processes".
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

import flax.struct
import jax
import jax.numpy as jnp

from neural_testbed import base, networks
from neural_testbed.agents import meta_learning, validation

__all__ = ["ANPConfig", "AttentionPath", "MeanPath", "NPConfig", "NPParams", "NPState",
           "anp_sweep", "init_attention_path", "init_mean_path", "init_np",
           "latent_distribution", "make_anp_agent", "make_np_agent", "np_sweep", "predict"]

# Kim et al.'s bounds on the latent's standard deviations: sigma = 0.1 + 0.9 sigmoid(.).
_MIN_LATENT_STD, _LATENT_STD_RANGE = 0.1, 0.9
_MASKED = -1e30  # the attention logit of a padding pair: a weight of exp(-1e30) = 0


@dataclasses.dataclass(frozen=True)
class NPConfig:
    """Hyperparameters of the np agent: its networks and its meta-training."""

    encoder: tuple[int, ...] = (64, 64, 64)  # deterministic path's widths, ReLU; last: r's size
    latent_encoder: tuple[int, ...] = (64, 64, 64)  # latent path's widths before the average
    latent_dim: int = 64  # size of the global latent z
    decoder: tuple[int, ...] = (64, 64)  # decoder hidden widths, ReLU; outputs mean, variance
    # Adam steps of meta-training, as cnp's: its uncertainty at the points it has seen is
    # the last thing a neural process learns (cnp's entry on the differences page).
    num_steps: int = 10000
    learning_rate: float = 1e-3  # Adam step size
    batch_size: int = 16  # functions drawn from the prior per step
    largest_context_at_least: int = 20  # the largest context is 2 T, at least this
    largest_context_at_most: int = 200  # ... and at most this
    num_targets: int = 20  # inputs per function beyond the largest context

    def __post_init__(self):
        self._check_ranges()
        validation.check_fields(self)

    def _check_ranges(self):
        meta_learning.check_meta_training(self)
        if self.latent_dim < 1:
            raise ValueError(f"latent_dim must be >= 1, got {self.latent_dim!r}")
        meta_learning.check_widths(self, "encoder", "latent_encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class ANPConfig(NPConfig):
    """Hyperparameters of the anp agent: np's, and the attention of its deterministic path."""

    query_encoder: tuple[int, ...] = (64, 64)  # MLP of x to keys and queries, ReLU
    num_heads: int = 8  # attention heads; they split encoder[-1] between them

    def _check_ranges(self):
        super()._check_ranges()
        meta_learning.check_widths(self, "query_encoder")
        if self.num_heads < 1 or (isinstance(self.num_heads, int)
                                  and self.encoder[-1] % self.num_heads):
            raise ValueError(f"num_heads must be >= 1 and divide encoder[-1] "
                             f"({self.encoder[-1]}), got {self.num_heads!r}")


class MeanPath(flax.struct.PyTreeNode):
    """np's deterministic path: the pairs' embeddings averaged, the same r at every x*."""

    encoder: networks.MLPParams  # (x, y) [d + 1] -> embedding [encoder[-1]]

    def __call__(self, context_x, context_y, weights, x):
        """``r [n, encoder[-1]]`` at inputs ``x [n, d]``; pairs count with ``weights [c]``."""
        r = meta_learning.mean_embedding(self.encoder, context_x, context_y, weights)
        return jnp.broadcast_to(r, (x.shape[0], r.size))


class AttentionPath(flax.struct.PyTreeNode):
    """anp's deterministic path: multihead dot-product cross-attention from x* to the pairs."""

    values: networks.MLPParams  # (x, y) [d + 1] -> value [encoder[-1]]
    embed: networks.MLPParams  # x [d] -> key or query [query_encoder[-1]]
    query: networks.MLPParams  # one linear layer to [encoder[-1]], split into the heads
    key: networks.MLPParams  # the same for keys
    value: networks.MLPParams  # one linear layer [encoder[-1]] -> [encoder[-1]]
    output: networks.MLPParams  # the heads' concatenation -> [encoder[-1]]
    num_heads: int = flax.struct.field(pytree_node=False)

    def __call__(self, context_x, context_y, weights, x):
        """``r [n, encoder[-1]]``: each input's attention-weighted values of the pairs; a
        pair of weight 0 (padding) gets no attention."""
        values = networks.apply_mlp(self.values,
                                    jnp.concatenate([context_x, context_y[:, None]], -1))
        width = values.shape[-1]
        head = width // self.num_heads

        def heads(layer, inputs):  # [m, ...] -> [m, num_heads, head]
            return networks.apply_mlp(layer, inputs).reshape(inputs.shape[0], self.num_heads,
                                                             head)

        queries = heads(self.query, networks.apply_mlp(self.embed, x))
        keys = heads(self.key, networks.apply_mlp(self.embed, context_x))
        logits = jnp.einsum("nhk,chk->hnc", queries, keys) / math.sqrt(head)
        logits = jnp.where(weights > 0, logits, _MASKED)
        attended = jnp.einsum("hnc,chk->nhk", jax.nn.softmax(logits, axis=-1),
                              heads(self.value, values))
        return networks.apply_mlp(self.output, attended.reshape(x.shape[0], width))


class NPParams(flax.struct.PyTreeNode):
    """The networks of a latent neural process."""

    deterministic: MeanPath | AttentionPath
    latent_encoder: networks.MLPParams  # (x, y) [d + 1] -> embedding [latent_encoder[-1]]
    latent_head: networks.MLPParams  # average [latent_encoder[-1]] -> (mu, raw std) [2 L]
    decoder: networks.MLPParams  # (x*, r, z) [d + encoder[-1] + L] -> (mean, raw variance)


@flax.struct.dataclass
class NPState:
    """The meta-trained networks and the context they are conditioned on."""

    params: NPParams
    context: base.Data  # x [T, d], y [T]: the training pairs


def init_mean_path(key: jax.Array, input_dim: int, config: NPConfig) -> MeanPath:
    """np's untrained deterministic path."""
    return MeanPath(networks.init_mlp(key, input_dim + 1, config.encoder))


def init_attention_path(key: jax.Array, input_dim: int, config: ANPConfig) -> AttentionPath:
    """anp's untrained deterministic path (every layer fan-in scaled)."""
    keys = jax.random.split(key, 6)
    width, embedded = config.encoder[-1], config.query_encoder[-1]
    return AttentionPath(
        values=networks.init_mlp(keys[0], input_dim + 1, config.encoder),
        embed=networks.init_mlp(keys[1], input_dim, config.query_encoder),
        query=networks.init_mlp(keys[2], embedded, (width,)),
        key=networks.init_mlp(keys[3], embedded, (width,)),
        value=networks.init_mlp(keys[4], width, (width,)),
        output=networks.init_mlp(keys[5], width, (width,)),
        num_heads=config.num_heads)


PathInit = Callable[[jax.Array, int, NPConfig], MeanPath | AttentionPath]


def init_np(key: jax.Array, input_dim: int, config: NPConfig,
            init_path: PathInit = init_mean_path) -> NPParams:
    """The untrained networks, with the deterministic path ``init_path`` draws."""
    path_key, latent_key, head_key, decoder_key = jax.random.split(key, 4)
    hidden = config.latent_encoder[-1]
    return NPParams(
        deterministic=init_path(path_key, input_dim, config),
        latent_encoder=networks.init_mlp(latent_key, input_dim + 1, config.latent_encoder),
        latent_head=networks.init_mlp(head_key, hidden, (hidden, 2 * config.latent_dim)),
        decoder=networks.init_mlp(decoder_key,
                                  input_dim + config.encoder[-1] + config.latent_dim,
                                  (*config.decoder, 2)))


def _latent(params: NPParams, context_x, context_y, weights):
    """Mean ``[L]`` and standard deviation ``[L]`` of ``q(z | context)``."""
    average = meta_learning.mean_embedding(params.latent_encoder, context_x, context_y, weights)
    mu, raw = jnp.split(networks.apply_mlp(params.latent_head, average), 2)
    return mu, _MIN_LATENT_STD + _LATENT_STD_RANGE * jax.nn.sigmoid(raw)


def _decode(params: NPParams, context_x, context_y, weights, x, z):
    """Mean ``[n]`` and variance ``[n]`` of f at ``x [n, d]`` given the context and ``z``.

    The decoder's first layer takes ``(x*, r)`` and ``z`` through their own rows of its
    weights: the layer on their concatenation, summed in two parts, so that under a
    ``vmap`` over belief samples (which differ in ``z`` alone) the ``(x*, r)`` part is
    computed once per input and a sample adds one ``[L] x [width]`` product.
    """
    inputs = jnp.concatenate([x, params.deterministic(context_x, context_y, weights, x)], -1)
    first, *rest = params.decoder
    split = inputs.shape[-1]
    hidden = inputs @ first["w"][:split] + (z @ first["w"][split:] + first["b"])
    out = networks.apply_mlp(rest, jax.nn.relu(hidden))
    return meta_learning.gaussian_head(out)


def _kl(mu_q, std_q, mu_p, std_p):
    """KL(N(mu_q, std_q^2) || N(mu_p, std_p^2)), diagonal, summed over the latent."""
    return jnp.sum(jnp.log(std_p / std_q)
                   + (std_q**2 + (mu_q - mu_p) ** 2) / (2 * std_p**2) - 0.5)


def latent_distribution(state: NPState) -> tuple[jax.Array, jax.Array]:
    """Mean ``[L]`` and standard deviation ``[L]`` of ``q(z | the state's context)``."""
    context = state.context
    return _latent(state.params, context.x, context.y, jnp.ones_like(context.y))


def predict(state: NPState, x: jax.Array, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The mean ``[n]`` and variance ``[n]`` of ``f`` at inputs ``x [n, d]`` given the
    latent ``z [L]``."""
    context = state.context
    return _decode(state.params, context.x, context.y, jnp.ones_like(context.y), x, z)


def _make_agent(config: NPConfig, shapes: base.Shapes, init_path: PathInit) -> base.Agent:
    """A latent neural process with the deterministic path of ``init_path``."""

    def function_loss(params, x, y, weights, key, noise_variance):
        """One function's negative ELBO per target: its context is the pairs of weight 1,
        its targets every pair."""
        mu_context, std_context = _latent(params, x, y, weights)
        mu_targets, std_targets = _latent(params, x, y, jnp.ones_like(weights))
        z = mu_targets + std_targets * jax.random.normal(key, mu_targets.shape)
        mean, variance = _decode(params, x, y, weights, x, z)
        nll = jnp.mean(meta_learning.target_nll(y, mean, variance, noise_variance))
        return nll + _kl(mu_targets, std_targets, mu_context, std_context) / x.shape[0]

    def train(key: jax.Array, data: base.Data, prior: base.RegressionPriorKnowledge):
        init_key, train_key = jax.random.split(key)

        def loss(params, tasks, loss_key):
            x, y, weights = tasks
            keys = jax.random.split(loss_key, x.shape[0])
            return jnp.mean(jax.vmap(function_loss, in_axes=(None, 0, 0, 0, 0, None))(
                params, x, y, weights, keys, prior.noise_variance))

        params = init_np(init_key, shapes.input_dim, config, init_path)
        # T is a Python int (the data are never padded): it sets the tasks' sizes.
        params = meta_learning.meta_train(train_key, params, loss, config, prior,
                                          base.num_pairs(data))
        return NPState(params, data)

    def apply(state: NPState, x: jax.Array, key: jax.Array) -> jax.Array:
        latent_key, residual_key = jax.random.split(key)
        mu, std = latent_distribution(state)
        mean, variance = predict(state, x, mu + std * jax.random.normal(latent_key, mu.shape))
        return (mean + jnp.sqrt(variance) * jax.random.normal(residual_key, mean.shape))[:, None]

    return base.Agent(train, base.ENN(apply, sample_index=lambda key: key))


def make_np_agent(config: NPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the np agent; its belief index is a PRNG key (a latent draw, then the
    decoder's independent part at each input of the call).

    Example:
      >>> agent = make_np_agent(NPConfig(num_steps=500), base.Shapes(1, 1))
      >>> state = agent.train(jax.random.key(0), data, prior)  # meta-trains, then holds data
      >>> mu, std = latent_distribution(state)
      >>> mean, variance = predict(state, x, mu)  # f at x under the latent's mean
    """
    return _make_agent(config, shapes, init_mean_path)


def make_anp_agent(config: ANPConfig, shapes: base.Shapes) -> base.Agent:
    """Builds the anp agent: np with cross-attention in its deterministic path."""
    if not isinstance(config, ANPConfig):
        raise TypeError(f"anp needs an ANPConfig, got {type(config).__name__}")
    return _make_agent(config, shapes, init_attention_path)


_SWEEP_STEPS, _SWEEP_WIDTHS = (10000, 20000), (64, 128)


def np_sweep() -> tuple[NPConfig, ...]:
    """Meta-training length x network width, every network and z alike (4 configs, the
    default among them), as cnp's sweep."""
    return tuple(NPConfig(num_steps=steps, encoder=(width,) * 3, latent_encoder=(width,) * 3,
                          latent_dim=width, decoder=(width,) * 2)
                 for steps, width in itertools.product(_SWEEP_STEPS, _SWEEP_WIDTHS))


def anp_sweep() -> tuple[ANPConfig, ...]:
    """np's sweep, with the keys' and queries' MLP at the same width (4 configs)."""
    return tuple(ANPConfig(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)},
                           query_encoder=(c.encoder[-1],) * 2) for c in np_sweep())
