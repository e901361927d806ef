"""Real-data regression problems: Wang et al.'s UCI protocol on data that ships offline.

A dataset is every row (inputs and a real target) of scikit-learn's diabetes
data (the only real regression dataset scikit-learn ships large enough for the
protocol), or of a user's file: a ``.csv`` whose ``target_column`` is the
target and whose other columns are numeric features, or a ``.npz`` with an
array ``x [n, d]`` and an array of targets named ``target_column``. Every check
of the file happens here, with one line naming what is wrong, before any work.

The protocol (Wang et al., section 5.1): each seed splits the rows at random
into 20% training rows, 20% test rows and 60% pool rows (the candidates of
transductive active learning), ten seeds. Inputs and targets are standardised
with the mean and standard deviation of the seed's training rows (the usual UCI
protocol, Hernandez-Lobato and Adams, 2015; the paper does not state its own); a
constant feature is centred only. Numbers are in the units of
the standardised target.

The row's number is the negative log-likelihood of the agent's joint
prediction (``metric = "nll"``) of tau test targets, for tau = 1 (the marginal
log-likelihood) and tau = 5 (the paper's random batches of 5 test points,
Appendix E.1); each tau-sample is tau distinct test rows, N = 1000 of them drawn
afresh. As on every regression problem the agent's belief is over f and the
evaluator adds Gaussian noise of the problem's noise variance, which is told
to the agent. Real data has no known noise: the noise variance is that of a
Gaussian process with a squared-exponential ARD kernel whose hyperparameters are
fitted by maximum marginal likelihood to the seed's training and pool rows
(never its test rows; the first ``MAX_FIT_ROWS`` of them on a large dataset).
That fitted process is also transductive active learning's prediction model, as
the paper fits its 'Oracle' GP to the union of training and pool sets (with a
neural kernel network kernel, not implemented here). XLL and XLLR are computed across agents by ``neural-testbed xll`` from the
predictives each row stores at the probes, the first ``MAX_PROBES`` test rows:
there is no exact posterior, so a row's own metacorrelation and XLL are null.

Agents are told the input dimension, the noise variance and, as their prior
over f, the testbed's kernel (``relu_nngp``): standardised inputs and targets
are at that prior's scale. ``oracle_gp`` does not apply (no true kernel).

Reference: Wang et al., "Beyond marginal uncertainty: how accurately can
Bayesian regression models estimate posterior predictive correlations?",
section 5.1 and Appendices D and E.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import hashlib
import math
import os
import pathlib
from typing import NamedTuple

import jax
import numpy as np

from neural_testbed import base, gaussian_process
from neural_testbed.generative import datasets as datasets_lib

__all__ = [
    "BUILT_IN",
    "MIN_ROWS",
    "RealRegressionEnvironment",
    "RealRegressionProblem",
    "RegressionData",
    "Split",
    "dataset_problems",
    "file_problems",
    "fit_gaussian_process",
    "load_dataset",
    "load_file",
    "split_sizes",
    "test_rows",
]

# name -> scikit-learn loader function name. linnerud (20 rows, 3 targets) is too small
# for the split: 4 test rows, fewer than one tau = 5 sample or XLL batch.
BUILT_IN = {"diabetes": "load_diabetes"}
TRAIN_FRACTION = 0.2  # Wang et al.: 20% initial training set
TEST_FRACTION = 0.2  # 20% test set; the other 60% is the active-learning pool
NUM_SEEDS = 10  # "ten times with varied random seeds"
TAUS = (1, 5)  # marginal, and the paper's random batches of 5 test points
MAX_PROBES = 500  # test rows where predictives are stored for XLL (and TAL's targets)
MAX_FIT_ROWS = 500  # rows of training + pool the noise variance is fitted on (cubic cost)
PRIOR_KERNEL = "relu_nngp"  # told to agents as their prior over f
MIN_ROWS = 25  # 5 training, 5 test (one tau = 5 sample, one XLL batch), 15 pool rows
PROBLEM_VERSION = 1
_FIT_DIGITS = 3  # significant digits the fitted hyperparameters are rounded to


class RegressionData(NamedTuple):
    """A dataset's rows as loaded (host arrays, before any split)."""

    name: str
    x: np.ndarray  # [n, d] float64
    y: np.ndarray  # [n] float64

    @property
    def input_dim(self) -> int:
        return self.x.shape[1]


