"""Active learning for classification on the testbed's environment: does an agent's belief
pick labels that teach it fastest?

The reference's experiment (google-deepmind/neural_testbed, ``neural_testbed/active_learning``,
with enn's priorities in ``enn/active_learning/priorities.py``), run by any registered JAX
agent through the agent contract:

- A seed draws the testbed's random-MLP environment (two classes, the setting's
  temperature) and a pool of inputs from N(0, I), 20 per input dimension (the
  reference's). A label of pool input ``x`` is drawn from the environment at ``x``
  afresh each time it is asked for, so an input may be labelled again.
- Each round the agent is trained (``train``, from its key) on the labels so far, padded
  to ``num_steps`` rows with ``Data.mask`` marking them (one program for every round),
  and scored: d_KL at tau = 1 on ``num_test`` fresh inputs, the mean over them of the
  KL divergence from the environment's class probabilities to the agent's (the mean of
  ``num_samples`` belief samples), exact in the label. Then a :data:`PRIORITIES`
  function of the same belief samples at every pool input (and of a fresh label of
  each, for ``nll`` and ``joint_nll``) picks the ``batch_size`` inputs of highest
  priority, ties at random, and their labels join the data.
- The first label is of a uniformly random pool input: there is nothing to train on
  before it. After the last batch the agent is trained and scored once more.

The reference instead labels one input per step and takes one SGD step on its running
parameters between steps; the agent contract has no incremental update, so here the
agent is trained again per batch (``batch_size=1`` is the reference's one label a step,
with a full training between). Everything is one pure function of a key
(:func:`run_active`), compiled once and ``vmap``-ped over seeds (:func:`active_program`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from neural_testbed import bandit, base
from neural_testbed.generative import mlp_classification

__all__ = ["PRIORITIES", "ActiveProblem", "ActiveRun", "ActiveSetting", "active_program",
           "run_active", "sample_problem"]

ENV_HIDDEN = (50, 50)  # the environment MLP's widths, the testbed's
JOINT_NLL_TAU = 10  # enn's joint_nll priority scores tau repeats of one label


def _mean_probs(probs):
    return jnp.mean(probs, axis=0)


def _entropy(p):
    return -jnp.sum(jax.scipy.special.xlogy(p, p), axis=-1)  # 0 log 0 = 0, not NaN


# Each priority: (probs [samples, inputs, K], labels [inputs], key) -> [inputs], higher first;
# enn's definitions (enn/active_learning/priorities.py), probabilities from the samples'
# softmax.
PRIORITIES: dict[str, Callable] = {
    "uniform": lambda probs, labels, key: jax.random.uniform(key, labels.shape),
    "variance": lambda probs, labels, key: jnp.sum(jnp.var(probs, axis=0), axis=-1),
    "nll": lambda probs, labels, key: -jnp.log(
        jnp.take_along_axis(_mean_probs(probs), labels[:, None], axis=-1)[:, 0]),
    "joint_nll": lambda probs, labels, key: -jnp.mean(JOINT_NLL_TAU * jnp.log(
        jnp.take_along_axis(probs, labels[None, :, None], axis=-1)[..., 0]), axis=0),
    "entropy": lambda probs, labels, key: _entropy(_mean_probs(probs)),
    "margin": lambda probs, labels, key: -jnp.diff(
        jnp.sort(_mean_probs(probs), axis=-1)[:, -2:], axis=-1)[:, 0],
    "bald": lambda probs, labels, key: _entropy(_mean_probs(probs)) - jnp.mean(
        _entropy(probs), axis=0),
    "var_ratios": lambda probs, labels, key: 1 - jnp.max(_mean_probs(probs), axis=-1),
}


@dataclasses.dataclass(frozen=True)
class ActiveSetting:
    """One active-learning problem family and priority; a seed draws its environment, pool
    and test inputs. d = 10, temperature 0.1 and 20 pool inputs per dimension are the
    reference's (``neural_testbed/active_learning/run.py``)."""

    priority: str = "entropy"
    input_dim: int = 10
    temperature: float = 0.1
    pool_size: int | None = None  # None: 20 x input_dim
    num_steps: int = 500  # labels in all
    batch_size: int = 25  # labels chosen per training
    num_samples: int = 100  # belief samples for the priorities and the score
    num_test: int = 1000  # inputs the score averages over

    def __post_init__(self):
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got "
                             f"{self.priority!r}")
        for name in ("input_dim", "num_steps", "batch_size", "num_samples", "num_test"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if self.batch_size > self.pool:
            raise ValueError(f"batch_size must be at most the pool's {self.pool} inputs, got "
                             f"{self.batch_size}")

    @property
    def pool(self) -> int:
        """Inputs in the pool."""
        return 20 * self.input_dim if self.pool_size is None else self.pool_size

    @property
    def rounds(self) -> int:
        """Batches after the first label."""
        return -(-(self.num_steps - 1) // self.batch_size)

    def prior(self) -> base.PriorKnowledge:
        return base.PriorKnowledge(input_dim=self.input_dim, num_classes=2,
                                   env_hidden=ENV_HIDDEN, temperature=self.temperature)


class ActiveRun(NamedTuple):
    """A run's labels and scores (a leading seed axis from :func:`active_program`)."""

    chosen: jax.Array  # [num_steps] int32: the pool input of each label, in order
    num_labels: jax.Array  # [rounds + 1] int32: the labels each score was trained on
    kl: jax.Array  # [rounds + 1] float32: d_KL at tau = 1 after each training


class ActiveProblem(NamedTuple):
    """A seed's problem: the environment, its pool and test inputs and their class
    probabilities."""

    env: mlp_classification.Environment
    pool: jax.Array  # [pool, input_dim]
    pool_probs: jax.Array  # [pool, 2]
    x_test: jax.Array  # [num_test, input_dim]
    test_probs: jax.Array  # [num_test, 2]


def _keys(key: jax.Array):
    """A seed's keys: environment, pool, test inputs, training, rounds, first label."""
    return jax.random.split(key, 6)


def sample_problem(key: jax.Array, setting: ActiveSetting) -> ActiveProblem:
    """The problem of the seed whose key is ``key`` (the one :func:`run_active` meets)."""
    env_key, pool_key, test_key, _, _, _ = _keys(key)
    env = mlp_classification.sample_environment(env_key, setting.temperature,
                                                setting.input_dim, 2, ENV_HIDDEN)
    pool = jax.random.normal(pool_key, (setting.pool, setting.input_dim))
    x_test = jax.random.normal(test_key, (setting.num_test, setting.input_dim))
    return ActiveProblem(env, pool,
                         jax.nn.softmax(mlp_classification.environment_logits(env, pool)),
                         x_test,
                         jax.nn.softmax(mlp_classification.environment_logits(env, x_test)))


def run_active(key: jax.Array, agent: base.Agent, setting: ActiveSetting) -> ActiveRun:
    """One seed's active learning with ``agent`` (pure: ``jit`` and ``vmap`` it); the agent
    must accept padded training data (``Agent.accepts_padding``)."""
    _, _, _, train_key, step_key, first_key = _keys(key)
    pool, pool_probs, x_test, test_probs = sample_problem(key, setting)[1:]
    prior, priority = setting.prior(), PRIORITIES[setting.priority]
    rows = setting.num_steps

    def beliefs(state, x, key):
        """Log-probabilities of ``num_samples`` belief samples at ``x``: [samples, n, 2]."""
        indices = jax.vmap(agent.enn.sample_index)(jax.random.split(key, setting.num_samples))
        return jax.nn.log_softmax(jax.vmap(lambda i: agent.enn.apply(state, x, i))(indices))

    def trained_and_scored(data, round_index):
        round_key = jax.random.fold_in(step_key, round_index)
        state = agent.train(jax.random.fold_in(train_key, round_index), data, prior)
        # The mean predictive in log space: a confident sample's probabilities round to 0.
        log_mean = (jax.nn.logsumexp(beliefs(state, x_test, jax.random.fold_in(round_key, 0)),
                                     axis=0) - jnp.log(setting.num_samples))
        terms = jnp.where(test_probs > 0, test_probs * (jnp.log(test_probs) - log_mean), 0.0)
        return state, jnp.mean(jnp.sum(terms, axis=-1)), round_key

    def label(data, at, chosen, key):
        """``data`` with labels of the pool inputs ``chosen`` written from row ``at``
        (rows past the end are dropped)."""
        y = jax.random.categorical(key, jnp.log(pool_probs[chosen])).astype(jnp.int32)
        rows_at = at + jnp.arange(chosen.shape[0])
        keep = rows_at < rows
        rows_at = jnp.where(keep, rows_at, rows)  # out of bounds: the scatter drops them
        return base.Data(data.x.at[rows_at].set(pool[chosen], mode="drop"),
                         data.y.at[rows_at].set(y, mode="drop"),
                         data.mask.at[rows_at].set(keep, mode="drop"))

    first_key, label_key = jax.random.split(first_key)
    first = jax.random.randint(first_key, (1,), 0, setting.pool)
    empty = base.Data(jnp.zeros((rows, setting.input_dim), jnp.float32),
                      jnp.zeros((rows,), jnp.int32), jnp.zeros((rows,), bool))
    data = label(empty, 0, first, label_key)

    def one_round(data, round_index):
        state, kl, round_key = trained_and_scored(data, round_index)
        labels_key, priority_key, tie_key, label_key = jax.random.split(
            jax.random.fold_in(round_key, 1), 4)
        probs = jnp.exp(beliefs(state, pool, jax.random.fold_in(round_key, 2)))
        fresh = jax.random.categorical(labels_key, jnp.log(pool_probs)).astype(jnp.int32)
        scores = priority(probs, fresh, priority_key)
        # The batch: the highest scores, equal ones in random order.
        order = jnp.lexsort((jax.random.uniform(tie_key, scores.shape), -scores))
        chosen = order[:setting.batch_size]
        at = 1 + round_index * setting.batch_size
        return label(data, at, chosen, label_key), (kl, jnp.minimum(at, rows), chosen)

    data, (kls, counts, batches) = jax.lax.scan(one_round, data, jnp.arange(setting.rounds))
    _, last_kl, _ = trained_and_scored(data, setting.rounds)
    chosen = jnp.concatenate([first, batches.reshape(-1)])[:rows].astype(jnp.int32)
    return ActiveRun(chosen, jnp.append(counts, rows).astype(jnp.int32),
                     jnp.append(kls, last_kl))


def active_program(agent: base.Agent, setting: ActiveSetting):
    """``keys -> ActiveRun`` of every seed's key, ``vmap``-ped: one program for a batch of
    seeds (``jit`` it); an agent it cannot run is refused in one line."""
    bandit.check_agent(agent, "active learning")
    return jax.vmap(lambda key: run_active(key, agent, setting))
