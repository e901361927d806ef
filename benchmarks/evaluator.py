"""Seconds per evaluation of the KL estimator, compiled, at tau = 1 and tau = 100.

Not a test. Three belief representations on one random-MLP problem
(temperature 0.1, T = 10), N = M = 1000:

- ``single``: one network (``num_indices=1``, the mlp agent's case);
- ``ensemble100``: a 100-member ensemble of linear classifiers (a finite index);
- ``continuous``: a linear classifier whose weights are a Gaussian function of a
  continuous index (every sample is a distinct network).

Each evaluation is compiled once and then timed ``--repeats`` times; the
median is printed.

Usage:
  PYTHONPATH=. python benchmarks/evaluator.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from neural_testbed import base, leaderboard, likelihood, memory

_HIDDEN = 50


def _enns(key):
    """(name, enn, state) of the three belief representations."""
    k1, k2, k3 = jax.random.split(key, 3)
    d, k = 2, 2
    single = base.ENN(
        apply=lambda w, x, i: jnp.tanh(x @ w[0]) @ w[1],
        sample_index=lambda key: jnp.zeros((), jnp.int32), num_indices=1)
    single_state = (jax.random.normal(k1, (d, _HIDDEN)), jax.random.normal(k2, (_HIDDEN, k)))
    ensemble = base.ENN(
        apply=lambda w, x, i: x @ w[i],
        sample_index=lambda key: jax.random.randint(key, (), 0, 100), num_indices=100)
    ensemble_state = 3.0 * jax.random.normal(k3, (100, d, k))
    continuous = base.ENN(
        apply=lambda w, x, z: x @ (w[0] + w[1] * z),
        sample_index=lambda key: jax.random.normal(key, (d, k)), num_indices=None)
    continuous_state = (jax.random.normal(k1, (d, k)), jnp.full((d, k), 0.5))
    return [("single", single, single_state), ("ensemble100", ensemble, ensemble_state),
            ("continuous", continuous, continuous_state)]


def _problem_test_samples(key, tau):
    problem = leaderboard.get_sweep("paper")["classification_2d/97"]
    return problem.sample_test(key, problem.instance().env, tau), problem.num_classes


def main() -> None:
    memory.keep_freed_memory()  # as the CLI does: this script owns its process
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, load average "
          f"{os.getloadavg()[0]:.1f}, jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"{'belief':<14}{'tau':>5}{'median s':>10}{'kl':>10}{'stderr':>9}")
    for name, enn, state in _enns(jax.random.key(0)):
        for tau in (1, 100):
            test, num_classes = _problem_test_samples(jax.random.key(1), tau)
            evaluate = jax.jit(likelihood.make_evaluator(enn, tau, num_classes))
            result = jax.block_until_ready(evaluate(jax.random.key(2), state, test))
            seconds = []
            for r in range(args.repeats):
                start = time.perf_counter()
                jax.block_until_ready(evaluate(jax.random.key(3 + r), state, test))
                seconds.append(time.perf_counter() - start)
            print(f"{name:<14}{tau:>5}{statistics.median(seconds):>10.3f}"
                  f"{float(result.kl):>10.3f}{float(result.kl_stderr):>9.3f}")


if __name__ == "__main__":
    main()