def split_sizes(num_rows: int) -> tuple[int, int, int]:
    """(training, test, pool) rows of a dataset of ``num_rows`` rows: 20%, 20%, the rest."""
    num_train = round(TRAIN_FRACTION * num_rows)
    num_test = round(TEST_FRACTION * num_rows)
    return num_train, num_test, num_rows - num_train - num_test


def _check(data: RegressionData, target: str) -> RegressionData:
    """One line naming what is wrong with a dataset's arrays, else the dataset."""
    name, x, y = data
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"dataset {name!r}: features must be one row per example and at least "
                         f"one column, got shape {x.shape}")
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"dataset {name!r}: {target} must hold one number per row "
                         f"({len(x)}), got shape {y.shape}")
    if len(y) < MIN_ROWS:
        raise ValueError(f"dataset {name!r}: {len(y)} rows; the 20/20/60 train/test/pool split "
                         f"needs at least {MIN_ROWS}")
    for what, values in (("a feature", x), (target, y)):
        if not np.all(np.isfinite(values)):
            row = int(np.argwhere(~np.isfinite(values))[0][0])
            raise ValueError(f"dataset {name!r}: {what} is not a finite number at row {row}")
    if np.all(y == y[0]):
        raise ValueError(f"dataset {name!r}: {target} is constant ({y[0]:g}); a regression "
                         "target must vary")
    return data


@functools.cache
def load_dataset(name: str) -> RegressionData:
    """A built-in regression dataset by name (scikit-learn's copy: nothing is downloaded).

    Raises:
      ValueError: for an unknown name, or when scikit-learn is missing.
    """
    bunch = datasets_lib.scikit_learn_bunch(name, BUILT_IN, "regression dataset", "built-in",
                                            "a .csv / .npz file")
    return _check(RegressionData(name, np.asarray(bunch.data, np.float64),
                                 np.asarray(bunch.target, np.float64)), "the target")


def load_file(path: str | os.PathLike, target_column: str) -> RegressionData:
    """A user's regression dataset: a ``.csv`` with a header row, whose ``target_column``
    is the target and every other column a numeric feature; or a ``.npz`` with an array
    ``x [n, d]`` and the target array named ``target_column``.

    Raises:
      ValueError: naming what is wrong (no file, no such column or array, a value that
        is not a number, too few rows, a constant target, ...).
    """
    path = pathlib.Path(path)
    name = path.name
    if not target_column:
        raise ValueError(f"dataset {name!r}: --target-column NAME names the regression target")
    if not path.is_file():
        raise ValueError(f"no dataset file at {str(path)!r}")
    target = f"target column {target_column!r}"
    if path.suffix == ".csv":
        x, y = _read_csv(path, name, target_column)
    elif path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as arrays:
                missing = [k for k in ("x", target_column) if k not in arrays]
                if missing:
                    raise ValueError(f"dataset {name!r}: missing array(s) {', '.join(missing)}; "
                                     f"a regression .npz needs x and {target_column} (has "
                                     f"{', '.join(arrays.files) or 'none'})")
                x, y = arrays["x"], arrays[target_column]
        except (OSError, EOFError) as error:
            raise ValueError(f"dataset {name!r}: not a readable .npz file ({error})") from None
        for what, values in (("x", x), (target_column, y)):
            if not np.issubdtype(values.dtype, np.number) or values.dtype.kind == "c":
                raise ValueError(f"dataset {name!r}: array {what} must be real numbers, got "
                                 f"{values.dtype}")
        x = x.reshape(len(x), -1) if x.ndim > 2 else x
        y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    else:
        raise ValueError(f"dataset file {name!r}: unknown format {path.suffix or '(none)'!r}; "
                         "allowed: .csv, .npz")
    return _check(RegressionData(name, np.asarray(x, np.float64), np.asarray(y, np.float64)),
                  target)


