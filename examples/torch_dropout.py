"""MC dropout written in PyTorch, evaluated by neural-testbed as a host agent.

Register it with `neural-testbed run --import examples/torch_dropout.py --agent torch_dropout`.
"""

import dataclasses

import numpy as np
import torch

from neural_testbed import agents, base


@dataclasses.dataclass(frozen=True)
class TorchDropoutConfig:
    dropout_rate: float = 0.1  # drop probability of each hidden unit
    num_steps: int = 1000  # Adam steps on minibatches of 100, drawn with replacement
    learning_rate: float = 1e-3  # Adam step size
    weight_decay: float = 1e-3  # L2 penalty on every parameter


def make_torch_dropout(config: TorchDropoutConfig, shapes: base.Shapes) -> base.HostAgent:
    p = config.dropout_rate

    def forward(layers, x, masks):  # masks[i] broadcasts against layer i's output
        for layer, mask in zip(layers[:-1], masks):
            x = torch.relu(layer(x)) * mask / (1 - p)
        return layers[-1](x)

    def train(seed, data, prior):  # NumPy data in, any Python object out
        torch.set_num_threads(1)  # beside the JAX evaluator's threads (see the docs)
        torch.manual_seed(seed)
        layers = torch.nn.ModuleList([torch.nn.Linear(shapes.input_dim, 50),
                                      torch.nn.Linear(50, 50),
                                      torch.nn.Linear(50, shapes.num_outputs)])
        optimizer = torch.optim.Adam(layers.parameters(), lr=config.learning_rate,
                                     weight_decay=config.weight_decay)
        x, y = torch.tensor(data.x), torch.tensor(data.y, dtype=torch.long)
        for _ in range(config.num_steps):
            batch = torch.randint(len(x), (100,))
            masks = [torch.rand(100, 50) >= p for _ in range(2)]  # one mask per example
            loss = torch.nn.functional.cross_entropy(forward(layers, x[batch], masks), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return layers

    def sample(layers, x, seeds):  # x [networks, n, d] -> logits [networks, n, K]
        rng = np.random.default_rng(seeds)  # fresh seeds, fresh masks
        masks = [torch.as_tensor(rng.random((len(seeds), 1, 50)) >= p) for _ in range(2)]
        with torch.no_grad():  # one mask per network, shared by its n inputs
            return forward(layers, torch.tensor(x), masks).numpy()

    return base.HostAgent(train, sample, num_indices=None)  # every seed is a new network


if "torch_dropout" not in agents.AGENTS:
    agents.register("torch_dropout", agents.AgentSpec(
        config_type=TorchDropoutConfig, default=TorchDropoutConfig(),
        sweep=lambda: tuple(TorchDropoutConfig(dropout_rate=r) for r in (0.05, 0.1, 0.2, 0.4)),
        make=make_torch_dropout, description="MC dropout in PyTorch (a host agent)"))
