"""Known-answer tests of the joint log-likelihood estimators (Algorithms 3 and 4)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural_testbed import likelihood

# Jitted once here: called eagerly, every primitive of the estimators compiles on its own.
_monte_carlo = jax.jit(likelihood.monte_carlo_log_likelihood)
_partition = jax.jit(likelihood.partition_log_likelihood,
                     static_argnames=("num_hyperplanes", "numerics", "num_samples"))
_partition_cells = jax.jit(likelihood.partition_cells, static_argnames=("num_hyperplanes",))
_bernoulli = jax.jit(jax.random.bernoulli, static_argnums=2)
_randint = jax.jit(jax.random.randint, static_argnums=1)


def _log_probs_from_p1(p1):
    """[members, tau] probability of class 1 -> [members, tau, 2] log-probs (float64 exact)."""
    p1 = np.asarray(p1, np.float64)
    return np.log(np.stack([1 - p1, p1], axis=-1)).astype(np.float32)


# ----- The paper's coin example (section 2.2) -----------------------------------------
# Agent A: an i.i.d. coin with P(heads) = 2/3. Agent B: a coin that is always heads with
# probability 2/3 and always tails with probability 1/3. Both have the same marginals; their
# joint likelihoods of tau flips differ: A gives (2/3)^h (1/3)^(tau-h), B gives 2/3 if all
# flips are heads, 1/3 if all are tails, ~0 otherwise.
EPS = 1e-6  # "always" heads = P(heads) of 1 - EPS, so that every log-probability is finite.
NUM_SAMPLES = 1000  # M


def _coin_b_members(key, tau):
    """M sampled coins of agent B, grouped: two members weighted by their draw counts."""
    heads = _bernoulli(key, 2 / 3, (NUM_SAMPLES,))
    count = int(np.asarray(heads).sum())
    log_weights = np.log(np.array([count, NUM_SAMPLES - count]) / NUM_SAMPLES)
    log_weights = log_weights.astype(np.float32)
    log_probs = _log_probs_from_p1(np.array([[1 - EPS] * tau, [EPS] * tau]))
    return log_probs, log_weights


def _coin_b_exact(labels):
    h = int(np.sum(labels))
    tau = len(labels)
    return np.log(2 / 3 * (1 - EPS) ** h * EPS ** (tau - h) + 1 / 3 * EPS**h * (1 - EPS) ** (tau - h))


@pytest.mark.parametrize("estimator", ["monte_carlo", "partition"])
@pytest.mark.parametrize("labels", [[1] * 10, [0] * 10, [1, 0, 1, 1, 0, 1, 1, 1, 0, 1]])
def test_coin_example_matches_closed_form(estimator, labels):
    tau = len(labels)
    y = np.array(labels, np.int32)
    # Agent A: one member, so the estimate is exact for any M.
    log_probs_a = _log_probs_from_p1(np.full((1, tau), 2 / 3))
    # Agent B: M draws of a Bernoulli(2/3) coin type.
    log_probs_b, log_weights_b = _coin_b_members(jax.random.key(7), tau)
    if estimator == "monte_carlo":
        est_a = _monte_carlo(log_probs_a, y, np.zeros(1, np.float32))
        est_b = _monte_carlo(log_probs_b, y, log_weights_b)
    else:
        key = jax.random.key(3)
        est_a = _partition(key, log_probs_a, y, np.zeros(1, np.float32))
        est_b = _partition(key, log_probs_b, y, log_weights_b)
    h = sum(labels)
    exact_a = h * np.log(2 / 3) + (tau - h) * np.log(1 / 3)
    np.testing.assert_allclose(est_a, exact_a, rtol=1e-5)
    # Agent B's estimate is (heads fraction among M draws) * (1 - EPS)^tau + ... Its Monte
    # Carlo standard error in probability is sqrt(p (1 - p) / M) with p = 2/3, i.e. relative
    # error sqrt((1 - p) / (p M)) on the all-heads probability; allow 4 standard errors.
    rel_se = np.sqrt((1 / 3) / (2 / 3 * NUM_SAMPLES))
    exact_b = _coin_b_exact(labels)
    if 0 < h < tau:  # mixed sequences: both coins give ~EPS^k; the estimate is tiny too
        assert float(est_b) < np.log(EPS) + 1
    else:
        assert abs(float(est_b) - exact_b) < 4 * rel_se * 2  # |log(1 + e)| <= 2|e| for |e| < 0.5


def test_coin_example_joint_likelihoods_differ_at_tau_10():
    """Marginals agree (tau=1), joints do not: the reason the testbed looks at tau > 1."""
    log_probs_a = _log_probs_from_p1(np.full((1, 1), 2 / 3))
    log_probs_b, log_weights_b = _coin_b_members(jax.random.key(7), 1)
    y = np.array([1], np.int32)
    marg_a = _monte_carlo(log_probs_a, y, np.zeros(1, np.float32))
    marg_b = _monte_carlo(log_probs_b, y, log_weights_b)
    # tau = 1: B's estimate is the heads fraction of M draws; 4 standard errors of it.
    assert abs(np.exp(marg_b) - np.exp(marg_a)) < 4 * np.sqrt(2 / 9 / NUM_SAMPLES)
    y10 = np.ones(10, np.int32)
    joint_a = _monte_carlo(
        _log_probs_from_p1(np.full((1, 10), 2 / 3)), y10, np.zeros(1, np.float32))
    log_probs_b10, _ = _coin_b_members(jax.random.key(7), 10)
    joint_b = _monte_carlo(log_probs_b10, y10, log_weights_b)
    assert float(joint_b) - float(joint_a) > 3.0  # log(2/3) vs 10 log(2/3)


# ----- A small finite ensemble: enumerate the exact mixture ----------------------------
# Three members with distinct probabilities at tau = 3 inputs.
P1 = np.array([[0.9, 0.2, 0.6], [0.3, 0.7, 0.5], [0.05, 0.95, 0.1]])  # [members, tau]


def _exact_mixture(labels, weights):
    y = np.asarray(labels)
    per_member = np.prod(np.where(y == 1, P1, 1 - P1), axis=1)  # [members]
    return np.log(np.sum(weights * per_member)), per_member


@pytest.mark.parametrize("estimator", ["monte_carlo", "partition"])
def test_finite_ensemble_agrees_with_enumerated_mixture(estimator):
    """With M sampled member indices, both estimators agree with the exact uniform mixture
    within 4 Monte Carlo standard errors, for every one of the 2^3 label sequences."""
    log_probs = _log_probs_from_p1(P1)
    for labels in itertools.product([0, 1], repeat=3):
        y = np.array(labels, np.int32)
        idx = _randint(jax.random.key(sum(labels) + 10 * labels[0]), (NUM_SAMPLES,), 0, 3)
        counts = np.bincount(np.asarray(idx), minlength=3)
        log_weights = np.log(counts / NUM_SAMPLES).astype(np.float32)
        exact, per_member = _exact_mixture(labels, np.full(3, 1 / 3))
        if estimator == "monte_carlo":
            est = _monte_carlo(log_probs, y, log_weights)
        else:
            est = _partition(jax.random.key(1), log_probs, y, log_weights)
        # Standard error of the mean of M i.i.d. draws of prod_t p_{m,t,y_t}, m uniform.
        se = np.std(per_member) / np.sqrt(NUM_SAMPLES)
        assert abs(np.exp(float(est)) - np.exp(exact)) < 4 * se + 1e-6, labels


def test_partition_is_exact_when_every_member_has_its_own_cell():
    log_probs = _log_probs_from_p1(P1)
    weights = np.array([0.5, 0.3, 0.2])
    log_weights = np.log(weights).astype(np.float32)
    distinct_keys = 0
    for seed in range(40):
        key = jax.random.key(seed)
        cells = np.asarray(_partition_cells(key, log_probs))
        if len(set(cells)) < 3:
            continue
        distinct_keys += 1
        for labels in itertools.product([0, 1], repeat=3):
            exact, _ = _exact_mixture(labels, weights)
            est = _partition(
                key, log_probs, np.array(labels, np.int32), log_weights)
            np.testing.assert_allclose(float(est), exact, rtol=1e-5, atol=1e-6)
    assert distinct_keys >= 10  # the check above really ran


def test_cell_sums_add_each_cells_members_and_leave_empty_cells_zero():
    # 1000 members in 1024 cells (the real sweep's 10 hyperplanes): every cell's sum is
    # its members' sum, an empty cell's exactly 0 (its log is -inf: an empty cell).
    rng = np.random.default_rng(0)
    cell = rng.integers(0, 1024, size=1000)
    values = rng.uniform(size=(1000, 5)).astype(np.float32)
    expected = np.zeros((1024, 5))
    np.add.at(expected, cell, values)
    got = np.asarray(likelihood.estimators._cell_sums(jnp.asarray(values), jnp.asarray(cell),
                                                        1024))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    empty = np.setdiff1d(np.arange(1024), cell)
    assert empty.size > 0 and np.all(got[empty] == 0)


def test_partition_merges_members_in_one_cell_by_averaging():
    """With all members in one cell, Algorithm 4 is the product of the averaged probabilities."""
    log_probs = _log_probs_from_p1(np.array([[0.6, 0.6], [0.61, 0.61]]))  # nearly identical
    y = np.array([1, 1], np.int32)
    cells = np.asarray(_partition_cells(jax.random.key(0), log_probs))
    assert cells[0] == cells[1]
    est = _partition(jax.random.key(0), log_probs, y, np.log([0.5, 0.5]).astype(np.float32))
    np.testing.assert_allclose(float(est), 2 * np.log(0.605), rtol=1e-5)


@pytest.mark.parametrize("numerics", ["reference", "paper"])
def test_occupied_cells_count_the_cells_of_drawn_members(numerics):
    """The count beside the estimate is the number of distinct cells of members with weight > 0;
    the estimate is the one partition_log_likelihood gives alone."""

    @jax.jit  # the key split and the draw in one program
    def key_and_log_probs(key):
        key, probs_key = jax.random.split(key)
        return key, jax.nn.log_softmax(jax.random.normal(probs_key, (50, 4, 3)))  # 50 members

    key, log_probs = key_and_log_probs(jax.random.key(3))
    labels = np.array([0, 1, 2, 0], np.int32)
    cells = np.asarray(_partition_cells(key, log_probs, num_hyperplanes=3))
    undrawn = cells == cells[0]  # one whole cell of members never drawn: it must not count
    weights = np.where(undrawn, 0.0, 1.0 / np.sum(~undrawn))
    with np.errstate(divide="ignore"):  # log(0) = -inf: an undrawn member
        log_weights = np.log(weights).astype(np.float32)
    both = jax.jit(likelihood.partition_log_likelihood_and_cells,
                   static_argnames=("num_hyperplanes", "numerics"))
    estimate, count = both(key, log_probs, labels, log_weights, num_hyperplanes=3,
                           numerics=numerics)
    assert len(set(cells)) > 2  # the check is not trivial: several of the 2^3 cells
    assert int(count) == len(set(cells)) - 1
    alone = _partition(key, log_probs, labels, log_weights, num_hyperplanes=3, numerics=numerics)
    np.testing.assert_allclose(float(estimate), float(alone), rtol=1e-6)


def test_estimates_stay_finite_for_confident_members():
    """Log space: a member that puts log-prob -200 on the label does not underflow the estimate."""
    log_p = np.array([[[-200.0, 0.0]] * 100, [[-1.0, -0.4587]] * 100],
                     np.float32)  # [2, tau=100, 2]
    y = np.zeros(100, np.int32)
    log_w = np.log([0.5, 0.5]).astype(np.float32)
    mc = _monte_carlo(log_p, y, log_w)
    part = _partition(jax.random.key(0), log_p, y, log_w)
    np.testing.assert_allclose(float(mc), np.log(0.5) - 100.0, rtol=1e-5)
    assert np.isfinite(float(part))


# ----- Algorithm 4 never underflows: per-cell log-sum-exp ------------------------------
def _algorithm4_in_float64(cells, label_log_probs, log_weights, numerics, num_samples=1000):
    """Algorithm 4 from its definition, in float64 log space with scipy's logsumexp."""
    from scipy.special import logsumexp

    lp = np.asarray(label_log_probs, np.float64)
    lw = np.asarray(log_weights, np.float64)
    if numerics == "reference":
        from scipy.stats import norm

        lp = np.clip(lp, norm.logcdf(-5.0), norm.logcdf(5.0))
    terms = []
    for cell in np.unique(cells):
        members = cells == cell
        log_weight = logsumexp(lw[members])
        log_sum = logsumexp(lp[members] + lw[members, None], axis=0)  # [tau]
        if numerics == "reference":
            eps = np.log(1e-6 / num_samples)
            log_mean = np.logaddexp(log_sum, eps) - np.logaddexp(log_weight, eps)
        else:
            log_mean = log_sum - log_weight
        terms.append(log_weight + log_mean.sum())
    return logsumexp(terms)