def _read_csv(path: pathlib.Path, name: str, target_column: str):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError(f"dataset {name!r}: the file is empty")
    header, body = [h.strip() for h in rows[0]], [r for r in rows[1:] if r]
    if target_column not in header:
        raise ValueError(f"dataset {name!r}: no column {target_column!r}; columns: "
                         f"{', '.join(header)}")
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise ValueError(f"dataset {name!r}: row {i + 2} has {len(row)} fields, the header "
                             f"{len(header)}")
    if len(header) < 2:
        raise ValueError(f"dataset {name!r}: no feature columns besides {target_column!r}")
    values = np.empty((len(body), len(header)))
    for i, row in enumerate(body):
        for j, text in enumerate(row):
            try:
                values[i, j] = float(text)
            except ValueError:
                raise ValueError(f"dataset {name!r}: column {header[j]!r} row {i + 2} is not a "
                                 f"number: {text!r}") from None
    target = header.index(target_column)
    return np.delete(values, target, axis=1), values[:, target]


def _digest(data: RegressionData) -> str:
    """A short hash of the rows: the problems' draws depend on the data."""
    h = hashlib.sha256()
    for array in (data.x, data.y):
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# The noise variance: a Gaussian process fitted to the training and pool rows.


def _negative_evidence(log_params: np.ndarray, x: np.ndarray, y: np.ndarray):
    """``-log N(y; 0, K + (noise + ridge) I)`` of an ARD squared-exponential kernel and its
    gradient in ``log_params = [log signal variance, log lengthscales [d], log noise]``."""
    import scipy.linalg

    n, d = x.shape
    signal, lengthscales, noise = np.exp(log_params[0]), np.exp(log_params[1:-1]), np.exp(
        log_params[-1])
    z = x / lengthscales
    sq = np.sum(z**2, axis=1)
    kernel = signal * np.exp(-0.5 * np.clip(sq[:, None] + sq[None, :] - 2 * z @ z.T, 0.0, None))
    cov = kernel + (noise + gaussian_process.RIDGE) * np.eye(n)
    try:
        factor = scipy.linalg.cho_factor(cov, lower=True)
    except np.linalg.LinAlgError:
        return np.inf, np.zeros_like(log_params)
    inverse = scipy.linalg.cho_solve(factor, np.eye(n))
    alpha = inverse @ y
    value = (0.5 * y @ alpha + np.sum(np.log(np.diag(factor[0])))
             + 0.5 * n * math.log(2 * math.pi))
    w = np.outer(alpha, alpha) - inverse  # d value / d cov = -w / 2
    grad = np.empty_like(log_params)
    grad[0] = -0.5 * np.sum(w * kernel)
    weighted = w * kernel
    for j in range(d):
        grad[1 + j] = -0.5 * np.sum(weighted * (x[:, j, None] - x[None, :, j]) ** 2) / \
            lengthscales[j] ** 2
    grad[-1] = -0.5 * noise * np.trace(w)
    return value, grad


