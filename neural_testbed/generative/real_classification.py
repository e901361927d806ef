"""Real-data classification problems (paper section 5.1, appendix A.2): no exact likelihood.

A problem trains on T rows drawn without replacement from a dataset's
training split (a fresh draw per seed) and is tested on N = 1000 test
tau-samples, each tau rows drawn with replacement from the test split (as
the reference samples them; iris has only 30 test rows). Without the
environment's likelihood the row's number is the negative log-likelihood of
the agent's joint prediction (``metric = "nll"``): for comparing agents it
differs from d_KL by a constant of the dataset, the conditional entropy of
its labels (paper equation 1). Algorithm 4 uses d = 10 hyperplanes here, the
paper's choice for real data.

Prior knowledge: real data has no temperature, so every agent is told the
same one, 0.01 (the reference's choice; the datasets are high signal-to-noise,
appendix D.1), with the dataset's input dimension, class count and T, and
environment widths (50, 50) for agents that draw prior functions like the
testbed's environment.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from neural_testbed import base
from neural_testbed.generative import datasets as datasets_lib

__all__ = ["PRIOR_TEMPERATURE", "NUM_HYPERPLANES", "RealClassificationProblem",
           "file_problems", "dataset_problems"]

PRIOR_TEMPERATURE = 0.01  # what every agent is told on real data
NUM_HYPERPLANES = 10  # Algorithm 4's d on real data (paper, appendix A.3)
ENV_HIDDEN = (50, 50)  # told to agents that draw prior functions like the testbed's environment
NUM_TRAIN_GRID = (1, 10, 100, 1000)  # and the whole training split ("full")
NUM_SEEDS = 10
OOD_NOISE = 3.0  # std of the noise that shifts a test row out of distribution
PROBLEM_VERSION = 1


@dataclasses.dataclass(frozen=True)
class RealClassificationProblem(datasets_lib.DatasetStratum):
    """T training rows of one dataset, tested on tau-samples of its test split."""

    problem_id: str  # stable id, e.g. "iris/17"
    dataset: str  # a built-in dataset name, or a file's path
    num_train: int  # T <= the training split's size
    seed: int  # which T rows: replicate index within its (dataset, T) stratum
    input_dim: int
    num_classes: int
    num_train_split: int  # rows in the dataset's training split
    num_test_split: int  # rows in its test split
    digest: str  # identifies the dataset's contents (the problem's draws depend on it)
    label_column: str | None = None  # for a .csv file
    standardise: bool = True  # features scaled by the training split's mean and std
    taus: tuple[int, ...] = (1, 100)
    num_test: int = 1000  # N
    num_samples: int = 1000  # M
    temperature: float = PRIOR_TEMPERATURE  # told to the agent (and stored in the row)
    num_hyperplanes: int = NUM_HYPERPLANES  # Algorithm 4's d
    max_monte_carlo_tau: int = 9  # "auto": Monte Carlo up to this tau (base.Problem)
    kappa: int | None = None  # None: i.i.d. test rows; k: each tau-sample from k anchor rows

    metric = "nll"  # no exact likelihood on real data
    target = "classification"

    def __post_init__(self):
        if not isinstance(self.num_train, int) or not 1 <= self.num_train <= self.num_train_split:
            raise ValueError(f"{self.problem_id}: num_train (T) must be an integer from 1 to "
                             f"the training split's {self.num_train_split} rows, got "
                             f"{self.num_train!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.problem_id}: seed must be an integer >= 0, got {self.seed!r}")
        if not self.taus or any(not isinstance(t, int) or t < 1 for t in self.taus):
            raise ValueError(f"{self.problem_id}: every tau must be an integer >= 1, "
                             f"got {self.taus!r}")
        if self.kappa is not None and (not isinstance(self.kappa, int)
                                       or isinstance(self.kappa, bool) or self.kappa < 1):
            raise ValueError(f"{self.problem_id}: kappa must be None (i.i.d. test rows) or an "
                             f"integer >= 1, got {self.kappa!r}")

    @property
    def shape(self) -> tuple:
        return ("real_classification", self.dataset, self.digest, self.label_column,
                self.standardise, self.num_train, self.input_dim, self.num_classes, self.num_train_split,
                self.num_test_split, self.taus, self.num_test, self.num_samples, self.kappa,
                self.max_monte_carlo_tau)

    @property
    def padding_group(self) -> tuple:
        """The shape but T: a training set is the first T rows of one permutation of
        the split, so a larger T's first T rows are the same set."""
        return ("real_classification", self.dataset, self.digest, self.label_column,
                self.standardise, self.input_dim, self.num_classes, self.num_train_split,
                self.num_test_split, self.taus, self.num_test, self.num_samples, self.kappa,
                self.max_monte_carlo_tau)

    @property
    def key_seed(self) -> int:
        definition = (f"real_classification/v{PROBLEM_VERSION}/{self.digest}/"
                      f"T={self.num_train}/seed={self.seed}")
        return base.definition_seed(definition)

    def load(self) -> datasets_lib.Dataset:
        """The dataset (cached per process)."""
        if self.dataset in datasets_lib.BUILT_IN:
            return datasets_lib.load_dataset(self.dataset)
        return _load_file(self.dataset, self.label_column, self.standardise,
                          _mtime(self.dataset))

    def build_args(self) -> dict[str, np.ndarray]:
        data = self.load()
        return {"x": data.x_train, "y": data.y_train, "x_test": data.x_test,
                "y_test": data.y_test,
                "temperature": np.asarray(self.temperature, np.float32)}

    def build(self, key: jax.Array, args) -> base.ProblemInstance:
        rows = jax.random.permutation(key, self.num_train_split)[:self.num_train]
        data = base.Data(x=args["x"][rows], y=args["y"][rows])
        prior = base.PriorKnowledge(
            input_dim=self.input_dim, num_classes=self.num_classes,
            env_hidden=ENV_HIDDEN, temperature=args["temperature"])
        return base.ProblemInstance(data, prior, {"x": args["x_test"], "y": args["y_test"]})

    def sample_test(self, key: jax.Array, env, tau: int) -> base.TestSamples:
        """Test rows drawn with replacement (:func:`test_rows`); each tau-sample's
        out-of-distribution input is a random test row plus ``N(0, OOD_NOISE^2)`` noise in
        every (standardised) feature, a shift of the test split (the bundled datasets
        differ in input dimension, so one cannot stand in for another)."""
        rows = test_rows(key, self.num_test, tau, self.num_test_split, self.kappa)
        row_key, noise_key = jax.random.split(base.ood_key(key))
        shifted = env["x"][jax.random.randint(row_key, (self.num_test,), 0, self.num_test_split)]
        ood_x = shifted + OOD_NOISE * jax.random.normal(noise_key, shifted.shape)
        return base.TestSamples(x=env["x"][rows], y=env["y"][rows], log_likelihood=None,
                                ood_x=ood_x)

    def instance(self) -> base.ProblemInstance:
        """The training rows, prior knowledge and test split, computed now."""
        template = dataclasses.replace(self, problem_id="", seed=0)
        return base.build_instance(self, template)


