"""Problem sweeps with stable ids.

A sweep maps problem ids to problems (see the problem protocol in
:mod:`neural_testbed.base`). Every problem draws its environment, training
data, test data and the agent's key from a seed that is a hash of its
definition, so the same problem gives the same numbers on every machine and in
every sweep, no two problems of a sweep share a draw, and a problem that two
sweeps define alike (the paper's and the reference's current 2-d grids share
every (T, temperature, seed)) is the same draw in both, so their rows pair.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Mapping

import jax

from neural_testbed import base
from neural_testbed.generative import (
    gp_regression,
    mlp_classification,
    real_classification,
    real_regression,
)

__all__ = [
    "REAL_DATASETS",
    "REAL_REGRESSION_DATASETS",
    "DESCRIPTIONS",
    "SWEEPS",
    "Problem",
    "builtin_hashes",
    "find_problems",
    "get_sweep",
    "load_problem",
    "prior_knowledge",
]

Problem = mlp_classification.MLPClassificationProblem


def load_problem(problem: base.Problem) -> tuple[object, base.Data]:
    """The problem's environment and its T training pairs.

    Example:
      >>> problem = get_sweep("paper")["classification_2d/17"]
      >>> env, data = load_problem(problem)
    """
    instance = problem.instance()
    return instance.env, instance.data


def prior_knowledge(problem: base.Problem) -> base.PriorKnowledge:
    """What the agent is told about ``problem`` (with a Python float temperature)."""
    prior = problem.instance().prior
    return prior.replace(temperature=float(jax.device_get(prior.temperature)))


_PAPER_TEMPERATURES = (0.01, 0.1, 0.5)
_PAPER_NUM_TRAIN = (1, 3, 10, 30, 100, 300, 1000)
_PAPER_SEEDS = tuple(range(10))


def _paper_sweep() -> dict[str, Problem]:
    """The paper's 2-d sweep: 3 temperatures x 7 T x 10 seeds = 210 problems."""
    grid = itertools.product(_PAPER_TEMPERATURES, _PAPER_NUM_TRAIN, _PAPER_SEEDS)
    problems = {}
    for i, (temperature, num_train, seed) in enumerate(grid):
        problem_id = f"classification_2d/{i}"
        problems[problem_id] = Problem(problem_id, temperature, num_train, seed)
    return problems


def _quick_sweep(paper: Mapping[str, Problem]) -> dict[str, Problem]:
    """A subset of ``paper`` (same ids, same numbers): every temperature,
    T in {10, 100, 1000}, seeds {0, 1}: 18 problems."""
    return {
        pid: p for pid, p in paper.items() if p.num_train in (10, 100, 1000) and p.seed < 2
    }


def _smoke_sweep(paper: Mapping[str, Problem]) -> dict[str, Problem]:
    """The smallest useful subset of ``paper`` for checks and tests: temperature 0.1,
    T in {10, 100}, seeds {0, 1}: 4 problems."""
    return {
        pid: p for pid, p in paper.items()
        if p.temperature == 0.1 and p.num_train in (10, 100) and p.seed < 2
    }


# The reference's current leaderboard sweep (google-deepmind/neural_testbed's last commit,
# f2090d1): d in {2, 10, 100}, T = ratio x d, dyadic test inputs, tau in {1, 10}.
_CLASSIFICATION_INPUT_DIMS = (2, 10, 100)
_CLASSIFICATION_RATIOS = (1, 10, 100, 1000)
_CLASSIFICATION_SEEDS = tuple(range(5))
_CURRENT_PROTOCOL = {"taus": (1, 10), "kappa": 2, "max_monte_carlo_tau": 10}


def _classification_sweep() -> dict[str, Problem]:
    """The reference's current sweep: d in {2, 10, 100} x T = {1, 10, 100, 1000} x d x
    temperature in {0.01, 0.1, 0.5} x 5 seeds = 180 problems, in its order, each
    evaluated at tau = 1 and tau = 10 on dyadic test inputs (kappa = 2). The
    reference numbers 360 problems: its classification/i (tau 1) and
    classification/(180 + i) (tau 10) share their seed, so their environment and
    training data: they are our classification/i at its two taus."""
    grid = itertools.product(_CLASSIFICATION_INPUT_DIMS, _CLASSIFICATION_RATIOS,
                             _PAPER_TEMPERATURES, _CLASSIFICATION_SEEDS)
    problems = {}
    for i, (input_dim, ratio, temperature, seed) in enumerate(grid):
        problem_id = f"classification/{i}"
        problems[problem_id] = Problem(problem_id, temperature, ratio * input_dim, seed,
                                       input_dim=input_dim, **_CURRENT_PROTOCOL)
    return problems


