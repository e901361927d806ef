"""Thompson sampling on a contextual bandit made from the testbed's environment: does an
agent's belief make good decisions?

The Neural Testbed papers claim that joint predictive quality, not marginal quality, is
what drives sequential decisions. The reference tests it with a finite-armed bandit
(google-deepmind/neural_testbed, ``neural_testbed/bandit``); this is that bandit, run by
any registered JAX agent through the agent contract of :mod:`neural_testbed.base`:

- **The environment** of a seed is the testbed's: a random 2-layer MLP of 50 units
  (:func:`~neural_testbed.generative.mlp_classification.sample_environment`, two
  classes, the setting's temperature) and a fixed pool of actions, feature vectors
  drawn from N(0, I). Action ``a`` pays reward 1 with the environment's probability
  of class 1 at its features, ``p_a``, and 0 otherwise.
- **Thompson sampling**: at each step the agent draws one belief sample
  (``sample_index``), predicts each action's probability of reward with it and takes
  the best, ties broken uniformly at random; the reward is drawn from ``p_a``, and the
  pair (features, reward) joins its data. The step's regret is ``max p - p_a``, the
  expected reward lost (the reference's). Actions are ranked by the sample's log-odds
  of reward, ``logit_1 - logit_0``, which orders them as the probability does but
  does not round to 1 when the agent is confident: in float32 a confident agent's
  probabilities tie at 1.0 and it would choose among them at random. The reference
  ranks probabilities with noise of 1e-7 added, which float32 rounds to one of three
  values near 0.5, so its ties go mostly to the first actions.
- **Learning**: the agent is trained again (``train``, from its key) on all the data
  so far every ``retrain_every`` steps, on the data padded to ``num_steps`` rows with
  ``Data.mask`` marking the pairs, so one program serves every round; the agents
  scale their prior regularisation by the pairs they see, which anneals it as data
  arrives. The reference instead takes one SGD step per observation on running
  parameters with its L2 term divided by the step count; the contract has no
  incremental update, so this retrains on a schedule.
- Before the first training there is no data: the first step's action is uniformly
  random.

Everything is one pure function of a key (:func:`run_thompson`); :func:`run_seeds`
compiles it once and ``vmap``-s it over seeds.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base
from neural_testbed.generative import mlp_classification

__all__ = ["BanditEnvironment", "BanditRun", "BanditSetting", "check_agent", "run_seeds",
           "run_thompson", "sample_bandit", "seed_keys", "seeds_program"]

ENV_HIDDEN = (50, 50)  # the environment MLP's widths, the testbed's


@dataclasses.dataclass(frozen=True)
class BanditSetting:
    """One bandit problem family; a seed draws its environment and actions.

    The defaults are the reference's (``neural_testbed/bandit/run.py``): d = 2,
    temperature 0.1, 50 actions per input dimension, 10,000 steps.
    """

    input_dim: int = 2
    temperature: float = 0.1
    num_actions: int | None = None  # None: 50 x input_dim, the reference's
    num_steps: int = 10_000
    retrain_every: int = 100  # steps between trainings (the first comes after step 1)

    def __post_init__(self):
        for name in ("input_dim", "num_steps", "retrain_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_actions is not None and (
                isinstance(self.num_actions, bool) or not isinstance(self.num_actions, int)
                or self.num_actions < 2):
            raise ValueError(f"num_actions must be an integer >= 2, got {self.num_actions!r}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")

    @property
    def actions(self) -> int:
        """The number of actions in the pool."""
        return 50 * self.input_dim if self.num_actions is None else self.num_actions

    def prior(self) -> base.PriorKnowledge:
        """What the agent is told: the environment's input dimension, two classes, its
        MLP's widths and temperature."""
        return base.PriorKnowledge(input_dim=self.input_dim, num_classes=2,
                                   env_hidden=ENV_HIDDEN, temperature=self.temperature)


class BanditEnvironment(NamedTuple):
    """A seed's bandit: the environment, the actions' features and their probabilities of
    reward."""

    env: mlp_classification.Environment  # the random MLP (an oracle's belief)
    features: jax.Array  # [actions, input_dim]
    reward_probs: jax.Array  # [actions]: p_a, the environment's probability of class 1


class BanditRun(NamedTuple):
    """What happened at each step of a run (a leading seed axis from :func:`run_seeds`)."""

    actions: jax.Array  # [steps] int32: the action taken
    rewards: jax.Array  # [steps] int32: 1 or 0
    regret: jax.Array  # [steps] float32: max p - p of the action taken


def _keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """A seed's keys: environment, actions, training, steps."""
    return tuple(jax.random.split(key, 4))


