"""Real classification datasets: the small ones scikit-learn ships, and users' own files.

Nothing is downloaded: scikit-learn's iris, wine, breast cancer and 8x8 digits
live inside its package (the ``real`` extra), and any other dataset comes from
a file the user names (``.npz`` with ``x_train, y_train, x_test, y_test``, or
``.csv`` with a label column and a fixed, seeded 80/20 split). Every check of
the data happens here, once, with one clear line naming what is wrong, before
any problem is built.

Features are standardised with the mean and standard deviation of the whole
training split (not of the T points a problem trains on, so T = 1 is
defined); a constant feature is centred only. Images are flattened. Labels
are mapped to 0..K-1 in sorted order of their values.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import pathlib
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

__all__ = ["Dataset", "DatasetStratum", "BUILT_IN", "STAND_INS", "load_dataset", "load_file",
           "scikit_learn_bunch", "stand_in_notes"]


class DatasetStratum:
    """What a real-data problem (classification or regression) is stratified by: its
    dataset and its T. A mixin for problems with ``dataset`` and ``num_train`` fields."""

    @property
    def dataset_name(self) -> str:
        """The dataset's short name: the built-in name, or the file's name."""
        return pathlib.Path(self.dataset).name

    @property
    def stratum(self) -> tuple[str, int]:
        return self.dataset_name, self.num_train

    @property
    def stratum_columns(self) -> dict[str, str | int]:
        """The stratum's coordinates by name, as score records carry them."""
        return {"dataset": self.dataset_name, "num_train": self.num_train}


# name -> scikit-learn loader function name
BUILT_IN = {
    "iris": "load_iris",
    "wine": "load_wine",
    "breast_cancer": "load_breast_cancer",
    "digits": "load_digits",
}
# The paper's dataset a built-in one stands in for (itself, as scikit-learn ships it),
# said wherever its results are shown.
STAND_INS = {
    "wine": ("wine quality", "scikit-learn's wine (3 cultivars, 13 features)"),
    "digits": ("MNIST", "scikit-learn's 8x8 digits"),
}
TEST_FRACTION = 0.2  # of a dataset without a canonical split


def stand_in_notes(names: Iterable[str]) -> list[str]:
    """One sentence per built-in dataset among ``names`` that stands in for another of the
    paper's (its results are not the paper's numbers for that dataset)."""
    return [f"{STAND_INS[n][1]} stands in for the paper's {STAND_INS[n][0]}"
            for n in sorted(set(names)) if n in STAND_INS]


class Dataset(NamedTuple):
    """A standardised train/test split (host arrays, float32 features, int32 labels)."""

    name: str
    x_train: np.ndarray  # [n_train, d]
    y_train: np.ndarray  # [n_train]
    x_test: np.ndarray  # [n_test, d]
    y_test: np.ndarray  # [n_test]
    num_classes: int

    @property
    def input_dim(self) -> int:
        return self.x_train.shape[1]


def _split_seed(name: str) -> int:
    """The fixed seed of a dataset's train/test split, from its name."""
    return int.from_bytes(hashlib.sha256(f"split/{name}".encode()).digest()[:4], "little")


def _seeded_split(name: str, x: np.ndarray, y: np.ndarray):
    order = np.random.default_rng(_split_seed(name)).permutation(len(y))
    num_test = max(1, int(round(TEST_FRACTION * len(y))))
    test, train = order[:num_test], order[num_test:]
    return x[train], y[train], x[test], y[test]


def _labels(name: str, where: str, values: np.ndarray) -> np.ndarray:
    """Integer class labels (as given: ints, or floats that are whole numbers)."""
    values = np.asarray(values)
    if values.dtype.kind == "b":
        return values.astype(np.int64)
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    try:
        numbers = values.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"dataset {name!r}: {where} must be integer class labels, got "
                         f"values like {values.ravel()[:3].tolist()}") from None
    if not np.all(np.isfinite(numbers)) or np.any(numbers != np.round(numbers)):
        bad = numbers[~np.isfinite(numbers) | (numbers != np.round(numbers))][0]
        raise ValueError(f"dataset {name!r}: {where} must be integer class labels, got {bad}")
    return numbers.astype(np.int64)


def _finish(name: str, x_train, y_train, x_test, y_test, standardise: bool = True) -> Dataset:
    """Checks the split, standardises the features (unless told not to) and maps labels
    to 0..K-1."""
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    x_train, x_test = (np.asarray(a) for a in (x_train, x_test))
    for key, x in (("x_train", x_train), ("x_test", x_test)):
        if x.ndim < 2:
            raise ValueError(f"dataset {name!r}: {key} must have one row per example and at "
                             f"least one feature, got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.number) or x.dtype.kind == "c":
            raise ValueError(f"dataset {name!r}: {key} must be real numbers, got {x.dtype}")
    y_train = _labels(name, "y_train", arrays["y_train"]).reshape(-1)
    y_test = _labels(name, "y_test", arrays["y_test"]).reshape(-1)
    if len(x_train) != len(y_train) or len(x_test) != len(y_test):
        raise ValueError(f"dataset {name!r}: mismatched lengths: x_train {len(x_train)} vs "
                         f"y_train {len(y_train)}, x_test {len(x_test)} vs y_test {len(y_test)}")
    if len(y_train) == 0 or len(y_test) == 0:
        raise ValueError(f"dataset {name!r}: the {'training' if len(y_train) == 0 else 'test'} "
                         "split is empty")
    x_train = x_train.reshape(len(x_train), -1).astype(np.float64)  # images flattened
    x_test = x_test.reshape(len(x_test), -1).astype(np.float64)
    if x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"dataset {name!r}: x_train has {x_train.shape[1]} features, x_test "
                         f"{x_test.shape[1]}")
    for key, x in (("x_train", x_train), ("x_test", x_test)):
        if not np.all(np.isfinite(x)):
            row, col = np.argwhere(~np.isfinite(x))[0]
            raise ValueError(f"dataset {name!r}: {key} has a non-finite value ({x[row, col]}) "
                             f"at row {row}, feature {col}")
    classes = np.unique(np.concatenate([y_train, y_test]))
    if len(np.unique(y_train)) < 2:
        raise ValueError(f"dataset {name!r}: the training split has a single class "
                         f"({classes[0]}); a classifier needs at least 2")
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # a constant feature is centred only
    if not standardise:
        mean, std = 0.0, 1.0
    standardise = lambda x: ((x - mean) / std).astype(np.float32)
    relabel = lambda y: np.searchsorted(classes, y).astype(np.int32)
    return Dataset(name, standardise(x_train), relabel(y_train), standardise(x_test),
                   relabel(y_test), len(classes))


