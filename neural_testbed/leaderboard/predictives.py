"""A compact encoding of an agent's predictive distribution at a problem's probes.

``neural-testbed xll`` compares agents by their Gaussian predictives of the
targets at the Q probe inputs, each agent in turn serving as the reference,
without retraining any of them: a regression row keeps its agent's predictive
(:class:`~neural_testbed.diagnostics.xll.Predictive`) in this encoding, in the
store's ``predictives`` table. Only the row of a problem's smallest tau keeps
it: the predictive belongs to the trained agent, not to the tau, and the
leaderboard's diagnostics are the smallest tau's too.

The encoding: a 17-byte header (format, form, Q, rows, the noise variance),
then float32 numbers, their bytes regrouped by significance (all first bytes,
then all second bytes, ...: the exponent bytes compress well) and
zlib-compressed. The numbers are the mean of f ``[Q]`` and either

- ``factor``: the ``r`` rows whose Gram matrix is the covariance of f, where
  that is shorter than a triangle (``r < (Q + 1) / 2``: an ensemble's weighted,
  centred members), or
- ``triangle``: the upper triangle of the covariance of f, row by row.

Float32 keeps the correlations of nearly duplicate inputs (0.99 and more in
d = 1) exact enough for the 5 x 5 batches of XLL, whose smallest eigenvalue can
be as small as the noise's share of the variance; float16 would not.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

__all__ = ["Moments", "decode", "encode"]

_HEADER = struct.Struct("<4sBIIf")  # format tag, form, Q, rows, noise variance
_FORMAT = b"NTP1"
_FACTOR, _TRIANGLE = 1, 2


class Moments(NamedTuple):
    """A decoded predictive: the targets' mean and covariance (of f plus the noise)."""

    mean: np.ndarray  # [Q] float32
    covariance: np.ndarray  # [Q, Q] float32


def _pack(numbers: np.ndarray) -> bytes:
    planes = np.ascontiguousarray(numbers, "<f4").view(np.uint8).reshape(-1, 4).T
    return zlib.compress(planes.tobytes(), 6)


def _unpack(data: bytes, count: int) -> np.ndarray:
    planes = np.frombuffer(zlib.decompress(data), np.uint8).reshape(4, count)
    return np.ascontiguousarray(planes.T).view("<f4").reshape(count)


def encode(mean, spread, noise_variance) -> bytes:
    """The bytes of a predictive with mean of f ``[Q]``, covariance of f
    ``spread.T @ spread`` (``spread [r, Q]``) and the targets' noise variance."""
    mean = np.asarray(mean, np.float32)
    spread = np.asarray(spread, np.float64)
    q, r = mean.shape[0], spread.shape[0]
    if spread.shape[1:] != (q,):
        raise ValueError(f"spread of shape {spread.shape} for a mean of shape {mean.shape}; "
                         f"expected (r, {q})")
    if r < (q + 1) / 2:
        form, numbers = _FACTOR, spread.ravel()
    else:
        form, numbers = _TRIANGLE, (spread.T @ spread)[np.triu_indices(q)]
    header = _HEADER.pack(_FORMAT, form, q, r if form == _FACTOR else q, float(noise_variance))
    return header + _pack(np.concatenate([mean, numbers.astype(np.float32)]))


def decode(blob: bytes) -> Moments:
    """The targets' mean and covariance that :func:`encode` stored."""
    if len(blob) < _HEADER.size or blob[:4] != _FORMAT:
        raise ValueError("not a stored predictive (or one from a newer neural-testbed)")
    _, form, q, r, noise_variance = _HEADER.unpack_from(blob)
    if form not in (_FACTOR, _TRIANGLE):
        raise ValueError(f"a stored predictive of unknown form {form}")
    size = r * q if form == _FACTOR else q * (q + 1) // 2
    numbers = _unpack(blob[_HEADER.size:], q + size)
    mean, body = numbers[:q], numbers[q:].astype(np.float64)
    if form == _FACTOR:
        spread = body.reshape(r, q)
        covariance = spread.T @ spread
    else:
        covariance = np.zeros((q, q))
        covariance[np.triu_indices(q)] = body
        covariance = covariance + np.triu(covariance, 1).T
    covariance[np.diag_indices(q)] += noise_variance
    return Moments(mean, covariance.astype(np.float32))
