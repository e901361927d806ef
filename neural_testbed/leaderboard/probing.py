"""Grover et al.'s probes of one agent over regression problems, and their summary.

Per problem, the agent is trained as `run` trains it (the same agent key),
its belief samples are drawn at the T training inputs and the problem's pool
of P test inputs, and every probe of :mod:`neural_testbed.diagnostics.probes`
is computed. For uncertainty-reduction@k the agent is trained again, with the
same key, on the T pairs plus k more: the first k of one random order of the
pool's inputs (so D'_1, D'_2, ... are nested), with targets f plus fresh noise.
For an agent that meta-learns from its key and prior and conditions on the
data (a neural process), training again with the same key *is* conditioning.
The added pairs and the belief draws come from the problem's test key, not
the agent seed: every agent sees the same D'_k, and the belief before and
after shares its draws, so the difference is not blurred by them.

Summaries are means over the problems of a stratum (d, noise variance, T),
with the standard error of the mean over those problems (independent draws).

Where this differs from the paper (docs/differences.md): test inputs are the
pool, N(0, I_d), not a uniform domain; D'_k is one nested draw per problem,
not independent draws per k (the mean over problems is the expectation over
D and D'_k); the paper's mean |change| is inflated by the Monte Carlo noise
of s where the true change is small (the exact posterior at d = 10, T = 100,
k = 1: 0.0034 against a signed 0.0008 from M = 1000 samples), so the signed
mean is reported beside it; the MSE is the mean's squared error of f at the
pool, not of noisy targets (in expectation those add the noise variance).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from neural_testbed import base
from neural_testbed.agents import registry
from neural_testbed.diagnostics import probes
from neural_testbed.run.options import MAX_AGENT_SEED

__all__ = ["COLUMNS", "PROBES", "PROBLEM_COLUMNS", "ProbeSettings", "ProblemProbes", "added_data",
           "check_problems", "describe", "format_text", "make_prober", "parameter_labels",
           "probe_keys", "probe_problems", "summarise"]

# Probe names as records carry them, in the order tables show them.
PROBES = ("self_certainty", "mse", "inclusion", "inclusion_expected", "delta",
          "uncertainty_increase", "uncertainty_reduction", "uncertainty_reduction_signed")
COLUMNS = ("d", "noise", "T", "problems", "probe", "at", "mean", "se")
PROBLEM_COLUMNS = ("problem_id", "d", "noise", "T", "seed", "probe", "at", "value")

# fold_in data for the probes' stream of a problem's test key: apart from the taus the
# runner folds in and from the out-of-distribution stream (2**31 - 1).
_PROBE_STREAM = 2**31 - 2
_BELIEF, _ADDED = 0, 1  # fold_in data of the probe key's two uses


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """What the probes are computed at."""

    inclusion_ks: tuple[float, ...] = (1.0, 2.0, 3.0)  # k of inclusion@k, > 0
    reduction_ks: tuple[int, ...] = (1, 2, 5, 10)  # pairs added for uncertainty-reduction@k
    num_bins: int = 5  # equal-count bins of the distance for uncertainty-increase@delta
    num_samples: int = 1000  # M, belief samples (draws of the agent's index)
    agent_seed: int = 0  # folded into each problem's agent key, as `run --seed`

    def __post_init__(self):
        ks = self.inclusion_ks
        if (not ks or any(isinstance(k, bool) or not isinstance(k, (int, float))
                          or not 0 < k < math.inf for k in ks) or len(set(ks)) != len(ks)):
            raise ValueError(f"inclusion k (--inclusion-k) must be one or more distinct finite "
                             f"numbers > 0, got {ks!r}")
        ks = self.reduction_ks
        if not ks or any(not _is_int(k) or k < 1 for k in ks) or len(set(ks)) != len(ks):
            raise ValueError(f"uncertainty-reduction k (--reduction-k) must be one or more "
                             f"distinct integers >= 1, got {ks!r}")
        if not _is_int(self.num_bins) or self.num_bins < 1:
            raise ValueError(f"number of bins (--bins) must be an integer >= 1, "
                             f"got {self.num_bins!r}")
        if not _is_int(self.num_samples) or self.num_samples < 1:
            raise ValueError(f"number of belief samples (--num-samples) must be an integer >= 1, "
                             f"got {self.num_samples!r}")
        if not _is_int(self.agent_seed) or not 0 <= self.agent_seed <= MAX_AGENT_SEED:
            raise ValueError(f"agent seed (--seed) must be an integer from 0 to {MAX_AGENT_SEED}, "
                             f"got {self.agent_seed!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ProblemProbes(NamedTuple):
    """Every probe of one agent on one problem."""

    self_certainty: jax.Array  # scalar: mean over training inputs of (s - sigma)^2
    mse: jax.Array  # scalar: mean over the pool of (f - m)^2, m the belief's mean
    inclusion: jax.Array  # [len(inclusion_ks)]
    inclusion_expected: jax.Array  # [len(inclusion_ks)], under the agent's own belief
    delta: jax.Array  # [num_bins] mean distance to the nearest training input per bin
    uncertainty_increase: jax.Array  # [num_bins]
    uncertainty_reduction: jax.Array  # [len(reduction_ks)] mean |s(D + D'_k) - s(D)|
    uncertainty_reduction_signed: jax.Array  # [len(reduction_ks)] mean s(D) - s(D + D'_k)
    distance: jax.Array  # [P] each pool input's distance to its nearest training input
    variance: jax.Array  # [P] the predictive variance of a target there, s^2


def check_problems(agent_name: str, problems: Sequence[base.Problem],
                   settings: ProbeSettings) -> None:
    """Refuses, in one line and before any work, what cannot be probed: problems that are
    not regression, an agent not built for regression, k or bins beyond the pool."""
    if not problems:
        raise ValueError("no problems to probe")
    other = sorted({p.target for p in problems} - {"regression"})
    if other:
        raise ValueError(f"the probes are for regression problems; these are {other[0]} "
                         "problems (use --sweep regression-quick, regression or regression-wang)")
    spec = registry.get_agent(agent_name)
    if "regression" not in spec.targets:
        able = sorted(name for name, s in registry.AGENTS.items() if "regression" in s.targets)
        raise ValueError(f"agent {agent_name!r} is not built for regression problems (it "
                         f"handles {', '.join(spec.targets)}); agents for regression: "
                         f"{', '.join(able)}")
    pool = min(p.num_pool for p in problems)
    if max(settings.reduction_ks) > pool:
        raise ValueError(f"uncertainty-reduction k (--reduction-k) must be at most the pool "
                         f"size ({pool}), got {max(settings.reduction_ks)}")
    if settings.num_bins > pool:
        raise ValueError(f"number of bins (--bins) must be at most the pool size ({pool}), "
                         f"got {settings.num_bins}")


def probe_keys(problem: base.Problem, agent_seed: int) -> tuple[jax.Array, jax.Array]:
    """The problem's ``(agent key, probe key)``: the agent key `run` trains with, and
    the key of the added pairs and belief draws (the same for every agent)."""
    keys = base.problem_keys(problem.key_seed)
    return (jax.random.fold_in(keys.agent, agent_seed),
            jax.random.fold_in(keys.test, _PROBE_STREAM))


def added_data(probe_key: jax.Array, env, num: int) -> base.Data:
    """The pairs a problem's probe key adds: ``num`` distinct pool inputs in a random
    order, with targets f plus fresh noise; the first k of them are D'_k."""
    index_key, noise_key = jax.random.split(jax.random.fold_in(probe_key, _ADDED))
    index = jax.random.permutation(index_key, env.pool_x.shape[0])[:num]
    noise = jnp.sqrt(env.noise_variance) * jax.random.normal(noise_key, (num,))
    return base.Data(env.pool_x[index], env.pool_f[index] + noise)