@pytest.mark.parametrize("numerics", ["reference", "paper"])
@pytest.mark.parametrize("gap", [80.0, 90.0, 200.0, 1000.0])
def test_partition_is_finite_and_exact_for_large_gaps_between_members(gap, numerics):
    """Two members, each ``gap`` nats below the other on some inputs: with the paper's
    numerics member A loses it all at input 1 and member B at input 3 of tau = 5 (the old
    shared per-input shift made both cells log(0), so the estimate was -inf while the
    exact value is about -gap); with the reference's probability floor (no per-input gap
    can exceed 15 nats) A loses it over the first 50 of tau = 100 inputs and B over the
    last 50. The estimate is finite and equals Algorithm 4 computed in float64."""
    tau = 5 if numerics == "paper" else 100
    a = np.full(tau, np.log(0.9))
    b = a.copy()
    if numerics == "paper":
        a[1] -= gap
        b[3] -= gap
    else:
        a[:50] -= gap / 50
        b[50:] -= gap / 50
    label_log_probs = np.stack([a, b])  # [2, tau], the label's log-probability
    other = np.log1p(-np.exp(label_log_probs))  # the other class
    log_probs = np.stack([label_log_probs, other], axis=-1).astype(np.float32)
    y = np.zeros(tau, np.int32)
    log_w = np.log([0.3, 0.7]).astype(np.float32)
    split = 0
    probit_clip = 5.0 if numerics == "reference" else None  # the paper's are unclipped
    for seed in range(12):
        key = jax.random.key(seed)
        cells = np.asarray(_partition_cells(key, log_probs, probit_clip=probit_clip))
        split += len(set(cells)) == 2
        est = _partition(key, log_probs, y, log_w, numerics=numerics)
        expected = _algorithm4_in_float64(cells, np.asarray(log_probs)[..., 0], log_w, numerics)
        assert np.isfinite(float(est))
        # float32 log-probabilities summed over tau inputs: rounding of ~1e-7 relative each.
        np.testing.assert_allclose(float(est), expected, rtol=1e-5, atol=1e-4)
    assert split > 0  # split cells, where the old estimate was log(0)


