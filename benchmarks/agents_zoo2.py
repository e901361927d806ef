"""Speed of the dropout, bbb and sgmcmc agents on the paper's problems.

Not a test. For each default agent and each T it reports the seconds per
problem to train and to evaluate (tau = 1 and tau = 100), with compilation
timed apart, the share of the time spent in the tau = 100 evaluation, and how
close that evaluation's forward passes run to the machine's matmul
throughput (a plain ``jnp`` matmul is timed for comparison).

The tau = 100 evaluation is a fixed amount of work: M = 1000 sampled networks
(fewer distinct ones for an ensemble: 400 sgmcmc snapshots) x N = 1000 test
samples x tau = 100 inputs, each a forward pass of the agent's MLP.

Columns: seconds per problem (train, eval at tau = 1 and 100, their total),
the tau = 100 share of that total, the tau = 100 GFLOP/s (its forward-pass
FLOPs over its time) and their ratio to the 2048^3 matmul ("of mm"), the
compilation time of the three programs, and the KLs as a sanity check.

Timings on a shared machine are noisy: each number is the best of
``--repeats`` runs of an already compiled program, and the load average is
printed.

Usage:
  PYTHONPATH=. python benchmarks/agents_zoo2.py --sgmcmc-steps 20000   # 1 problem per T
  PYTHONPATH=. python benchmarks/agents_zoo2.py --agents sgmcmc --num-train 1000  # full chain
  PYTHONPATH=. python benchmarks/agents_zoo2.py --agents sgmcmc --batch 30 \
      --sgmcmc-steps 4000 --train-only            # 30 problems in one vmap, as the runner does
  PYTHONPATH=. python benchmarks/agents_zoo2.py --run-agent   # also time run_agent end to end
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import time

import jax
import jax.numpy as jnp

from neural_testbed import agents, base, evaluation, leaderboard


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best


def matmul_gflops(repeats: int) -> dict[str, float]:
    """GFLOP/s of plain float32 matmuls: a large square one, and the evaluator's
    shape (2^18 rows through a 50 x 50 layer, the hidden layer of the MLP)."""
    out = {}
    for name, (n, k, m) in {"2048^3": (2048, 2048, 2048), "262144x50x50": (262144, 50, 50)}.items():
        a = jax.random.normal(jax.random.key(0), (n, k))
        b = jax.random.normal(jax.random.key(1), (k, m))
        f = jax.jit(jnp.matmul)
        f(a, b).block_until_ready()
        out[name] = 2 * n * k * m / _best_of(lambda: f(a, b), repeats) / 1e9
    return out


def _problems(num_train: int, count: int) -> list[leaderboard.Problem]:
    group = [p for p in leaderboard.get_sweep("paper").values() if p.num_train == num_train]
    return group[:count]


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _forward_flops(hidden: tuple[int, ...], input_dim: int, num_classes: int) -> int:
    sizes = (input_dim, *hidden, num_classes)
    return sum(2 * a * b for a, b in zip(sizes[:-1], sizes[1:]))


def time_agent(name: str, config, num_train: int, batch: int, repeats: int,
               train_only: bool = False) -> dict:
    """Per-problem seconds of each phase for ``batch`` problems trained together."""
    spec = agents.get_agent(name)
    problems = _problems(num_train, batch)
    agent = spec.make(config, base.Shapes.of(problems[0]))
    loaded = [leaderboard.load_problem(p) for p in problems]
    envs = _stack([env for env, _ in loaded])
    data = _stack([d for _, d in loaded])
    t = problems[0]
    priors = base.PriorKnowledge(
        input_dim=t.input_dim, num_classes=t.num_classes, env_hidden=t.env_hidden,
        temperature=jnp.array([p.temperature for p in problems]),
    )
    keys = jax.random.split(jax.random.key(0), batch)

    train = jax.jit(jax.vmap(agent.train))
    start = time.perf_counter()
    compiled_train = train.lower(keys, data, priors).compile()
    result = {"train_compile": time.perf_counter() - start}
    states = jax.block_until_ready(compiled_train(keys, data, priors))
    result["train"] = _best_of(lambda: compiled_train(keys, data, priors), repeats) / batch
    if train_only:
        return result

    for tau in t.taus:
        tests = jax.vmap(lambda k, e, tau=tau: t.sample_test(k, e, tau))(keys, envs)
        evaluate_one = evaluation.make_evaluator(agent.enn, tau, t.num_classes, t.num_test,
                                                 t.num_samples)
        evaluate = jax.jit(lambda k, s, e, f=evaluate_one: jax.lax.map(lambda a: f(*a), (k, s, e)))
        start = time.perf_counter()
        compiled = evaluate.lower(keys, states, tests).compile()
        result[f"eval{tau}_compile"] = time.perf_counter() - start
        ev = compiled(keys, states, tests)
        result[f"kl{tau}"] = float(jnp.mean(ev.kl))
        result[f"eval{tau}"] = _best_of(lambda: compiled(keys, states, tests), repeats) / batch

    members = agent.enn.num_indices or t.num_samples
    members = min(members, t.num_samples)
    hidden = getattr(config, "hidden", (50, 50))
    result["tau100_gflop"] = (
        members * t.num_test * 100 * _forward_flops(hidden, t.input_dim, t.num_classes) / 1e9
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["dropout", "bbb", "sgmcmc"])
    parser.add_argument("--num-train", nargs="+", type=int, default=[10, 1000])
    parser.add_argument("--batch", type=int, default=1, help="problems trained together (vmap)")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many timed runs")
    parser.add_argument("--sgmcmc-steps", type=int, default=None,
                        help="shorten the sgmcmc chain to this many steps, keeping its 400 "
                             "snapshots (so the evaluation is the real one); the train time is "
                             "then also extrapolated linearly to the default length")
    parser.add_argument("--train-only", action="store_true",
                        help="time training only (evaluation runs problem by problem anyway, "
                             "so its time per problem does not depend on --batch)")
    parser.add_argument("--run-agent", action="store_true",
                        help="also time leaderboard.run_agent(problems_per_batch=1) on one problem per T, "
                             "compilation included")
    args = parser.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.1f} (other jobs share the machine)")
    mm = matmul_gflops(args.repeats)
    print("matmul throughput: " + ", ".join(f"{k}: {v:.1f} GFLOP/s" for k, v in mm.items()))
    peak = max(mm.values())

    header = (f"{'agent':<8}{'T':>6}{'batch':>6}{'train s':>9}{'eval1 s':>9}{'eval100 s':>10}"
              f"{'total s':>9}{'tau100 %':>9}{'GFLOP/s':>9}{'of mm':>7}{'compile s':>10}"
              f"{'kl1':>8}{'kl100':>8}")
    print(header)
    for name in args.agents:
        config = agents.get_agent(name).default
        scale = 1.0
        if name == "sgmcmc" and args.sgmcmc_steps:
            # same number of snapshots, 20% burn-in: per-step cost and evaluation unchanged
            snapshot_every = max(1, (args.sgmcmc_steps * 4 // 5) // config.num_snapshots)
            num_steps = args.sgmcmc_steps // snapshot_every * snapshot_every
            scale = config.num_steps / num_steps
            config = dataclasses.replace(
                config, num_steps=num_steps, snapshot_every=snapshot_every,
                burn_in=num_steps - config.num_snapshots * snapshot_every)
        for num_train in args.num_train:
            r = time_agent(name, config, num_train, args.batch, args.repeats, args.train_only)
            if args.train_only:
                print(f"{name:<8}{num_train:>6}{args.batch:>6}{r['train']:>9.2f}"
                      f"{'':>55}{r['train_compile']:>10.1f}")
                if scale != 1.0:
                    print(f"{'':<20}extrapolated to {config.num_steps * scale:,.0f} steps: train "
                          f"{r['train'] * scale:.1f} s per problem")
                continue
            total = r["train"] + r["eval1"] + r["eval100"]
            compile_s = r["train_compile"] + r["eval1_compile"] + r["eval100_compile"]
            gflops = r["tau100_gflop"] / r["eval100"]
            print(f"{name:<8}{num_train:>6}{args.batch:>6}{r['train']:>9.2f}{r['eval1']:>9.2f}"
                  f"{r['eval100']:>10.2f}{total:>9.2f}{100 * r['eval100'] / total:>8.0f}%"
                  f"{gflops:>9.1f}{gflops / peak:>7.2f}{compile_s:>10.1f}"
                  f"{r['kl1']:>8.3f}{r['kl100']:>8.3f}")
            if scale != 1.0:
                train_full = r["train"] * scale
                print(f"{'':<20}extrapolated to {config.num_steps * scale:,.0f} steps: train "
                      f"{train_full:.1f} s, total {train_full + r['eval1'] + r['eval100']:.1f} s "
                      "per problem")

    if args.run_agent:
        for name in args.agents:
            spec = agents.get_agent(name)
            for num_train in args.num_train:
                problem = _problems(num_train, 1)
                start = time.perf_counter()
                build = functools.partial(spec.make, spec.default)
                rows = leaderboard.run_agent(build, problem, name,
                                             problems_per_batch=1, progress=False)
                wall = time.perf_counter() - start
                print(f"run_agent {name} T={num_train}: {wall:.1f} s wall for one problem "
                      f"(compilation included); rows: "
                      + ", ".join(f"tau={r.tau} kl={r.kl:.3f} {r.status}" for r in rows))


if __name__ == "__main__":
    main()
