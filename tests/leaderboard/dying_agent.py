"""An agent whose worker process dies (SIGKILL, as the kernel's out-of-memory killer
does) when it trains a problem with T = 10 in a local worker: registered as "dying"."""

import dataclasses
import os
import signal
import sys

import numpy as np

from neural_testbed import agents, base


@dataclasses.dataclass(frozen=True)
class DyingConfig:
    logit: float = 0.0


def make_dying_agent(config: DyingConfig, shapes: base.Shapes) -> base.HostAgent:
    def train(seed, data, prior):
        if len(data.x) == 10 and "neural_testbed/run/worker" in sys.argv[0]:
            os.kill(os.getpid(), signal.SIGKILL)
        return shapes.num_outputs

    def sample(state, x, indices):
        return np.full((*x.shape[:2], state), config.logit, np.float32)

    return base.HostAgent(train, sample, num_indices=1)


SPEC = agents.AgentSpec(DyingConfig, DyingConfig(), lambda: (DyingConfig(),),
                        make_dying_agent, "its worker dies on T = 10, for tests")
if "dying" not in agents.AGENTS:
    agents.register("dying", SPEC)