@pytest.mark.parametrize("numerics", ["reference", "paper"])
def test_one_member_is_its_own_cell_and_skips_the_empty_cells(numerics):
    """The single-member shortcut gives the general path's estimate: the general path
    run on the same member beside a second, undrawn one (log-weight -inf), which occupies
    no cell; and it counts one occupied cell."""
    rng = np.random.default_rng(4)
    tau, k = 50, 3
    log_probs = np.log(rng.dirichlet(np.ones(k), size=(2, tau))).astype(np.float32)
    labels = rng.integers(0, k, tau).astype(np.int32)

    @jax.jit
    def both(key):
        alone = likelihood.partition_log_likelihood_and_cells(
            key, log_probs[:1], labels, jnp.zeros(1), numerics=numerics)
        beside = likelihood.partition_log_likelihood_and_cells(
            key, log_probs, labels, jnp.array([0.0, -jnp.inf]), numerics=numerics)
        return alone, beside

    (alone, one_cell), (beside, cells) = both(jax.random.key(0))
    assert int(one_cell) == int(cells) == 1
    # Same operations on the same values but for summation order over tau: float32 rounding.
    np.testing.assert_allclose(float(alone), float(beside), rtol=1e-6)
    tail = 0.5 * math.erfc(5 / math.sqrt(2))  # Phi(-5): the reference's probability floor
    clip = (np.log(tail), np.log1p(-tail))
    chosen = log_probs[0, np.arange(tau), labels]
    if numerics == "paper":  # no floor, no smoothing: the member's own joint log-likelihood
        np.testing.assert_allclose(float(alone), chosen.sum(dtype=np.float64), rtol=1e-6)
    else:  # floored, smoothed by 1e-6 samples of the reference
        floored = np.clip(chosen.astype(np.float64), *clip)
        s = np.log(1e-6 / 1000)
        expected = np.sum(np.logaddexp(floored, s) - np.logaddexp(0.0, s))
        np.testing.assert_allclose(float(alone), expected, rtol=1e-6)


