"""The unrolled threefry helper: same bits as JAX's threefry, and really the fast path.

``_threefry`` leans on JAX internals (``jax.extend.random.define_prng_impl``,
the threefry implementation's ``seed``/``fold_in``, the default partitionable
stream, and JAX's rolled CPU lowering of the hash). These tests fail, with a
message saying what changed, when any of that changes under it.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.extend import random as jex_random

from neural_testbed import networks
from neural_testbed.agents import _threefry, bbb, sgmcmc


@pytest.mark.parametrize("shape", [(), (3, 7), (2802,)])
def test_fast_key_draws_exactly_the_default_threefry_numbers(shape):
    """The unrolled hash behind the chain's noise gives the same bits as JAX's threefry."""
    key = jax.random.key(42)
    fast = _threefry.fast_key(key)
    assert jax.random.key_impl(fast) != jax.random.key_impl(key)
    def draws(k):
        return (jax.random.normal(k, shape), jax.random.bits(k, shape),
                jax.random.bernoulli(k, 0.3, shape), jax.random.randint(k, shape, 0, 17),
                jax.random.bits(k, shape, jnp.uint8))

    for plain, unrolled in zip(jax.jit(draws)(key), jax.jit(draws)(fast)):
        np.testing.assert_array_equal(plain, unrolled)
    np.testing.assert_array_equal(jax.random.normal(key, shape), jax.random.normal(fast, shape))
    with jax.enable_x64(True):  # 64-bit draws exist only in this mode
        np.testing.assert_array_equal(jax.random.bits(key, shape, jnp.uint64),
                                      jax.random.bits(fast, shape, jnp.uint64))
    np.testing.assert_array_equal(jax.random.key_data(jax.random.split(key, 3)),
                                  jax.random.key_data(jax.random.split(fast, 3)))
    np.testing.assert_array_equal(jax.random.key_data(jax.random.fold_in(key, 7)),
                                  jax.random.key_data(jax.random.fold_in(fast, 7)))


def test_the_jax_internals_it_builds_on_are_there():
    assert callable(getattr(jex_random, "define_prng_impl", None)), (
        "jax.extend.random.define_prng_impl is gone: _threefry cannot define its PRNG")
    threefry = jex_random.threefry_prng_impl
    assert threefry.key_shape == (2,) and callable(threefry.seed) and callable(threefry.fold_in)
    assert jax.random.key_impl(jax.random.key(0)) == "threefry2x32", (
        "JAX's default PRNG is no longer threefry2x32: fast_key now returns keys unchanged")
    assert jax.config.jax_threefry_partitionable, (
        "JAX's default threefry stream is no longer the partitionable one that _threefry "
        "reproduces: fast_key now returns keys unchanged")


def test_the_chain_takes_the_fast_path():
    """With JAX's defaults, fast_key re-types the key, and sgld carries the re-typed key."""
    key = jax.random.key(0)
    assert str(jax.random.key_impl(_threefry.fast_key(key))) == "fry_unrolled"
    state = sgmcmc.sgld(key, 1e-3, 10).init(jnp.zeros(3))
    keys = [leaf for leaf in jax.tree.leaves(state)
            if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
    assert [str(jax.random.key_impl(k)) for k in keys] == ["fry_unrolled"]


def test_other_keys_and_the_legacy_stream_are_returned_unchanged():
    """The documented fallback, which keeps every number: a key of another
    implementation, or threefry in the legacy non-partitionable mode."""
    rbg = jax.random.key(0, impl="rbg")
    assert _threefry.fast_key(rbg) is rbg
    key = jax.random.key(0)
    with jax.threefry_partitionable(False):
        assert _threefry.fast_key(key) is key


def _num_loops(key, draw=lambda k: jax.random.normal(k, (2802,)), *args) -> int:
    hlo = jax.jit(draw).lower(key, *args).compile().as_text()
    return len(re.findall(r"\bwhile\(", hlo))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the rolled hash is JAX's CPU lowering")
def test_on_cpu_the_unrolled_hash_compiles_without_the_rolled_loop():
    """Why the helper exists: JAX compiles the hash as a loop on CPU, the helper without one.
    If JAX stops rolling it, re-measure with benchmarks/threefry.py; the helper may go."""
    key = jax.random.key(0)
    assert _num_loops(key) >= 1, (
        "JAX no longer compiles threefry as a rolled loop on CPU: re-measure "
        "benchmarks/threefry.py, the _threefry helper may no longer pay off")
    assert _num_loops(_threefry.fast_key(key)) == 0


def test_langevin_noise_is_the_same_with_and_without_the_helper():
    """optax.add_noise draws the same noise from a key and from its re-typed copy."""
    params = {"w": jnp.zeros((50, 50)), "b": jnp.zeros(50)}

    def noise(make_key):
        transform = optax.add_noise(1e-3, 0.0, make_key(jax.random.key(3)))
        state = transform.init(params)
        updates, _ = transform.update(params, state)
        return updates

    fast = noise(_threefry.fast_key)
    plain = noise(lambda key: key)
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(plain)):
        np.testing.assert_array_equal(a, b)


def test_bbb_draws_its_networks_exactly_and_on_the_fast_path():
    """bbb's belief samples (10^6 networks an evaluation) go through the helper: the
    same weights as the plain key's draw, and on a CPU no rolled hash loop."""
    mean = networks.init_mlp(jax.random.key(1), 4, (50, 50, 3))
    posterior = bbb.Posterior(mean, jax.tree.map(lambda m: jnp.full_like(m, -3.0), mean))
    key = jax.random.key(4)
    eps = optax.tree.random_like(key, mean, jax.random.normal)
    expected = jax.tree.map(lambda m, e: m + jax.nn.softplus(-3.0) * e, mean, eps)
    for got, want in zip(jax.tree.leaves(jax.jit(bbb.sample_weights)(key, posterior)),
                         jax.tree.leaves(expected)):
        np.testing.assert_array_equal(got, want)
    if jax.default_backend() == "cpu":
        assert _num_loops(key, bbb.sample_weights, posterior) == 0
