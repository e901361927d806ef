"""Speed-up of the unrolled threefry hash (``agents/_threefry.py``) on the SG-MCMC chain.

Not a test. Two timings, each with JAX's own threefry key and with the same
key re-typed by :func:`_threefry.fast_key` (which draws the same numbers):

- ``noise``: the Langevin noise alone, ``--steps`` updates of
  :func:`optax.add_noise` over the parameters of the agent's MLP (50, 50) on a
  2-d problem with 2 classes, i.e. the Gaussians one SG-MCMC step draws;
- ``chain``: the whole SG-MCMC agent, ``--steps`` steps (gradients, minibatch
  indices and noise) on a paper problem with T = 100.

Each program is compiled once and then timed ``--repeats`` times, the two
variants alternating; the medians are printed with the speed-up (plain / fast) and
appended, with machine, date, versions and command, to
``benchmarks/results/threefry.jsonl``.

Usage:
  PYTHONPATH=. python benchmarks/threefry.py [--steps 10000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import time
from unittest import mock

import jax
import optax

from neural_testbed import base, leaderboard, networks
from neural_testbed.agents import _threefry, sgmcmc

RESULTS = pathlib.Path(__file__).parent / "results" / "threefry.jsonl"


def _median_seconds(plain, fast, repeats: int) -> tuple[float, float]:
    """Median seconds of each program; the two alternate, so that a change of load on a
    shared machine affects both alike."""
    jax.block_until_ready((plain(), fast()))  # compile
    seconds = {plain: [], fast: []}
    for _ in range(repeats):
        for fn in (plain, fast):
            start = time.perf_counter()
            jax.block_until_ready(fn())
            seconds[fn].append(time.perf_counter() - start)
    return statistics.median(seconds[plain]), statistics.median(seconds[fast])


def _noise_program(make_key, num_steps: int):
    params = networks.init_mlp(jax.random.key(0), 2, (50, 50, 2))
    num_gaussians = sum(leaf.size for leaf in jax.tree.leaves(params))

    @jax.jit
    def run(params):
        noise = optax.add_noise(1e-3, 0.0, make_key(jax.random.key(1)))

        def step(state, _):
            updates, state = noise.update(params, state)
            # Sum every draw, so that the compiler cannot skip any of them.
            return state, sum(leaf.sum() for leaf in jax.tree.leaves(updates))

        return jax.lax.scan(step, noise.init(params), length=num_steps)[1]

    return (lambda: run(params)), num_gaussians


def _chain_program(num_steps: int, fast: bool):
    problem = next(p for p in leaderboard.get_sweep("paper").values() if p.num_train == 100)
    _, data = leaderboard.load_problem(problem)
    prior = leaderboard.prior_knowledge(problem)
    config = sgmcmc.SGMCMCConfig(num_steps=num_steps, burn_in=num_steps // 2,
                                 snapshot_every=num_steps // 10)
    patch = (mock.patch.object(_threefry, "fast_key", _threefry.fast_key) if fast
             else mock.patch.object(_threefry, "fast_key", lambda key: key))
    with patch:  # traced and compiled while the patch holds
        compiled = jax.jit(sgmcmc.make_sgmcmc_agent(config, base.Shapes.of(problem)).train).lower(
            jax.random.key(0), data, prior).compile()
    return lambda: compiled(jax.random.key(0), data, prior)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}, jax {jax.__version__} on "
          f"{jax.devices()[0].platform}")
    plain_noise, num_gaussians = _noise_program(lambda key: key, args.steps)
    fast_noise, _ = _noise_program(_threefry.fast_key, args.steps)
    rows = [
        (f"noise ({num_gaussians} Gaussians/step)", plain_noise, fast_noise),
        ("chain (whole SG-MCMC step)", _chain_program(args.steps, fast=False),
         _chain_program(args.steps, fast=True)),
    ]
    print(f"{args.steps} steps, median of {args.repeats}")
    print(f"{'program':<36}{'threefry s':>11}{'unrolled s':>11}{'speed-up':>10}")
    timings = {}
    for name, plain, fast in rows:
        plain_s, fast_s = _median_seconds(plain, fast, args.repeats)
        timings[name] = {"threefry_s": round(plain_s, 4), "unrolled_s": round(fast_s, 4),
                         "speed_up": round(plain_s / fast_s, 2)}
        print(f"{name:<36}{plain_s:>11.3f}{fast_s:>11.3f}{plain_s / fast_s:>9.1f}x")
    record = {
        "benchmark": "threefry", "steps": args.steps, "repeats": args.repeats,
        "timings": timings, "load_average": round(os.getloadavg()[0], 2),
        "command": f"PYTHONPATH=. python benchmarks/threefry.py --steps {args.steps} "
                   f"--repeats {args.repeats}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.machine(), "cpus": os.cpu_count(),
                    "platform": jax.devices()[0].platform},
        "versions": {"jax": jax.__version__, "python": platform.python_version()},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