# ----- The probits that place members in cells ------------------------------------------
def test_unclipped_probits_are_exact_in_both_tails_and_finite_at_0_and_1():
    """The paper's probits (no clip) from float32 log-probabilities: within float32
    rounding of Phi^-1 computed in float64 (scipy's ndtri_exp, the inverse of log Phi),
    for logit gaps from 0 to 10^6 nats, where ndtri(exp(log p)) is +inf in the upper tail
    from about 17 nats and -inf in the lower from about 87; with K = 2 the two probits are
    each other's negatives; a probability of exactly 0 or 1 gives a finite probit beyond
    every other."""
    from scipy.special import ndtri_exp

    probits = jax.jit(likelihood.estimators._probits)
    gaps = np.array([0.0, 0.5, 3.0, 10.0, 16.0, 20.0, 40.0, 86.0, 90.0, 150.0, 500.0,
                     1e4, 1e6, np.inf], np.float32)  # the last: p = 0 and p = 1 exactly
    got = np.asarray(probits(jax.nn.log_softmax(jnp.stack([-gaps, jnp.zeros_like(gaps)], -1))))
    lower = ndtri_exp(-np.logaddexp(0.0, gaps[:-1].astype(np.float64)))  # class 0, p <= 1/2
    # Relative rounding of float32 inputs, amplified near p = 1/2 (gap 0.5: Phi^-1 ~ -0.31).
    np.testing.assert_allclose(got[:-1, 0], lower, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[:, 1], -got[:, 0])
    assert np.all(np.isfinite(got)) and got[-1, 1] > 1e10 and np.all(np.diff(got[:, 1]) > 0)
    # K = 3: only the most likely class can be above 1/2; the others are Phi^-1(p).
    probs = np.array([[0.2, 0.3, 0.5], [1e-30, 0.25, 0.75], [0.9, 0.05, 0.05]])
    got3 = np.asarray(probits(jnp.log(jnp.asarray(probs, jnp.float32))))
    np.testing.assert_allclose(got3, ndtri_exp(np.log(probs)), rtol=2e-6, atol=1e-6)


