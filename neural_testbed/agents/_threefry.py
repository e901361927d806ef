"""The default threefry PRNG with an unrolled hash: the same numbers, drawn faster on CPU.

On CPU, JAX lowers the threefry-2x32 hash behind every ``jax.random`` draw as
a *rolled* loop of five iterations (to save compile time). For the small
arrays drawn at every step of a long chain, that loop, not the arithmetic,
is the cost: an SG-MCMC step on the (50, 50) MLP of a 2-d problem spent most
of its time drawing its 2,802 Gaussians. Unrolled, the hash fuses into one
vectorised kernel.

:func:`fast_key` re-types a threefry key as an equivalent key of this
implementation: the same key data, the same ``split`` and the same bits
(the default "partitionable" threefry stream, checked bit for bit in the
tests), so results do not change, only their speed. ``seed`` and
``fold_in`` are threefry's own. A key of another implementation, or a
threefry key in JAX's legacy non-partitionable mode (a different stream), is
returned unchanged: slower, never different numbers.

Measured speed-up (``PYTHONPATH=. python benchmarks/threefry.py``, median of
7 runs of 10,000 steps, JAX 0.10.2 on a shared 2-core Intel Xeon VM):
drawing the Langevin noise alone 2.4x faster (1.05 s -> 0.44 s), and the
whole SG-MCMC chain (gradients, minibatches and noise; T = 100) 1.8x faster
(2.16 s -> 1.18 s).

It builds on JAX internals: ``jax.extend.random.define_prng_impl``, the
threefry implementation's ``seed`` and ``fold_in``, the partitionable stream
as JAX's default, and JAX's rolled CPU lowering of the hash (the reason it
exists). ``tests/agents/test_threefry.py`` fails, saying which, when any of
these changes, and checks that the chain really takes this path.

Reference:
  J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel random
  numbers: as easy as 1, 2, 3", SC 2011.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import random as jex_random

__all__ = ["fast_key"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
    """The threefry-2x32 hash (20 rounds) of counters ``(x1, x2)`` under key ``(k1, k2)``."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r))) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _hash_iota(key, shape):
    """The hash of each element's row-major index (a 64-bit counter, as two words)."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"cannot draw {size} >= 2**32 values with one key")
    low = jax.lax.iota(np.uint32, size).reshape(shape)
    return _threefry2x32(key[0], key[1], jnp.zeros(shape, np.uint32), low)


def _split(key, shape):
    bits1, bits2 = _hash_iota(key, shape)
    return jnp.stack([bits1, bits2], axis=bits1.ndim)  # [*shape, 2]


def _random_bits(key, bit_width, shape):
    bits1, bits2 = _hash_iota(key, shape)
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bit_width]
    if bit_width == 64:
        return (bits1.astype(dtype) << dtype(32)) | bits2.astype(dtype)
    return (bits1 ^ bits2).astype(dtype)


_IMPL = jex_random.define_prng_impl(
    key_shape=(2,),
    seed=jex_random.threefry_prng_impl.seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=jex_random.threefry_prng_impl.fold_in,
    name="threefry2x32_unrolled",
    tag="fry_unrolled",
)


def fast_key(key: jax.Array) -> jax.Array:
    """The same key, drawing the same numbers, with the unrolled hash.

    A key of another implementation (or threefry in the legacy,
    non-partitionable mode, whose stream differs) is returned unchanged.
    """
    if jax.random.key_impl(key) != "threefry2x32" or not jax.config.jax_threefry_partitionable:
        return key
    return jax.random.wrap_key_data(jax.random.key_data(key), impl=_IMPL)
