"""The ``appendix-b`` config sweeps are the grids the paper's appendix B prints.

Each expected grid is written out from the paper's text (Osband et al., appendix B.2
to B.7), not from the code: the values below are the paper's, and the test checks that
the named sweep holds exactly their product, every other field at its default. Where a
grid point's value is idle (a prior's widths at prior scale 0, one mixture component's
stddev at pi = 0 or 1) the expected points are merged the same way by hand.
"""

import dataclasses
import itertools

import pytest

from neural_testbed import agents
from neural_testbed.agents import bbb, dropout, ensemble, ensemble_plus, hypermodel, sgmcmc


def _varied(config, default) -> dict:
    """The fields of ``config`` that differ from ``default``."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(default, f.name)}


def _check_grid(name: str, expected: set, fields: tuple[str, ...],
                has_default: bool = True) -> tuple:
    spec = agents.get_agent(name)
    sweep = spec.configs("appendix-b")
    assert len(sweep) == len(set(sweep)) == len(expected)  # no config twice
    assert {tuple(getattr(c, f) for f in fields) for c in sweep} == expected
    # Nothing else varies: every other field is the default's.
    assert all(set(_varied(c, spec.default)) <= set(fields) for c in sweep)
    assert (spec.default in sweep) == has_default
    return sweep


def test_ensemble_appendix_b_is_the_papers_b2_grid():
    """B.2: "ensemble size M in {1, 3, 10, 30, 100} and lambda in {10^-4, 10^-3, 10^-2,
    10^-1, 1, 10, 100}", the decay "either lambda 1/(MT) or lambda d sqrt(beta)/(MT)"."""
    sizes = {1, 3, 10, 30, 100}
    lambdas = {1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0}
    decays = {False, True}  # lambda/(MT); lambda d sqrt(beta)/(MT)
    expected = set(itertools.product(sizes, lambdas, decays))
    sweep = _check_grid("ensemble", expected,
                        ("num_ensemble", "l2_weight_decay", "adaptive_weight_scale"))
    assert len(sweep) == 70
    assert sweep == ensemble.ensemble_appendix_b_sweep()
    # The reference's grid, behind the published numbers, is still the default sweep.
    assert len(agents.get_agent("ensemble").configs()) == 18


def test_dropout_appendix_b_is_the_papers_b3_grid():
    """B.3: "dropout rate p_drop in {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, length scale
    l in {0.01, 0.1, 0.3, 1, 3, 10}, number of neural network layers in {2, 3}, and hidden
    layer size in {50, 100}", the decay "either l^2/(2T) (1 - p_drop) or d sqrt(beta) l/T"."""
    rates = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}
    length_scales = {0.01, 0.1, 0.3, 1.0, 3.0, 10.0}
    hidden = {(width,) * layers for layers in (2, 3) for width in (50, 100)}
    decays = {False, True}  # Gal's l^2 (1 - p) / (2T); d sqrt(beta) l / T
    expected = set(itertools.product(rates, length_scales, hidden, decays))
    sweep = _check_grid("dropout", expected,
                        ("dropout_rate", "length_scale", "hidden", "adaptive_weight_scale"))
    assert len(sweep) == 384
    assert not any(c.dropout_input for c in sweep)
    assert sweep == dropout.dropout_appendix_b_sweep()
    assert len(agents.get_agent("dropout").configs()) == 33


def test_sgmcmc_appendix_b_is_the_papers_b5_grid():
    """B.5: lambda "swept over {0.01, 0.1, 0.5, 1}", a learning rate "swept over {10^-5,
    5 x 10^-5, 10^-4, 5 x 10^-4, 10^-3, 5 x 10^-3, 10^-2}", SGLD without momentum and with
    momentum decay 0.9."""
    lambdas = {0.01, 0.1, 0.5, 1.0}
    learning_rates = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2}
    momenta = {0.0, 0.9}
    expected = set(itertools.product(lambdas, learning_rates, momenta))
    sweep = _check_grid("sgmcmc", expected, ("prior_variance", "learning_rate", "momentum"))
    assert len(sweep) == 56
    assert sweep == sgmcmc.sgmcmc_appendix_b_sweep()
    # The reference's grid lacks lambda = 1 (and so has 42 configs).
    reference = agents.get_agent("sgmcmc").configs()
    assert len(reference) == 42 and {c.prior_variance for c in reference} == {0.01, 0.1, 0.5}
    # The chain of appendix B.5: 5 x 10^5 steps, a burn-in of 10^5, a snapshot every 1000.
    assert all((c.num_steps, c.burn_in, c.snapshot_every) == (500_000, 100_000, 1000)
               for c in sweep)