def test_the_papers_numerics_place_members_by_their_unclipped_probits():
    """Two members that differ only where both are beyond the reference's clip (label
    probabilities 1e-9 on the first half of the inputs and 1e-30 on the second, and the
    other way round: every probit below -5): the reference's clipped probits never tell
    them apart, the paper's split them under some hyperplanes, and the estimate is then
    Algorithm 4 in float64 on those cells."""
    tau = 10
    half = [1e-9] * (tau // 2)
    tail = [1e-30] * (tau // 2)
    label_log_probs = np.log(np.array([half + tail, tail + half]))  # [2, tau]
    log_probs = np.stack([label_log_probs, np.log1p(-np.exp(label_log_probs))],
                         axis=-1).astype(np.float32)
    y = np.zeros(tau, np.int32)
    log_w = np.log([0.5, 0.5]).astype(np.float32)
    split = 0
    for seed in range(20):
        key = jax.random.key(seed)
        clipped = np.asarray(_partition_cells(key, log_probs))
        unclipped = np.asarray(_partition_cells(key, log_probs, probit_clip=None))
        assert clipped[0] == clipped[1]
        split += unclipped[0] != unclipped[1]
        est = _partition(key, log_probs, y, log_w, numerics="paper")
        expected = _algorithm4_in_float64(unclipped, np.asarray(log_probs)[..., 0], log_w,
                                          "paper")
        np.testing.assert_allclose(float(est), expected, rtol=1e-5)
    assert split > 0  # the placement differs, and with it the estimate
