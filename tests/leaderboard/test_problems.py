"""Problem sweeps: stable ids, the paper's grid, the quick subset, bad problems."""

import dataclasses

import jax
import numpy as np
import pytest

from neural_testbed import cli, leaderboard
from neural_testbed.leaderboard import problems


def test_paper_sweep_is_the_papers_grid():
    paper = leaderboard.get_sweep("paper")
    assert len(paper) == 210
    assert {p.temperature for p in paper.values()} == {0.01, 0.1, 0.5}
    assert {p.num_train for p in paper.values()} == {1, 3, 10, 30, 100, 300, 1000}
    assert {p.seed for p in paper.values()} == set(range(10))
    assert all(p.taus == (1, 100) and p.num_test == 1000 and p.num_samples == 1000
               for p in paper.values())


def test_ids_are_stable():
    """Ids are part of stored results: changing them silently breaks comparisons."""
    p = leaderboard.get_sweep("paper")["classification_2d/17"]
    assert (p.temperature, p.num_train, p.seed) == (0.01, 3, 7)
    p = leaderboard.get_sweep("paper")["classification_2d/209"]
    assert (p.temperature, p.num_train, p.seed) == (0.5, 1000, 9)


def test_quick_is_a_subset_of_paper_with_the_same_problems():
    paper, quick = leaderboard.get_sweep("paper"), leaderboard.get_sweep("quick")
    assert 0 < len(quick) < len(paper)
    assert all(paper[pid] == p for pid, p in quick.items())
    assert {p.temperature for p in quick.values()} == {0.01, 0.1, 0.5}


def test_sweeps_cannot_be_mutated():
    with pytest.raises(TypeError):
        leaderboard.SWEEPS["paper"]["x"] = None  # type: ignore[index]


def test_unknown_sweep_names_the_allowed_ones():
    with pytest.raises(ValueError, match="unknown sweep .full.; allowed: quick, paper, smoke"):
        leaderboard.get_sweep("full")


@pytest.mark.parametrize(
    "change, message",
    [({"num_train": 0}, r"num_train \(T\) must be an integer >= 1, got 0"),
     ({"temperature": 0.0}, "temperature must be > 0, got 0.0"),
     ({"taus": (1, 0)}, r"every tau must be an integer >= 1, got \(1, 0\)")],
)
def test_bad_problems_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(leaderboard.get_sweep("paper")["classification_2d/0"], **change)


def test_load_problem_is_deterministic_and_seeded():
    paper = leaderboard.get_sweep("paper")
    env_a, data_a = leaderboard.load_problem(paper["classification_2d/17"])
    env_b, data_b = leaderboard.load_problem(paper["classification_2d/17"])
    np.testing.assert_array_equal(data_a.x, data_b.x)
    _, data_c = leaderboard.load_problem(paper["classification_2d/16"])  # another problem
    assert not np.allclose(data_a.x, data_c.x)
    assert data_a.x.shape == (3, 2)
    assert jax.tree.structure(env_a) == jax.tree.structure(env_b)


def _flat(env):
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(env.params)])


def test_problems_of_one_seed_index_are_independent():
    """Seed 3 at (0.01, T=10) and at (0.1, T=100): different environments, and the
    smaller training set is not a prefix of the larger (the old sweep shared both)."""
    paper = leaderboard.get_sweep("paper")
    a = next(p for p in paper.values() if (p.temperature, p.num_train, p.seed) == (0.01, 10, 3))
    b = next(p for p in paper.values() if (p.temperature, p.num_train, p.seed) == (0.1, 100, 3))
    c = next(p for p in paper.values() if (p.temperature, p.num_train, p.seed) == (0.01, 100, 3))
    env_a, data_a = leaderboard.load_problem(a)
    env_b, data_b = leaderboard.load_problem(b)
    env_c, data_c = leaderboard.load_problem(c)
    assert not np.allclose(_flat(env_a), _flat(env_b))
    assert not np.allclose(_flat(env_a), _flat(env_c))  # same temperature, other T
    for small, large in ((data_a, data_b), (data_a, data_c)):
        assert not np.isin(np.asarray(small.x[:, 0]), np.asarray(large.x[:, 0])).any()


def test_every_problem_of_the_paper_sweep_has_its_own_key_seed():
    paper = leaderboard.get_sweep("paper")
    assert len({p.key_seed for p in paper.values()}) == len(paper)


def test_every_sweep_is_described_in_the_commands_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at hyphens: no wrapping here
    assert list(problems.DESCRIPTIONS) == list(problems.SWEEPS)
    run_help = cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    flat = " ".join(run_help.split())
    for name in problems.SWEEPS:
        assert f"'{name}' (" in flat, name
