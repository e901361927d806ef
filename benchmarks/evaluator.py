"""Seconds per evaluation of the KL estimator, compiled, at tau = 1 and tau = 100.

Not a test. Three belief representations on one problem (by default the random-MLP
problem ``classification_2d/97``, temperature 0.1, T = 10; ``--problem digits/0`` for
a real one: K = 10 classes, Algorithm 4 with its 10 hyperplanes), N = M = 1000:

- ``single``: one network (``num_indices=1``, the mlp agent's case);
- ``ensemble100``: a 100-member ensemble of linear classifiers (a finite index);
- ``continuous``: a linear classifier whose weights are a Gaussian function of a
  continuous index (every sample is a distinct network).

Each evaluation is compiled once and then timed ``--repeats`` times; the
median is printed.

Usage:
  PYTHONPATH=. python benchmarks/evaluator.py [--repeats 5] [--problem digits/0]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from neural_testbed import base, evaluation, leaderboard

_HIDDEN = 50


def _enns(key, d, k):
    """(name, enn, state) of the three belief representations, for inputs of dimension d
    and k classes."""
    k1, k2, k3 = jax.random.split(key, 3)
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


def _find_problem(problem_id: str):
    for sweep in ("paper", "real"):
        problems = leaderboard.get_sweep(sweep)
        if problem_id in problems:
            return problems[problem_id]
    raise SystemExit(f"no problem {problem_id!r} in the paper or real sweep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problem", default="classification_2d/97")
    args = parser.parse_args()
    problem = _find_problem(args.problem)
    env = problem.instance().env
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, load average "
          f"{os.getloadavg()[0]:.1f}, jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"problem {problem.problem_id}: d = {problem.input_dim}, K = {problem.num_classes}, "
          f"{problem.num_hyperplanes} hyperplanes")
    print(f"{'belief':<14}{'tau':>5}{'median s':>10}{'kl':>10}{'stderr':>9}")
    for name, enn, state in _enns(jax.random.key(0), problem.input_dim, problem.num_classes):
        for tau in (1, 100):
            test = problem.sample_test(jax.random.key(1), env, tau)
            evaluate = jax.jit(evaluation.make_evaluator(
                enn, tau, problem.num_classes, num_hyperplanes=problem.num_hyperplanes))
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