def _one_blas_thread():
    """BLAS on one thread while fitting, where threadpoolctl (scikit-learn's dependency) is
    installed: the matrices are small, and a pool of threads per core only contends with
    the rest of the run (JAX's own threads, other processes) for the cores."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


def fit_gaussian_process(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, float]:
    """(signal variance, lengthscales ``[d]``, noise variance) of an ARD squared-exponential
    Gaussian process fitted to ``(x, y)`` by maximum marginal likelihood (L-BFGS-B on the
    logarithms, from two starts: noise 0.01 and 0.3 of unit-variance targets, lengthscales
    sqrt(d), signal 1; the better one is kept). Bounds: noise variance in [1e-4, 10]
    (Wang et al. floor theirs at 1e-5), lengthscales in [1e-2, 1e3], signal in [1e-3, 1e2].
    Each is rounded to 3 significant digits, so that the same rows give the same numbers
    on every machine."""
    import scipy.optimize

    d = x.shape[1]
    bounds = ([(math.log(1e-3), math.log(1e2))] + [(math.log(1e-2), math.log(1e3))] * d
              + [(math.log(1e-4), math.log(10.0))])
    best = None
    with _one_blas_thread():
        for noise in (0.01, 0.3):
            start = np.concatenate([[0.0], np.full(d, 0.5 * math.log(d)), [math.log(noise)]])
            result = scipy.optimize.minimize(_negative_evidence, start, args=(x, y), jac=True,
                                             method="L-BFGS-B", bounds=bounds,
                                             options={"maxiter": 200})
            if best is None or result.fun < best.fun:
                best = result
    params = np.array([float(f"{v:.{_FIT_DIGITS}g}") for v in np.exp(best.x)])
    return float(params[0]), params[1:-1], float(params[-1])


class Split(NamedTuple):
    """One seed's split of a dataset, standardised by its training rows, and the fit."""

    x: np.ndarray  # [T, d] float32 training inputs
    y: np.ndarray  # [T] float32 training targets
    test_x: np.ndarray  # [n_test, d]
    test_y: np.ndarray  # [n_test]
    pool_x: np.ndarray  # [n_pool, d]
    pool_y: np.ndarray  # [n_pool]
    noise_variance: float  # the fitted process's
    signal_variance: float  # the fitted process's
    lengthscales: np.ndarray  # [d] the fitted process's, in standardised input units


class RealRegressionEnvironment(NamedTuple):
    """What a real regression problem's test samples and TAL need (device arrays)."""

    test_x: jax.Array  # [n_test, d]
    test_y: jax.Array  # [n_test]
    pool_x: jax.Array  # [n_pool, d] candidates of transductive active learning
    pool_y: jax.Array  # [n_pool] their observed targets, revealed when queried
    noise_variance: jax.Array  # scalar
    signal_variance: jax.Array  # scalar, of the fitted process (TAL's prediction model)
    lengthscales: jax.Array  # [d], of the fitted process