def make_prober(agent: base.Agent, settings: ProbeSettings
                ) -> Callable[[jax.Array, jax.Array, base.ProblemInstance], ProblemProbes]:
    """``probe(agent_key, probe_key, instance) -> ProblemProbes``, jitted: compiled once
    per problem shape (and once more for each k's training set)."""
    if not isinstance(agent, base.Agent):
        raise ValueError("the probes train the agent inside JAX; a host agent "
                         f"({type(agent).__name__}) cannot be probed")
    enn = agent.enn

    def probe(agent_key, probe_key, instance):
        data, prior, env = instance
        belief_key = jax.random.fold_in(probe_key, _BELIEF)

        def beliefs(state, x):
            belief = probes.belief_samples(belief_key, enn, state, x, settings.num_samples)
            mean, variance = probes.moments(belief)
            return belief, mean, probes.predictive_std(variance, env.noise_variance)

        state = agent.train(agent_key, data, prior)
        _, _, train_std = beliefs(state, data.x)
        belief, mean, std = beliefs(state, env.pool_x)
        distance, nearest = probes.nearest_training_input(data.x, env.pool_x)
        delta, increase = probes.uncertainty_increase(distance, std, train_std[nearest],
                                                      settings.num_bins)
        added = added_data(probe_key, env, max(settings.reduction_ks))
        reductions = []
        for k in settings.reduction_ks:
            more = base.Data(jnp.concatenate([data.x, added.x[:k]]),
                             jnp.concatenate([data.y, added.y[:k]]))
            state_k = agent.train(agent_key, more, prior)
            reductions.append(probes.uncertainty_reduction(std, beliefs(state_k, env.pool_x)[2]))
        absolute, signed = (jnp.stack(r) for r in zip(*reductions))
        return ProblemProbes(
            self_certainty=probes.self_certainty(train_std, env.noise_variance),
            mse=probes.mean_squared_error(env.pool_f, mean),
            inclusion=probes.inclusion(env.pool_f, mean, std, settings.inclusion_ks),
            inclusion_expected=probes.belief_inclusion(belief, mean, std, settings.inclusion_ks),
            delta=delta, uncertainty_increase=increase, uncertainty_reduction=absolute,
            uncertainty_reduction_signed=signed, distance=distance, variance=std**2)

    return jax.jit(probe)


