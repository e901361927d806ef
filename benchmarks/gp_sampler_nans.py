"""Which square root of a GP posterior covariance gives NaN samples, on this device.

Not a test. The GP agents draw a joint sample at a test tau-sample's inputs from
``N(mean, cov)`` by a square root of ``cov`` (a repeated input makes it singular, so a
Cholesky factor may not exist). On an H200 their `regression` rows at tau = 100 failed
("NaN or +inf logits") on oracle_gp's 13 and gp's 21 problems below with TensorFloat-32
products, and still on 11 and 15 of them with full-float32 ones, while a CPU computes
every one. This script takes oracle_gp on such problems, builds the posterior
covariance at N test tau-samples' inputs (as the evaluator does) and counts, for each
way of taking the root, the matrices whose root holds a NaN, and the largest
``|root root^T - cov|`` relative to the largest variance:

- ``eigh``: ``jnp.linalg.eigh`` of the whole matrix (LAPACK on a CPU, cuSOLVER's
  divide and conquer on a GPU), what the agents used everywhere before;
- ``distinct eigh``: the same without the repeated inputs, each then given its first
  occurrence's row (what the agents use on a GPU now);
- ``eigh + jitter``: ``eigh(cov + 1e-6 mean(diag) I)``;
- ``jacobi``: ``lax.linalg.eigh`` by Jacobi iteration (a GPU only).

Measured on an H200 (JAX 0.11.2, 2026-11-28; the counts' products at JAX's default
there): over 1000 tau-samples of each of oracle_gp's problems 1, 3, 4, 8, 9, 11, ``eigh``
had a NaN on 1 matrix of problem 4 and 1 of problem 9, the others none. Then, with the
agents' sampler replaced by each method in turn (an earlier form of this script), the
rows of the problems that had failed (``published_failures.py``'s ``H200_FAILURES``)
were recomputed through the runner: ``distinct eigh`` all 26 of oracle_gp's and all 42
of gp's rows ok, ``jacobi`` all 26 of oracle_gp's (gp's not run), against 15 of 26 and
27 of 42 with ``eigh`` (``published_failures.py``, full-float32 products).

Usage:
  PYTHONPATH=. python benchmarks/gp_sampler_nans.py [--problems 1,3,4] [--num-test 1000]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base, gaussian_process
from neural_testbed.agents import oracle_gp
from neural_testbed.generative import gp_regression
from neural_testbed.leaderboard import problems


def _jacobi(cov: jax.Array) -> jax.Array:
    vectors, values = jax.lax.linalg.eigh(
        cov, implementation=jax.lax.linalg.EighImplementation.JACOBI)
    return vectors * jnp.sqrt(jnp.clip(values, 0.0))


def _methods() -> dict:
    """``method(cov) -> root`` for each method this device has."""
    methods = {
        "eigh": gaussian_process.square_root,
        "distinct eigh": gaussian_process.square_root_of_distinct,
        "eigh + jitter": lambda cov: gaussian_process.square_root(
            cov + 1e-6 * jnp.mean(jnp.diag(cov)) * jnp.eye(cov.shape[0])),
    }
    if jax.devices()[0].platform == "gpu":
        methods["jacobi"] = _jacobi
    return methods


@jax.jit
def _count(state: oracle_gp.OracleGPState, x: jax.Array) -> dict[str, tuple[jax.Array, ...]]:
    """Per method: matrices with a NaN root, and the worst relative reconstruction error."""

    def one(xs):
        _, cov = oracle_gp.posterior(state, xs)
        scale = jnp.max(jnp.diag(cov))
        found = {"cov itself": (jnp.any(~jnp.isfinite(cov)), jnp.float32(0))}
        for name, method in _methods().items():
            r = method(cov)
            found[name] = jnp.any(jnp.isnan(r)), jnp.max(jnp.abs(r @ r.T - cov)) / scale
        return found

    found = jax.lax.map(one, x, batch_size=50)
    return {name: (jnp.sum(nan), jnp.nanmax(jnp.where(nan, jnp.nan, err)))
            for name, (nan, err) in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="1,3,4,8,9,11",
                        help="comma-separated `regression` problem numbers (default: the "
                             "first six whose oracle_gp rows failed on an H200)")
    parser.add_argument("--num-test", type=int, default=1000, help="tau-samples per problem")
    args = parser.parse_args()
    sweep = problems.get_sweep("regression")
    print(f"device: {jax.devices()[0].device_kind}; JAX {jax.__version__}; "
          f"{args.num_test} tau-samples of 100 inputs per problem")
    for number in args.problems.split(","):
        problem = sweep[f"regression/{number}"]
        agent = oracle_gp.make_oracle_gp_agent(oracle_gp.OracleGPConfig(),
                                               base.Shapes.of(problem))
        start = time.perf_counter()
        instance = problem.instance()
        state = agent.train(jax.random.key(0), instance.data, instance.prior)
        test = gp_regression.sample_test_data(jax.random.key(int(number)), instance.env,
                                              args.num_test, 100)
        counts = jax.device_get(_count(state, test.x))
        repeats = int(np.mean([len(xs) - len(np.unique(xs, axis=0)) for xs in test.x]))
        print(f"regression/{number} (d={problem.input_dim}, T={problem.num_train}, "
              f"about {repeats} repeated inputs a tau-sample; "
              f"{time.perf_counter() - start:.1f} s):")
        for name, (nans, err) in counts.items():
            print(f"  {name:16s} {int(nans):5d} of {args.num_test} with a NaN; "
                  f"largest |root root^T - cov| / max var {float(err):.2e}")


if __name__ == "__main__":
    main()