@dataclasses.dataclass(frozen=True)
class RealRegressionProblem(datasets_lib.DatasetStratum):
    """One seed's 20/20/60 split of a dataset, scored by the NLL of joint predictions."""

    problem_id: str  # stable id, e.g. "diabetes/3"
    dataset: str  # a built-in dataset name, or a file's path
    seed: int  # which split: replicate index within the dataset
    input_dim: int
    num_rows: int  # rows of the dataset
    digest: str  # identifies the dataset's contents (the problem's draws depend on it)
    target_column: str | None = None  # of a user's file
    taus: tuple[int, ...] = TAUS
    num_test: int = 1000  # N, test tau-samples per tau
    num_samples: int = 1000  # M, belief samples per test tau-sample

    metric = "nll"  # no exact likelihood on real data
    target = "regression"
    num_classes = 1  # one real output per input
    num_hyperplanes = 7  # unused: regression has no partition estimator
    max_monte_carlo_tau = 9  # unused: regression has its own estimators
    padding_group = None  # every problem of a dataset has the same T

    def __post_init__(self):
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.problem_id}: seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.num_rows, int) or self.num_rows < MIN_ROWS:
            raise ValueError(f"{self.problem_id}: num_rows must be an integer >= {MIN_ROWS}, "
                             f"got {self.num_rows!r}")
        for name in ("num_test", "num_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{self.problem_id}: {name} must be an integer >= 1, "
                                 f"got {value!r}")
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ValueError(f"{self.problem_id}: every tau must be an integer >= 1, "
                             f"got {self.taus!r}")
        if max(self.taus) > self.num_test_split:
            raise ValueError(f"{self.problem_id}: tau {max(self.taus)} exceeds the "
                             f"{self.num_test_split} test rows (a tau-sample is tau distinct "
                             "test rows)")

    @property
    def num_train(self) -> int:
        """T: the split's training rows."""
        return split_sizes(self.num_rows)[0]

    @property
    def num_test_split(self) -> int:
        return split_sizes(self.num_rows)[1]

    @property
    def num_pool_split(self) -> int:
        return split_sizes(self.num_rows)[2]

    @property
    def num_probes(self) -> int:
        """Q: the test rows where a row stores the agent's predictive (XLL's test points,
        TAL's targets)."""
        return min(self.num_test_split, MAX_PROBES)

    @property
    def num_candidates(self) -> int:
        """The pool rows transductive active learning may query."""
        return self.num_pool_split

    @property
    def tal_batch_size(self) -> int:
        """Queries per round of transductive active learning: 1% of the dataset's rows, as
        Wang et al. query."""
        return max(1, round(0.01 * self.num_rows))

    @property
    def noise_variance(self) -> float:
        """The fitted Gaussian process's noise variance, told to agents (computed on first
        use: the fit reads the split)."""
        return self.split().noise_variance

    @property
    def shape(self) -> tuple:
        return ("real_regression", self.dataset, self.digest, self.target_column,
                self.num_rows, self.input_dim, self.taus, self.num_test, self.num_samples)

    @property
    def key_seed(self) -> int:
        definition = f"real_regression/v{PROBLEM_VERSION}/{self.digest}/seed={self.seed}"
        return base.definition_seed(definition)

    def load(self) -> RegressionData:
        """The dataset's rows (cached per process)."""
        if self.dataset in BUILT_IN:
            return load_dataset(self.dataset)
        return _load_file(self.dataset, self.target_column, _mtime(self.dataset))

    def split(self) -> Split:
        """This seed's standardised split and fitted process (cached per process)."""
        mtime = 0 if self.dataset in BUILT_IN else _mtime(self.dataset)
        return _split(self.dataset, self.target_column, mtime, self.key_seed)

    def build_args(self) -> dict[str, np.ndarray]:
        s = self.split()
        return {"x": s.x, "y": s.y, "test_x": s.test_x, "test_y": s.test_y, "pool_x": s.pool_x,
                "pool_y": s.pool_y,
                "noise_variance": np.asarray(s.noise_variance, np.float32),
                "signal_variance": np.asarray(s.signal_variance, np.float32),
                "lengthscales": np.asarray(s.lengthscales, np.float32)}

    def build(self, key: jax.Array, args) -> base.ProblemInstance:
        """The split, as built on the host (:meth:`build_args`): nothing is drawn here."""
        del key  # the split is drawn from the problem's key seed on the host
        data = base.Data(x=args["x"], y=args["y"])
        prior = base.RegressionPriorKnowledge(input_dim=self.input_dim, kernel=PRIOR_KERNEL,
                                              noise_variance=args["noise_variance"])
        env = RealRegressionEnvironment(
            args["test_x"], args["test_y"], args["pool_x"], args["pool_y"],
            args["noise_variance"], args["signal_variance"], args["lengthscales"])
        return base.ProblemInstance(data, prior, env)

    def sample_test(self, key: jax.Array, env: RealRegressionEnvironment,
                    tau: int) -> base.TestSamples:
        """N tau-samples, each tau distinct test rows (:func:`test_rows`); the probes are
        the first Q test rows with their targets (no exact posterior: its fields None)."""
        rows = test_rows(key, self.num_test, tau, self.num_test_split)
        q = self.num_probes
        return base.TestSamples(x=env.test_x[rows], y=env.test_y[rows], log_likelihood=None,
                                noise_variance=env.noise_variance, probe_x=env.test_x[:q],
                                probe_y=env.test_y[:q])

    def instance(self) -> base.ProblemInstance:
        """The training rows, prior knowledge and the rest of the split, computed now."""
        template = dataclasses.replace(self, problem_id="", seed=0)
        return base.build_instance(self, template)