def probe_problems(build: base.AgentBuilder, problems: Sequence[base.Problem],
                   settings: ProbeSettings = ProbeSettings(), progress: bool = True,
                   desc: str = "probe") -> Iterator[tuple[base.Problem, ProblemProbes]]:
    """Yields each problem with its probes (NumPy arrays), one problem after another, with
    a progress bar on stderr; ``build`` (``shapes -> agent``) makes the agent of each
    problem shape.

    Example:
      >>> from neural_testbed import agents, leaderboard
      >>> problems = list(leaderboard.get_sweep("regression-quick").values())
      >>> build = functools.partial(agents.make_oracle_gp_agent, agents.OracleGPConfig())
      >>> results = dict(probe_problems(build, problems))
      >>> print(format_text(summarise(results, ProbeSettings())))
    """
    probers: dict[base.Shapes, Callable] = {}
    problems = list(problems)
    with tqdm(problems, unit="problem", disable=not progress, file=sys.stderr, desc=desc,
              dynamic_ncols=True) as bar:
        for problem in bar:
            shapes = base.Shapes.of(problem)
            if shapes not in probers:
                probers[shapes] = make_prober(build(shapes), settings)
            agent_key, probe_key = probe_keys(problem, settings.agent_seed)
            result = probers[shapes](agent_key, probe_key, problem.instance())
            yield problem, ProblemProbes(*(np.asarray(v) for v in jax.device_get(result)))


def parameter_labels(settings: ProbeSettings) -> dict[str, list[str]]:
    """The ``at`` label of each value of each probe."""
    incl = [f"k={k:g}" for k in settings.inclusion_ks]
    bins = [f"bin={b + 1}/{settings.num_bins}" for b in range(settings.num_bins)]
    red = [f"k={k}" for k in settings.reduction_ks]
    return {"self_certainty": [""], "mse": [""], "inclusion": incl, "inclusion_expected": incl,
            "delta": bins, "uncertainty_increase": bins, "uncertainty_reduction": red,
            "uncertainty_reduction_signed": red}


def _values(result: ProblemProbes, name: str) -> np.ndarray:
    return np.atleast_1d(np.asarray(getattr(result, name), dtype=float))


def summarise(results: Mapping[base.Problem, ProblemProbes] | Sequence[tuple],
              settings: ProbeSettings, per_problem: bool = False) -> list[dict[str, Any]]:
    """Long-format records: one per (stratum, probe, parameter) with the mean over the
    stratum's problems and its standard error (``nan`` from one problem), or with
    ``per_problem`` one per (problem, probe, parameter)."""
    items = list(results.items() if isinstance(results, Mapping) else results)
    labels = parameter_labels(settings)
    records = []
    if per_problem:
        for problem, result in items:
            where = {"problem_id": problem.problem_id, "d": problem.input_dim,
                     "noise": problem.noise_variance, "T": problem.num_train,
                     "seed": problem.seed}
            for name in PROBES:
                for at, value in zip(labels[name], _values(result, name)):
                    records.append({**where, "probe": name, "at": at, "value": float(value)})
        return records
    strata: dict[tuple, list[ProblemProbes]] = {}
    for problem, result in items:
        key = (problem.input_dim, problem.noise_variance, problem.num_train)
        strata.setdefault(key, []).append(result)
    for (d, noise, num_train), group in sorted(strata.items()):
        for name in PROBES:
            values = np.stack([_values(r, name) for r in group])  # [problems, parameters]
            means = values.mean(axis=0)
            ses = (values.std(axis=0, ddof=1) / math.sqrt(len(group)) if len(group) > 1
                   else np.full_like(means, np.nan))
            for at, mean, se in zip(labels[name], means, ses):
                records.append({"d": d, "noise": noise, "T": num_train, "problems": len(group),
                                "probe": name, "at": at, "mean": float(mean), "se": float(se)})
    return records


