"""A PyTorch deep ensemble scored from arrays: no callback into JAX.

Five MLPs (50, 50), each from its own initialisation, trained with Adam on the whole
training set with weight decay divided by T; their softmax outputs at each test tau-sample's
distinct inputs are the ensemble's members, and ``member_draws`` draws M of them per
tau-sample. The rows go to the store beside the JAX agents'.

Run: python examples/torch_ensemble_arrays.py [--sweep classification-quick] [--db DB]
     [--problems N]  (the first N problems only)
"""

import argparse
import time

import numpy as np
import torch

from neural_testbed import leaderboard
from neural_testbed.leaderboard import arrays

NUM_MEMBERS, NUM_STEPS, LEARNING_RATE = 5, 500, 1e-2
WEIGHT_DECAY = 1.0  # L2 penalty, divided by T: strong on few points, weak on many


def train_member(seed, x, y, num_classes):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 50), torch.nn.ReLU(),
                              torch.nn.Linear(50, 50), torch.nn.ReLU(),
                              torch.nn.Linear(50, num_classes))
    optimizer = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE,
                                 weight_decay=WEIGHT_DECAY / len(x))
    x, y = torch.tensor(x), torch.tensor(y, dtype=torch.long)
    for _ in range(NUM_STEPS):
        loss = torch.nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return net


def member_probabilities(nets, x):
    """Each net's class probabilities at x [N, A + 1, d]: [members, N, A + 1, K]."""
    with torch.no_grad():
        flat = torch.tensor(x.reshape(-1, x.shape[-1]))
        return np.stack([torch.softmax(net(flat), -1).numpy().reshape(*x.shape[:2], -1)
                         for net in nets])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="classification-quick")
    parser.add_argument("--db", default="neural_testbed_results.db")
    parser.add_argument("--problems", type=int, default=None, help="the first N only")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: threads only compete with each other
    problems = list(leaderboard.get_sweep(args.sweep).values())[:args.problems]
    with leaderboard.ResultsStore(args.db) as store:
        for problem in problems:
            given = arrays.problem_arrays(problem)
            start = time.perf_counter()
            nets = [train_member(seed, given.x_train, given.y_train, given.num_classes)
                    for seed in range(NUM_MEMBERS)]
            seconds = time.perf_counter() - start
            predictions = {tau: arrays.member_draws(member_probabilities(nets, test.x),
                                                    given.num_samples, seed=tau)
                           for tau, test in given.tests.items()}
            rows = arrays.score_predictions(problem, predictions, "torch_ensemble",
                                            train_seconds=seconds)
            store.write(rows)
            print(problem.problem_id, *(f"tau={r.tau}: {r.kl:.4f} ± {r.kl_stderr:.4f}"
                                        for r in rows))


if __name__ == "__main__":
    main()