@functools.lru_cache(maxsize=None)
def load_dataset(name: str) -> Dataset:
    """A built-in dataset by name (scikit-learn's copy, split with a fixed seed).

    Raises:
      ValueError: for an unknown name, or when scikit-learn is missing.
    """
    bunch = scikit_learn_bunch(name, BUILT_IN, "dataset", "built-in datasets",
                               "a .npz / .csv file")
    return _finish(name, *_seeded_split(name, bunch.data, bunch.target))


def scikit_learn_bunch(name: str, built_in: dict[str, str], kind: str, listing: str,
                       files: str):
    """scikit-learn's copy of a built-in dataset (its loader named by ``built_in[name]``),
    with a one-line error for an unknown name or a missing scikit-learn; ``kind``,
    ``listing`` and ``files`` word that error."""
    if name not in built_in:
        raise ValueError(f"unknown {kind} {name!r}; {listing}: "
                         f"{', '.join(built_in)} (or {files} of your own)")
    try:
        import sklearn.datasets
    except ImportError:
        raise ValueError(f"dataset {name!r} needs scikit-learn: pip install "
                         "'neural-testbed[real]'") from None
    return getattr(sklearn.datasets, built_in[name])()


def load_file(path: str | os.PathLike, label_column: str | None = None,
              standardise: bool = True) -> Dataset:
    """A user's dataset: ``.npz`` (x_train, y_train, x_test, y_test) or ``.csv``.

    A CSV has a header row; ``label_column`` names the label, every other column
    is a numeric feature, and the rows are split 80/20 with a seed fixed by the
    file's name, so the same file always gives the same split. ``standardise=False``
    keeps the features as they are (e.g. data drawn from a known environment).

    Raises:
      ValueError: naming what is wrong (missing file or array, NaN features, a
        label column that is missing or not integer, a single class, ...).
    """
    path = pathlib.Path(path)
    name = path.name
    if not path.is_file():
        raise ValueError(f"no dataset file at {str(path)!r}")
    if path.suffix == ".npz":
        if label_column is not None:
            raise ValueError(f"dataset {name!r}: --label-column is for .csv files; a .npz file "
                             "has arrays x_train, y_train, x_test, y_test")
        try:
            with np.load(path, allow_pickle=False) as arrays:
                missing = [k for k in ("x_train", "y_train", "x_test", "y_test")
                           if k not in arrays]
                if missing:
                    raise ValueError(f"dataset {name!r}: missing array(s) {', '.join(missing)}; "
                                     f"a .npz needs x_train, y_train, x_test, y_test (has "
                                     f"{', '.join(arrays.files) or 'none'})")
                parts = [arrays[k] for k in ("x_train", "y_train", "x_test", "y_test")]
        except (OSError, EOFError) as error:
            raise ValueError(f"dataset {name!r}: not a readable .npz file ({error})") from None
        return _finish(name, *parts, standardise=standardise)
    if path.suffix == ".csv":
        return _finish(name, *_seeded_split(name, *_read_csv(path, name, label_column)),
                       standardise=standardise)
    raise ValueError(f"dataset file {name!r}: unknown format {path.suffix or '(none)'!r}; "
                     "allowed: .npz, .csv")


def _read_csv(path: pathlib.Path, name: str, label_column: str | None):
    if not label_column:
        raise ValueError(f"dataset {name!r}: a .csv needs --label-column NAME (the column of "
                         "class labels), or --target-column NAME for a regression target")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError(f"dataset {name!r}: the file is empty")
    header, body = [h.strip() for h in rows[0]], [r for r in rows[1:] if r]
    if label_column not in header:
        raise ValueError(f"dataset {name!r}: no column {label_column!r}; columns: "
                         f"{', '.join(header)}")
    if not body:
        raise ValueError(f"dataset {name!r}: no data rows after the header")
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise ValueError(f"dataset {name!r}: row {i + 2} has {len(row)} fields, the header "
                             f"{len(header)}")
    label = header.index(label_column)
    features = [j for j in range(len(header)) if j != label]
    if not features:
        raise ValueError(f"dataset {name!r}: no feature columns besides {label_column!r}")
    x = np.empty((len(body), len(features)))
    for i, row in enumerate(body):
        for k, j in enumerate(features):
            try:
                x[i, k] = float(row[j])
            except ValueError:
                raise ValueError(f"dataset {name!r}: column {header[j]!r} row {i + 2} is not a "
                                 f"number: {row[j]!r}") from None
    y = np.array([row[label].strip() for row in body])
    return x, _labels(name, f"label column {label_column!r}", y)