def test_rows(key: jax.Array, num_test: int, tau: int, num_rows: int) -> jax.Array:
    """``[num_test, tau]`` test-split rows, each tau-sample's distinct (a uniformly random
    subset: the tau largest of uniform draws over the rows)."""
    if tau == 1:
        return jax.random.randint(key, (num_test, 1), 0, num_rows)
    return jax.lax.top_k(jax.random.uniform(key, (num_test, num_rows)), tau)[1]


# fold_in data of the split's seed: a stream of its own beside the problem's keys.
_SPLIT_STREAM = 2**31 - 3


@functools.lru_cache(maxsize=64)
def _split(dataset: str, target_column: str | None, mtime: float, key_seed: int) -> Split:
    """The 20/20/60 split of a dataset drawn from ``key_seed``, standardised by its
    training rows, with the Gaussian process fitted to its training and pool rows (read
    again if a file changes: ``mtime``)."""
    data = (load_dataset(dataset) if dataset in BUILT_IN
            else _load_file(dataset, target_column, mtime))
    num_train, num_test, _ = split_sizes(len(data.y))
    order = np.random.default_rng([key_seed, _SPLIT_STREAM]).permutation(len(data.y))
    train, test, pool = order[:num_train], order[num_train:num_train + num_test], \
        order[num_train + num_test:]
    x_mean, x_std = data.x[train].mean(axis=0), data.x[train].std(axis=0)
    x_std = np.where(x_std > 0, x_std, 1.0)  # a constant feature is centred only
    y_mean, y_std = data.y[train].mean(), data.y[train].std()
    y_std = y_std if y_std > 0 else 1.0
    x = (data.x - x_mean) / x_std
    y = (data.y - y_mean) / y_std
    fit = np.concatenate([train, pool])[:MAX_FIT_ROWS]
    signal, lengthscales, noise = fit_gaussian_process(x[fit], y[fit])
    f32 = lambda a: np.asarray(a, np.float32)
    return Split(f32(x[train]), f32(y[train]), f32(x[test]), f32(y[test]), f32(x[pool]),
                 f32(y[pool]), noise, signal, lengthscales)


def _mtime(path: str) -> float:
    return os.stat(path).st_mtime_ns if os.path.exists(path) else 0


@functools.lru_cache(maxsize=8)
def _load_file(path: str, target_column: str | None, mtime: float) -> RegressionData:
    """Read once per process (and again if the file changes)."""
    return load_file(path, target_column)


def _problems(name: str, dataset: str, data: RegressionData, digest: str,
              target_column: str | None, seeds, **settings) -> dict:
    return {f"{name}/{seed}": RealRegressionProblem(
        f"{name}/{seed}", dataset, seed, data.input_dim, len(data.y), digest, target_column,
        **settings) for seed in seeds}


def dataset_problems(name: str, seeds=range(NUM_SEEDS),
                     **settings) -> dict[str, RealRegressionProblem]:
    """The problems of a built-in dataset: one per seed (a split), ids ``name/seed``.
    ``settings`` override problem fields (taus, num_test, num_samples)."""
    data = load_dataset(name)
    return _problems(name, name, data, f"builtin:{name}:{_digest(data)}", None, seeds,
                     **settings)


def file_problems(path: str | os.PathLike, target_column: str, seeds=range(NUM_SEEDS),
                  **settings) -> dict[str, RealRegressionProblem]:
    """The problems of a user's regression file (see :func:`load_file`); ids
    ``<file name>/seed``. Raises ValueError naming what is wrong with the file."""
    path = str(pathlib.Path(path).resolve())
    data = _load_file(path, target_column, _mtime(path))
    return _problems(pathlib.Path(path).name, path, data,
                     f"file:{target_column}:{_digest(data)}", target_column, seeds, **settings)