def test_rows(key: jax.Array, num_test: int, tau: int, num_rows: int,
              kappa: int | None) -> jax.Array:
    """``[num_test, tau]`` test-split rows: drawn with replacement (``kappa`` None), or
    each tau-sample's from its own ``kappa`` anchor rows, themselves drawn with
    replacement (enn's polyadic NLL, ``make_nll_polyadic_calculator``, which
    uncertainty-baselines reports with tau = 10, kappa = 2). A repeated row repeats its
    label: real data has one label per input, where the synthetic testbed draws a
    fresh label at each repeat."""
    if kappa is None:
        return jax.random.randint(key, (num_test, tau), 0, num_rows)
    anchor_key, index_key = jax.random.split(key)
    anchors = jax.random.randint(anchor_key, (num_test, kappa), 0, num_rows)
    index = jax.random.randint(index_key, (num_test, tau), 0, kappa)
    return jnp.take_along_axis(anchors, index, axis=1)


def _mtime(path: str) -> float:
    return os.stat(path).st_mtime_ns if os.path.exists(path) else 0


@functools.lru_cache(maxsize=8)
def _load_file(path: str, label_column: str | None, standardise: bool,
               mtime: float) -> datasets_lib.Dataset:
    """Read once per process (and again if the file changes)."""
    return datasets_lib.load_file(path, label_column, standardise)


def _digest(data: datasets_lib.Dataset) -> str:
    """A short hash of the split's contents: the problems' draws depend on the data."""
    h = hashlib.sha256()
    for array in (data.x_train, data.y_train, data.x_test, data.y_test):
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


def _grid(full: int, num_trains) -> list[int]:
    return sorted({t for t in num_trains if t < full} | {full})


def _problems(name: str, dataset: str, data: datasets_lib.Dataset, digest: str,
              label_column: str | None, num_trains, seeds, standardise=True,
              **settings) -> dict:
    full = len(data.y_train)
    problems = {}
    for i, (num_train, seed) in enumerate(
            (t, s) for t in _grid(full, num_trains) for s in seeds):
        problem_id = f"{name}/{i}"
        problems[problem_id] = RealClassificationProblem(
            problem_id, dataset, num_train, seed, data.input_dim, data.num_classes, full,
            len(data.y_test), digest, label_column, standardise, **settings)
    return problems


def dataset_problems(name: str, num_trains=NUM_TRAIN_GRID, seeds=range(NUM_SEEDS),
                     id_prefix: str | None = None,
                     **settings) -> dict[str, RealClassificationProblem]:
    """The problems of a built-in dataset: T in ``num_trains`` below the training split's
    size and the whole split, ``seeds`` each; ids ``name/i`` (or ``id_prefix/i``) in
    (T, seed) order. ``settings`` override problem fields (taus, kappa, ...)."""
    data = datasets_lib.load_dataset(name)
    return _problems(id_prefix or name, name, data, f"builtin:{name}:{_digest(data)}", None, num_trains,
                     seeds, **settings)


def file_problems(path: str | os.PathLike, label_column: str | None = None,
                  num_trains=NUM_TRAIN_GRID, seeds=range(NUM_SEEDS), standardise: bool = True,
                  **settings) -> dict[str, RealClassificationProblem]:
    """The problems of a user's dataset file (see :func:`datasets.load_file`); ids are
    ``<file name>/i``. ``settings`` override problem fields (taus, num_test, temperature,
    num_hyperplanes, ...). Raises ValueError naming what is wrong with the file."""
    path = str(pathlib.Path(path).resolve())
    data = _load_file(path, label_column, standardise, _mtime(path))
    return _problems(pathlib.Path(path).name, path, data, f"file:{_digest(data)}",
                     label_column, num_trains, seeds, standardise, **settings)
