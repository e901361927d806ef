"""The ``appendix-b`` config sweeps are the grids the paper's appendix B prints.

Each expected grid is written out from the paper's text (Osband et al., appendix B.2,
B.3 and B.5), not from the code: the values below are the paper's, and the test checks
that the named sweep holds exactly their product, every other field at its default.
"""

import dataclasses
import itertools

import pytest

from neural_testbed import agents
from neural_testbed.agents import dropout, ensemble, sgmcmc


def _varied(config, default) -> dict:
    """The fields of ``config`` that differ from ``default``."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(default, f.name)}


def _check_grid(name: str, expected: set, fields: tuple[str, ...]) -> tuple:
    spec = agents.get_agent(name)
    sweep = spec.configs("appendix-b")
    assert len(sweep) == len(set(sweep)) == len(expected)  # no config twice
    assert {tuple(getattr(c, f) for f in fields) for c in sweep} == expected
    # Nothing else varies: every other field is the default's.
    assert all(set(_varied(c, spec.default)) <= set(fields) for c in sweep)
    assert spec.default in sweep
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


@pytest.mark.parametrize("name", ["ensemble", "dropout", "sgmcmc"])
def test_appendix_b_is_listed_beside_the_reference_sweep(name):
    spec = agents.get_agent(name)
    assert "appendix-b" in spec.other_sweeps
    with pytest.raises(ValueError, match="'paper', 'appendix-b'"):
        spec.configs("table-1")