def _classification_quick_sweep(full: Mapping[str, Problem]) -> dict[str, Problem]:
    """A subset of ``classification`` (same ids): every d, temperature 0.1, T in {1, 10} x
    d, seeds {0, 1}: 12 problems."""
    return {pid: p for pid, p in full.items()
            if p.temperature == 0.1 and p.num_train in (p.input_dim, 10 * p.input_dim)
            and p.seed < 2}


# The reference's current 2-d sweep (f2090d1's classification_2d): the paper's grid in the
# reference's order (T, temperature, seed), i.i.d. test inputs, tau in {1, 10}.
_CLASSIFICATION_2D_PROTOCOL = {"taus": (1, 10), "max_monte_carlo_tau": 10}


def _classification_2d_current_sweep() -> dict[str, Problem]:
    """The reference's current 2-d sweep: T in {1, ..., 1000} x temperature x 10 seeds =
    210 problems in its order, each at tau = 1 and tau = 10 on i.i.d. test inputs. Its
    classification_2d/i (tau 1) and classification_2d/(210 + i) (tau 10) are our
    classification_2d_current/i; the ids are not the paper sweep's classification_2d/i,
    whose order (temperature, T, seed) and taus (1, 100) are the 2021 paper's."""
    grid = itertools.product(_PAPER_NUM_TRAIN, _PAPER_TEMPERATURES, _PAPER_SEEDS)
    problems = {}
    for i, (num_train, temperature, seed) in enumerate(grid):
        problem_id = f"classification_2d_current/{i}"
        problems[problem_id] = Problem(problem_id, temperature, num_train, seed,
                                       **_CLASSIFICATION_2D_PROTOCOL)
    return problems


REAL_DATASETS = ("iris", "wine", "breast_cancer", "digits")


def _real_sweep() -> dict[str, base.Problem]:
    """Section 5's protocol on the datasets scikit-learn ships: T in {1, 10, 100, 1000,
    full} where the training split allows, 10 seeds each (170 problems)."""
    problems = {}
    for name in REAL_DATASETS:
        problems.update(real_classification.dataset_problems(name))
    return problems


def _real_dyadic_sweep() -> dict[str, base.Problem]:
    """``real``'s problems (the same training rows) tested as uncertainty-baselines tests
    joint predictions, enn's polyadic NLL: tau in {1, 10}, each tau-sample's rows drawn
    from kappa = 2 anchor rows of the test split. Ids ``<dataset>_dyadic/i``."""
    problems = {}
    for name in REAL_DATASETS:
        problems.update(real_classification.dataset_problems(
            name, id_prefix=f"{name}_dyadic", **_CURRENT_PROTOCOL))
    return problems


def _real_quick_sweep(real: Mapping[str, base.Problem]) -> dict[str, base.Problem]:
    """A subset of ``real`` (same ids): T in {10, full}, seeds {0, 1}: 16 problems."""
    return {pid: p for pid, p in real.items()
            if (p.num_train == 10 or p.num_train == p.num_train_split) and p.seed < 2}


_REGRESSION_INPUT_DIMS = (1, 10, 100)
_REGRESSION_NOISE_VARIANCES = (0.01, 0.1)
_REGRESSION_RATIOS = (1, 3, 10)  # T = ratio x d


def _regression_sweep() -> dict[str, base.Problem]:
    """GP regression: d in {1, 10, 100} x noise variance {0.01, 0.1} x T = {1, 3, 10} x d
    x 10 seeds (180 problems), a pool of 1000 test inputs."""
    grid = itertools.product(_REGRESSION_INPUT_DIMS, _REGRESSION_NOISE_VARIANCES,
                             _REGRESSION_RATIOS, _PAPER_SEEDS)
    problems = {}
    for i, (d, noise, ratio, seed) in enumerate(grid):
        problem_id = f"regression/{i}"
        problems[problem_id] = gp_regression.GPRegressionProblem(
            problem_id, input_dim=d, num_train=ratio * d, seed=seed, noise_variance=noise)
    return problems


# The reference's current regression sweep (f2090d1's regression): d x data ratio x noise
# std x 10 seeds, tau 1, M = 100, N = int(1000 / tau) + 1 test samples, 1000 test inputs.
_REGRESSION_CURRENT_RATIOS = (1, 10, 100)
_REGRESSION_CURRENT_NOISE_VARIANCES = (0.0001, 0.01, 1.0)  # noise std 0.01, 0.1, 1