def test_ensemble_plus_appendix_b_is_the_papers_b6_grid():
    """B.6: "ensemble size M in {1, 3, 10, 30, 100} and lambda in {10^-4, ..., 100}", the
    decay "either lambda 1/(MT) or lambda d sqrt(beta)/(MT)", "prior scaling in {0,
    sqrt(beta), 1}" and "bootstrap type (none, exponential, bernoulli)"."""
    sizes = {1, 3, 10, 30, 100}
    lambdas = {1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0}
    decays = {False, True}
    # A prior drawn like the environment, whose logits are its output / beta: the paper's
    # sqrt(beta) and 1 multiply that, giving output / sqrt(beta) and output / beta.
    prior_scales = {(0.0, "sqrt"), (1.0, "sqrt"), (1.0, "linear")}
    bootstraps = {"none", "exponential", "bernoulli"}
    expected = {(n, lam, adaptive, *prior, b) for n, lam, adaptive, prior, b in
                itertools.product(sizes, lambdas, decays, prior_scales, bootstraps)}
    sweep = _check_grid(
        "ensemble+", expected,
        ("num_ensemble", "l2_weight_decay", "adaptive_weight_scale", "prior_scale",
         "temperature_scaling", "bootstrap"),
        has_default=False)  # the default's prior scale, 3, is not the paper's
    assert len(sweep) == 5 * 7 * 2 * 3 * 3 == 630
    assert sweep == ensemble_plus.ensemble_plus_appendix_b_sweep()
    assert len(agents.get_agent("ensemble+").configs()) == 14


def test_hypermodel_appendix_b_is_the_papers_b7_grid():
    """B.7: "index dimension in {1, 3, 5, 7}", the decay "either lambda 1/T or lambda d
    sqrt(beta)/T with lambda in {0.1, 0.3, 1, 3, 10}", bootstrap "none, exponential,
    bernoulli", the prior's "number of hidden layers in {1, 2}, 10 hidden units in each
    layer, and prior scale from {0, sqrt(beta), 1}"."""
    prior_layers = {(10,), (10, 10)}
    points = set(itertools.product(
        {1, 3, 5, 7}, {False, True}, {0.1, 0.3, 1.0, 3.0, 10.0},
        {"none", "exponential", "bernoulli"}, prior_layers,
        {(0.0, "sqrt"), (1.0, "sqrt"), (1.0, "linear")}))
    assert len(points) == 720
    # At prior scale 0 the prior's layers are idle: one point, at the default's (10,).
    expected = {(k, adaptive, lam, b, layers if scale else (10,), scale, scaling)
                for k, adaptive, lam, b, layers, (scale, scaling) in points}
    sweep = _check_grid(
        "hypermodel", expected,
        ("index_dim", "adaptive_weight_scale", "l2_weight_decay", "bootstrap", "prior_hidden",
         "prior_scale", "temperature_scaling"))
    assert len(sweep) == 600
    assert sweep == hypermodel.hypermodel_appendix_b_sweep()
    assert len(agents.get_agent("hypermodel").configs()) == 19


def test_bbb_appendix_b_is_the_papers_b4_grid():
    """B.4: "sigma_1 in {1, 2, 4}, sigma_2 in {0.25, 0.5, 0.75}, p in {0, 0.25, 0.5, 0.75,
    1}, learning rate in {10^-3, 3 x 10^-3}, number of training steps in {500, 1000,
    10000}, number of neural network layers in {2, 3}, hidden layer size in {50, 100},
    and the ratio of the complexity cost to the likelihood cost in {1, d sqrt(beta)}"."""
    hidden = {(width,) * layers for layers in (2, 3) for width in (50, 100)}
    points = set(itertools.product(
        {1.0, 2.0, 4.0}, {0.25, 0.5, 0.75}, {0.0, 0.25, 0.5, 0.75, 1.0}, {1e-3, 3e-3},
        {500, 1000, 10_000}, hidden, {False, True}))
    assert len(points) == 2160
    # pi = 1 leaves sigma_2 idle, pi = 0 sigma_1: one point each, at the grid's first value.
    expected = {(s1 if pi > 0 else 1.0, s2 if pi < 1 else 0.25, pi, lr, n, h, adaptive,
                 "scale_mixture") for s1, s2, pi, lr, n, h, adaptive in points}
    sweep = _check_grid(
        "bbb", expected,
        ("sigma_1", "sigma_2", "mixture_pi", "learning_rate", "num_steps", "hidden",
         "adaptive_weight_scale", "weight_prior"),
        has_default=False)  # the default's prior is a Gaussian of stddev 0.3
    assert len(sweep) == 48 * (27 + 3 + 3) == 1584
    assert sweep == bbb.bbb_appendix_b_sweep()
    assert len(agents.get_agent("bbb").configs()) == 86


@pytest.mark.parametrize("name", ["ensemble", "ensemble+", "hypermodel", "dropout", "bbb",
                                  "sgmcmc"])
def test_appendix_b_is_listed_beside_the_reference_sweep(name):
    spec = agents.get_agent(name)
    assert "appendix-b" in spec.other_sweeps
    with pytest.raises(ValueError, match="'paper', 'appendix-b'"):
        spec.configs("table-1")
