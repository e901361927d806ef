"""Which rows count: published rows fill what a store lacks, per problem, and never mix."""

import dataclasses

import pytest

from neural_testbed import agents, base, cli
from neural_testbed.leaderboard import baselines, counted, problems, scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

QUICK = problems.get_sweep("quick")
SMOKE = problems.get_sweep("smoke")
MLP = store_lib.config_hash("mlp", agents.get_agent("mlp").default)
WIDE = agents.get_agent("mlp").default.__class__(hidden=(50,))
WIDE_HASH = store_lib.config_hash("mlp", WIDE)


def _row(agent, config_hash, pid, tau, kl, version="0.1.0", **extra):
    row = run_rows.result_row(agent, config_hash, "{}", QUICK[pid], tau, "auto", 0, estimate=kl,
                            estimate_stderr=0.01, num_clipped=0, accuracy=0.9, ece=0.1,
                            train_seconds=1.0, compile_seconds=0.0, eval_seconds=0.5)
    return store_lib.StoredRow(**{**row.as_dict(), **extra}, version=version, timestamp="t")


def _both(agent, config_hash, ids, kl, **extra):
    return [_row(agent, config_hash, pid, tau, kl * tau, **extra)
            for pid in ids for tau in (1, 100)]


@pytest.fixture
def published(tmp_path):
    """A published table of mlp's default config on all 18 quick problems, KL 1 each."""
    table = baselines.build_table(_both("mlp", MLP, QUICK, 1.0), {"quick": QUICK},
                                  {"quick": ["mlp"]}, "0.1.0", "in a test")
    path = tmp_path / "published.json.gz"
    baselines.write_table(table, path)
    return baselines.load(path)


def test_published_rows_fill_each_problem_the_store_lacks_and_local_rows_win(published):
    local = _both("mlp", MLP, SMOKE, 0.5)  # the default config on 4 of the 18
    rows, notes = counted.counted_rows(local, QUICK, ["mlp"], published)
    sources = {(r.problem_id, r.source) for r in rows}
    assert {pid for pid, source in sources if source == "local"} == set(SMOKE)
    assert {pid for pid, source in sources if source == "published"} == set(QUICK) - set(SMOKE)
    assert len(rows) == 36  # one row per (problem, tau): never both for one problem
    assert any("mlp 14 of 18" in note for note in notes)
    (record,), _ = scoring.score_agents(rows, QUICK)
    assert (record["problems"], record["source"]) == (18, "local+published")
    # 4 problems at 0.5, 14 at 1.0
    assert record["kl_1"] == pytest.approx((4 * 0.5 + 14 * 1.0) / 18)
    assert record["label"] == "mlp [partly published]"


def test_partial_or_other_version_local_rows_are_set_aside_not_mixed(published):
    one_tau = [_row("mlp", MLP, pid, 1, 0.5) for pid in SMOKE]  # tau = 1 only
    older = _both("mlp", MLP, [min(set(QUICK) - set(SMOKE))], 0.25, version="0.0.9")
    rows, notes = counted.counted_rows(one_tau + older, QUICK, ["mlp"], published)
    assert {r.source for r in rows} == {"published"} and len(rows) == 36
    assert all(r.kl == r.tau * 1.0 for r in rows)
    assert any("not mixed" in note for note in notes)


def test_a_non_default_config_is_its_own_row_and_never_the_normaliser(published):
    local = _both("mlp", WIDE_HASH, SMOKE, 0.5) + _both("mine", "M", QUICK, 2.0)
    rows, _ = counted.counted_rows(local, QUICK, ["mlp"], published)
    records, _ = scoring.score_agents(rows, QUICK)
    mlp = [r for r in records if r["agent"] == "mlp"]
    # The tuned choice covers the most problems: the default, all published; the wide
    # config's 4 problems never merge into it.
    assert [(r["config_hash"], r["problems"], r["source"]) for r in mlp] == [
        (MLP, 18, "published")]
    (mine,) = [r for r in records if r["agent"] == "mine"]
    assert mine["kl_1_norm"] == pytest.approx(2.0)  # against the default config's 1.0
    wide = scoring.score_candidates(rows, QUICK)
    assert {(r["config_hash"], r["problems"]) for r in wide if r["agent"] == "mlp"} == {
        (MLP, 18), (WIDE_HASH, 4)}


def test_the_default_config_keeps_a_row_beside_a_better_tuned_config():
    ids = list(SMOKE)
    rows = _both("mlp", MLP, ids, 1.0) + _both("mlp", WIDE_HASH, ids, 0.5)
    records, _ = scoring.score_agents(rows, SMOKE)
    assert [(r["label"], r["config_hash"], r["kl_1_norm"]) for r in records] == [
        ("mlp", WIDE_HASH, pytest.approx(0.5)), ("mlp (default)", MLP, pytest.approx(1.0))]


def test_rows_of_other_data_under_the_same_id_do_not_count():
    pid = "classification_2d/90"
    edited = dataclasses.replace(QUICK[pid], temperature=0.5)  # same id, other problem
    stale = [dataclasses.replace(r, problem_hash=base.definition_hash(edited))
             for r in _both("mlp", MLP, [pid], 0.5)]
    rows, notes = counted.counted_rows(stale + _both("mlp", MLP, ["classification_2d/91"], 0.7),
                                       QUICK)
    assert {r.problem_id for r in rows} == {"classification_2d/91"}
    assert any("2 stored rows" in n and "other data" in n for n in notes)
    assert scoring.score_agents(stale, {pid: QUICK[pid]})[0] == []  # scoring checks it too


def test_compare_keeps_every_published_pair_after_a_partial_local_run(published, tmp_path,
                                                                      capsys, monkeypatch):
    """The issue's case: one local run of the baseline on a smaller sweep used to drop
    its published rows everywhere, and the comparison from 18 pairs to 4."""
    monkeypatch.setattr(baselines, "load", lambda path=None: published)
    db = str(tmp_path / "r.db")
    with store_lib.ResultsStore(db) as store:
        store.merge(_both("mine", "M", QUICK, 2.0) + _both("mlp", MLP, SMOKE, 0.5))
    assert cli.main(["compare", "--agent", "mine", "--baseline", "mlp", "--sweep", "quick",
                     "--db", db, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    pooled = [line for line in out.splitlines() if line.startswith("pooled,")]
    assert len(pooled) == 2 and all(",18," in line for line in pooled)
    assert all("local+published" in line for line in pooled)