def _regression_current_sweep() -> dict[str, base.Problem]:
    """The reference's current regression sweep: d in {1, 10, 100} x T = {1, 10, 100} x d
    x noise std in {0.01, 0.1, 1} x 10 seeds = 270 problems in its order, tau = 1,
    M = 100 belief samples, N = 1001 test samples (its ``int(1000 / tau) + 1``). Ids
    ``regression_current/i`` are the reference's regression/i; our ``regression``
    sweep's ids are another grid."""
    grid = itertools.product(_REGRESSION_INPUT_DIMS, _REGRESSION_CURRENT_RATIOS,
                             _REGRESSION_CURRENT_NOISE_VARIANCES, _PAPER_SEEDS)
    problems = {}
    for i, (d, ratio, noise_variance, seed) in enumerate(grid):
        problem_id = f"regression_current/{i}"
        problems[problem_id] = gp_regression.GPRegressionProblem(
            problem_id, input_dim=d, num_train=ratio * d, seed=seed,
            noise_variance=noise_variance, taus=(1,), num_test=1001, num_samples=100)
    return problems


def _regression_quick_sweep(regression: Mapping[str, base.Problem]) -> dict[str, base.Problem]:
    """A subset of ``regression`` (same ids): d in {1, 10}, noise variance 0.01,
    T in {d, 10 d}, seeds {0, 1}: 8 problems."""
    return {pid: p for pid, p in regression.items()
            if p.input_dim in (1, 10) and p.noise_variance == 0.01
            and p.num_train in (p.input_dim, 10 * p.input_dim) and p.seed < 2}


_WANG_INPUT_DIMS = (1, 5, 10)
_WANG_ACTIVE_POOL = 200  # pool inputs after the 500 test inputs, queried by active learning


def _regression_wang_sweep() -> dict[str, base.Problem]:
    """Wang et al.'s synthetic setting: T = 5 d training, 500 test and 200 pool inputs,
    noise variance 0.01, d in {1, 5, 10} (the paper does not say which d), 10 seeds
    (30 problems). The environment's pool holds all 700 inputs: the first 500 are the
    test inputs (the probes: the metacorrelation is over all their pairs; the targets
    of transductive active learning), the last 200 the active-learning pool
    (:mod:`neural_testbed.active.tal`)."""
    grid = itertools.product(_WANG_INPUT_DIMS, _PAPER_SEEDS)
    problems = {}
    for i, (d, seed) in enumerate(grid):
        problem_id = f"regression_wang/{i}"
        problems[problem_id] = gp_regression.GPRegressionProblem(
            problem_id, input_dim=d, num_train=5 * d, seed=seed, noise_variance=0.01,
            num_pool=500 + _WANG_ACTIVE_POOL, num_probes=500)
    return problems


REAL_REGRESSION_DATASETS = tuple(real_regression.BUILT_IN)


def _real_regression_sweep() -> dict[str, base.Problem]:
    """Wang et al.'s UCI protocol on the regression data scikit-learn ships (diabetes):
    10 seeds, each its own 20/20/60 train/test/pool split, scored by the NLL at tau in
    {1, 5} (10 problems). Ids ``diabetes/<seed>``."""
    problems = {}
    for name in REAL_REGRESSION_DATASETS:
        problems.update(real_regression.dataset_problems(name))
    return problems


def _real_regression_quick_sweep(full: Mapping[str, base.Problem]) -> dict[str, base.Problem]:
    """A subset of ``real-regression`` (same ids): seeds {0, 1}, 2 problems."""
    return {pid: p for pid, p in full.items() if p.seed < 2}


class _Sweeps(Mapping):
    """Sweeps by name, each built on first use (the real-data ones read their datasets)."""

    def __init__(self, builders):
        self._builders, self._built = builders, {}

    def __getitem__(self, name: str) -> Mapping[str, base.Problem]:
        if name not in self._built:
            self._built[name] = types.MappingProxyType(self._builders[name](self))
        return self._built[name]

    def __iter__(self):
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


SWEEPS: Mapping[str, Mapping[str, base.Problem]] = _Sweeps({
    "quick": lambda sweeps: _quick_sweep(sweeps["paper"]),
    "paper": lambda sweeps: _paper_sweep(),
    "smoke": lambda sweeps: _smoke_sweep(sweeps["paper"]),
    "classification": lambda sweeps: _classification_sweep(),
    "classification-quick": lambda sweeps: _classification_quick_sweep(
        sweeps["classification"]),
    "classification-2d-current": lambda sweeps: _classification_2d_current_sweep(),
    "real": lambda sweeps: _real_sweep(),
    "real-dyadic": lambda sweeps: _real_dyadic_sweep(),
    "real-quick": lambda sweeps: _real_quick_sweep(sweeps["real"]),
    "regression": lambda sweeps: _regression_sweep(),
    "regression-quick": lambda sweeps: _regression_quick_sweep(sweeps["regression"]),
    "regression-current": lambda sweeps: _regression_current_sweep(),
    "regression-wang": lambda sweeps: _regression_wang_sweep(),
    "real-regression": lambda sweeps: _real_regression_sweep(),
    "real-regression-quick": lambda sweeps: _real_regression_quick_sweep(
        sweeps["real-regression"]),
})