_TITLES = {"self_certainty": "self-certainty", "mse": "MSE of the mean",
           "inclusion": "inclusion@k",
           "uncertainty_increase": "uncertainty-increase@delta",
           "uncertainty_reduction": "uncertainty-reduction@k"}


def format_text(records: Sequence[Mapping[str, Any]]) -> str:
    """A block per stratum (or problem) of :func:`summarise`'s records, one line per probe:
    ``value ± se``, the MSE of the mean below self-certainty, inclusion with the agent's own expectation in brackets, each bin's
    delta before its uncertainty-increase, uncertainty-reduction with its signed mean."""
    blocks: dict[tuple, dict[tuple[str, str], Mapping[str, Any]]] = {}
    for r in records:
        where = (r["problem_id"],) if "problem_id" in r else ()
        blocks.setdefault(where + (r["d"], r["noise"], r["T"], r.get("problems")),
                          {})[r["probe"], r["at"]] = r
    lines = []
    for where, cells in blocks.items():
        *pid, d, noise, num_train, count = where
        head = f"{pid[0]}: " if pid else ""
        lines.append(f"{head}d = {d}, noise variance {noise:g}, T = {num_train}"
                     + (f" ({count} problems, mean ± se)" if count else ""))

        def value(probe, at):
            r = cells[probe, at]
            if "value" in r:
                return f"{r['value']:.4g}"
            return f"{r['mean']:.4g}" + ("" if math.isnan(r["se"]) else f" ± {r['se']:.2g}")

        ats = [at for probe, at in cells if probe == "inclusion"]
        lines.append(f"  {_TITLES['self_certainty']:<28}{value('self_certainty', '')}")
        lines.append(f"  {_TITLES['mse']:<28}{value('mse', '')}")
        lines.append(f"  {_TITLES['inclusion']:<28}" + "   ".join(
            f"{at}: {value('inclusion', at)} (expected {value('inclusion_expected', at)})"
            for at in ats))
        ats = [at for probe, at in cells if probe == "delta"]
        lines.append(f"  {_TITLES['uncertainty_increase']:<28}" + "   ".join(
            f"delta={value('delta', at)}: {value('uncertainty_increase', at)}" for at in ats))
        ats = [at for probe, at in cells if probe == "uncertainty_reduction"]
        lines.append(f"  {_TITLES['uncertainty_reduction']:<28}" + "   ".join(
            f"{at}: {value('uncertainty_reduction', at)} (signed "
            f"{value('uncertainty_reduction_signed', at)})" for at in ats))
    return "\n".join(lines)


def describe(settings: ProbeSettings) -> str:
    """The definitions behind a table of :func:`summarise`, in a few lines."""
    return ("s(x) = sqrt(variance of f over the agent's belief + noise variance), from "
            f"M = {settings.num_samples} belief samples; test inputs: the problem's pool\n"
            "self-certainty: mean over the T training inputs of (s - sigma)^2; MSE: mean over "
            "test inputs of (f - mean)^2 (of noisy targets: plus the noise variance); "
            "inclusion@k: fraction of test inputs with |f - mean| < k s (expected: the same "
            "under the agent's own belief)\n"
            f"uncertainty-increase: test inputs in {settings.num_bins} equal-count bins of the "
            "distance to the nearest training input; delta = a bin's mean distance, UI = the "
            "fraction whose s exceeds s at that training input\n"
            "uncertainty-reduction@k: mean |s(D + k pairs) - s(D)| after training again "
            "with the same key on k more pool inputs (targets f + fresh noise); signed: mean "
            "s(D) - s(D + k pairs)")
