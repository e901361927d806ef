"""A deliberately broken agent for failure-handling tests: registered as "broken".

It raises while training problems with T = 3, returns NaN logits at
temperature 0.5, and returns logits of the wrong shape for T = 100.
"""

import dataclasses

import jax.numpy as jnp

from neural_testbed import agents, base


@dataclasses.dataclass(frozen=True)
class BrokenConfig:
    offset: float = 0.0  # added to the logits


def make_broken_agent(config: BrokenConfig, shapes: base.Shapes) -> base.Agent:
    def train(key, data, prior):
        num_train = base.num_pairs(data)  # a Python int: the agent is never padded
        if num_train == 3:
            raise RuntimeError("deliberate failure on T = 3")
        # The state's shape carries the (static) number of logits to return.
        width = shapes.num_outputs + 1 if num_train == 100 else shapes.num_outputs
        return {"temperature": prior.temperature, "width": jnp.zeros(width)}

    def apply(state, x, index):
        logits = jnp.zeros((x.shape[0], state["width"].shape[-1])) + config.offset
        return jnp.where(state["temperature"] > 0.3, jnp.nan, logits)

    return base.Agent(train, base.ENN(apply, lambda key: jnp.zeros((), jnp.int32), 1))


SPEC = agents.AgentSpec(BrokenConfig, BrokenConfig(), lambda: (BrokenConfig(),),
                        make_broken_agent, "fails on purpose, for tests")
if "broken" not in agents.AGENTS:
    agents.register("broken", SPEC)