def sample_bandit(key: jax.Array, setting: BanditSetting) -> BanditEnvironment:
    """The bandit of the seed whose key is ``key`` (the one :func:`run_thompson` meets)."""
    env_key, actions_key, _, _ = _keys(key)
    env = mlp_classification.sample_environment(env_key, setting.temperature, setting.input_dim,
                                                2, ENV_HIDDEN)
    features = jax.random.normal(actions_key, (setting.actions, setting.input_dim))
    probs = jax.nn.softmax(mlp_classification.environment_logits(env, features))[:, 1]
    return BanditEnvironment(env, features, probs)


def _random_best(key: jax.Array, values: jax.Array) -> jax.Array:
    """The index of the largest value, chosen uniformly at random among equal ones."""
    return jnp.argmax(jnp.where(values == jnp.max(values),
                                jax.random.uniform(key, values.shape), -1.0))


def run_thompson(key: jax.Array, agent: base.Agent, setting: BanditSetting) -> BanditRun:
    """One seed's run of Thompson sampling with ``agent`` (pure: ``jit`` and ``vmap`` it).

    ``agent`` must accept padded training data (``Agent.accepts_padding``): every
    training sees all ``num_steps`` rows, ``Data.mask`` marking those observed so far.
    """
    bandit = sample_bandit(key, setting)
    _, _, train_key, step_key = _keys(key)
    prior = setting.prior()
    best = jnp.max(bandit.reward_probs)

    def observe(data, t, action, key):
        reward = jax.random.bernoulli(key, bandit.reward_probs[action]).astype(jnp.int32)
        data = base.Data(data.x.at[t].set(bandit.features[action]), data.y.at[t].set(reward),
                         data.mask.at[t].set(True))
        return data, (action.astype(jnp.int32), reward, best - bandit.reward_probs[action])

    # Step 0: no data yet, so a uniformly random action.
    first_key, reward_key = jax.random.split(jax.random.fold_in(step_key, 0))
    empty = base.Data(jnp.zeros((setting.num_steps, setting.input_dim), jnp.float32),
                      jnp.zeros((setting.num_steps,), jnp.int32),
                      jnp.zeros((setting.num_steps,), bool))
    data, first = observe(empty, 0, jax.random.randint(first_key, (), 0, setting.actions),
                          reward_key)

    def one_round(data, round_index):
        state = agent.train(jax.random.fold_in(train_key, round_index), data, prior)

        def step(data, t):
            index_key, tie_key, reward_key = jax.random.split(jax.random.fold_in(step_key, t), 3)
            logits = agent.enn.apply(state, bandit.features, agent.enn.sample_index(index_key))
            new, out = observe(data, jnp.minimum(t, setting.num_steps - 1),
                               _random_best(tie_key, logits[:, 1] - logits[:, 0]), reward_key)
            # Steps past num_steps (the last round's tail) change nothing.
            return jax.tree.map(lambda a, b: jnp.where(t < setting.num_steps, a, b), new,
                                data), out

        first_step = 1 + round_index * setting.retrain_every
        return jax.lax.scan(step, data, first_step + jnp.arange(setting.retrain_every))

    rounds = -(-(setting.num_steps - 1) // setting.retrain_every)
    _, steps = jax.lax.scan(one_round, data, jnp.arange(rounds))
    later = jax.tree.map(lambda a: a.reshape(-1)[:setting.num_steps - 1], steps)
    return BanditRun(*(jnp.concatenate([jnp.reshape(f, (1,)), rest])
                       for f, rest in zip(first, later)))


def check_agent(agent: base.Agent | base.HostAgent, task: str = "the bandit") -> None:
    """Raises a one-line error for an agent that ``task`` (a decision task, which trains
    it on padded data inside one program) cannot run."""
    if isinstance(agent, base.HostAgent):
        raise ValueError(f"{task} runs the agent inside one JAX program, which a host agent "
                         "(trained outside JAX) cannot join")
    if not agent.accepts_padding:
        raise ValueError(f"{task} trains the agent on its data padded to num_steps rows "
                         "(Agent.accepts_padding), which this agent does not accept")


def seed_keys(seeds) -> jax.Array:
    """The keys of ``seeds``: seed s is ``jax.random.key(s)``."""
    return jax.vmap(jax.random.key)(jnp.asarray(np.asarray(seeds, np.uint32)))


def seeds_program(agent: base.Agent, setting: BanditSetting):
    """``keys -> BanditRun`` of every seed's key (:func:`seed_keys`), ``vmap``-ped: one
    program for a batch of seeds (``jit`` it)."""
    check_agent(agent)
    return jax.vmap(lambda key: run_thompson(key, agent, setting))


def run_seeds(agent: base.Agent, setting: BanditSetting, seeds) -> BanditRun:
    """Runs of ``agent`` on the bandits of ``seeds``, compiled and run as one program;
    NumPy arrays ``[seeds, steps]``."""
    run = jax.jit(seeds_program(agent, setting))(seed_keys(seeds))
    return BanditRun(*(np.asarray(a) for a in run))