# One line per sweep, for the commands' help and `neural-testbed problems`.
DESCRIPTIONS: Mapping[str, str] = types.MappingProxyType({
    "quick": "18 problems of 'paper', about a minute for mlp",
    "paper": "the 2021 paper's 210 problems: d = 2, i.i.d. test inputs, tau in {1, 100}",
    "smoke": "4 problems of 'paper', for checks",
    "classification": "the reference's current leaderboard: 180 problems, d in {2, 10, 100}, "
                      "dyadic test inputs, tau in {1, 10}",
    "classification-quick": "12 problems of 'classification'",
    "classification-2d-current": "the reference's current 2-d sweep: the paper's 210 "
                                 "problems in its order, tau in {1, 10}",
    "real": "170 problems on scikit-learn's iris, wine, breast cancer and 8x8 digits, "
            "scored by NLL; needs the 'real' extra",
    "real-dyadic": "'real' with enn's polyadic NLL (uncertainty-baselines' joint metric): "
                   "dyadic test rows, tau in {1, 10}",
    "real-quick": "16 problems of 'real'",
    "regression": "180 Gaussian-process regression problems, d in {1, 10, 100}",
    "regression-quick": "8 problems of 'regression'",
    "regression-current": "the reference's current regression sweep: 270 problems, d in "
                          "{1, 10, 100}, noise std in {0.01, 0.1, 1}, M = 100",
    "regression-wang": "Wang et al.'s synthetic setting, 30 problems",
    "real-regression": "Wang et al.'s UCI protocol on scikit-learn's diabetes: 10 seeded "
                       "20/20/60 train/test/pool splits, scored by NLL at tau in {1, 5}; "
                       "needs the 'real' extra",
    "real-regression-quick": "2 problems of 'real-regression'",
})


def get_sweep(name: str) -> Mapping[str, Problem]:
    """The problems of sweep ``name``, keyed by problem id."""
    try:
        return SWEEPS[name]
    except KeyError:
        raise ValueError(f"unknown sweep {name!r}; allowed: {', '.join(SWEEPS)}") from None


def find_problems(problem_ids) -> dict[str, base.Problem]:
    """The built-in problems of these ids, from whichever sweeps hold them (an id two
    sweeps hold is the same problem in both); raises ValueError naming an unknown id."""
    found: dict[str, base.Problem] = {}
    wanted = set(problem_ids)
    for name in SWEEPS:
        prefixes = {pid.split("/")[0] for pid in wanted - set(found)}
        if not prefixes:
            break
        if name.startswith("real") and not prefixes & _REAL_PREFIXES:
            continue  # a real-data sweep reads its datasets: only where an id may be there
        sweep = SWEEPS[name]
        found.update({pid: sweep[pid] for pid in wanted - set(found) if pid in sweep})
    unknown = [pid for pid in problem_ids if pid not in found]
    if unknown:
        raise ValueError(f"--problems: no built-in sweep has a problem {unknown[0]!r}; "
                         "`neural-testbed problems --sweep S` lists a sweep's ids")
    return {pid: found[pid] for pid in problem_ids}


_REAL_PREFIXES = {*REAL_DATASETS, *(f"{name}_dyadic" for name in REAL_DATASETS),
                  *REAL_REGRESSION_DATASETS}


def builtin_hashes() -> dict[str, str]:
    """Each built-in problem id's :func:`base.definition_hash` today, for rows a store
    wrote before it recorded the hash (schema 3 and older): those rows were computed on
    today's definitions of these ids (definitions that changed since bumped the schema).
    An id two sweeps define differently is left out, as are the real-data sweeps' where
    scikit-learn is not installed: their old rows then match no problem."""
    hashes: dict[str, set[str]] = {}
    for name in SWEEPS:
        try:
            sweep = SWEEPS[name]
        except ValueError:  # a real-data sweep without scikit-learn
            continue
        for pid, problem in sweep.items():
            hashes.setdefault(pid, set()).add(base.definition_hash(problem))
    return {pid: next(iter(found)) for pid, found in hashes.items() if len(found) == 1}
