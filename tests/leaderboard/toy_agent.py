"""A user agent for tests, loaded with ``neural-testbed --import``: a tiny mlp."""

import dataclasses

from neural_testbed import agents


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    num_steps: int = 30  # Adam steps
    l2_weight_decay: float = 1.0  # lambda


def make_toy_agent(config: ToyConfig, shapes):
    return agents.make_mlp_agent(
        agents.MLPConfig(num_steps=config.num_steps, l2_weight_decay=config.l2_weight_decay),
        shapes)


SPEC = agents.AgentSpec(
    config_type=ToyConfig,
    default=ToyConfig(),
    sweep=lambda: (ToyConfig(l2_weight_decay=0.1), ToyConfig(l2_weight_decay=1.0)),
    make=make_toy_agent,
    description="a tiny mlp registered by a test module",
)

if "toy" not in agents.AGENTS:
    agents.register("toy", SPEC)
