"""Published baseline results: the table, its use by compare/leaderboard, and reproduce."""

import dataclasses
import functools
import gzip
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from neural_testbed import agents, base, cli
from neural_testbed import run as sweep
from neural_testbed.leaderboard import baselines, problems, store

SMOKE = problems.get_sweep("smoke")


@pytest.fixture(scope="module")
def mlp_rows():
    """mlp's default config on the smoke sweep, as a store holds them."""
    spec = agents.get_agent("mlp")
    rows = sweep.run_agent(functools.partial(spec.make, spec.default), SMOKE.values(), "mlp",
                           config=spec.default, progress=False)
    return [store.StoredRow(**r.as_dict(), version="0.1.0", timestamp="2026-11-27T00:00:00+00:00")
            for r in rows]


@pytest.fixture
def published(tmp_path, mlp_rows, monkeypatch):
    """A table of mlp's smoke rows in place of the shipped one."""
    table = baselines.build_table(mlp_rows, {"smoke": SMOKE}, {"smoke": ["mlp", "ensemble"]},
                                  "0.1.0", "in a test")
    path = tmp_path / "published.json.gz"
    baselines.write_table(table, path)
    monkeypatch.setattr(baselines, "PUBLISHED_TABLE", path)
    return path


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_the_table_round_trips_and_says_how_far_it_got(published, mlp_rows):
    loaded = baselines.load(published)
    assert loaded.version == "baselines v1, neural-testbed 0.1.0"
    assert sorted((r.problem_id, r.tau, r.kl) for r in loaded.rows) == sorted(
        (r.problem_id, r.tau, r.kl) for r in mlp_rows)
    assert {r.source for r in loaded.rows} == {"published"}
    assert {(p["agent"], p["problems"], p["failed"], p["of"]) for p in loaded.progress} == {
        ("mlp", 4, 0, 4), ("ensemble", 0, 0, 4)}
    # The scalar diagnostics `leaderboard --metrics` reads are kept, the per-bin arrays not.
    kept = json.loads(loaded.rows[0].diagnostics)
    assert "mutual_information" in kept and "reliability" not in kept
    # Rewriting the same table gives the same bytes (a clean diff when it grows).
    again = published.with_name("again.json.gz")
    with gzip.open(published, "rt") as f:
        baselines.write_table(json.load(f), again)
    assert again.read_bytes() == published.read_bytes()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_each_part_of_the_table_says_where_it_was_computed(tmp_path, mlp_rows):
    # mlp's rows from one machine, ensemble's (the same numbers relabelled) from another,
    # on two sweeps that share no problem: describe names only the machines of the
    # agents and problems a command uses.
    ensemble = [dataclasses.replace(r, agent="ensemble", config_hash=store.config_hash(
        "ensemble", agents.get_agent("ensemble").default)) for r in mlp_rows]
    other = {"other/0": SMOKE[next(iter(SMOKE))]}
    table = baselines.build_table(
        mlp_rows + ensemble, {"smoke": SMOKE, "other": other},
        {"smoke": ["mlp", "ensemble"], "other": ["mlp"]}, "0.1.0",
        lambda agent, sweep, done: {("mlp", "smoke"): "on a CPU", ("ensemble", "smoke"): "on a GPU",
                                    ("mlp", "other"): "on a TPU"}[agent, sweep])
    path = tmp_path / "mixed.json.gz"
    baselines.write_table(table, path)
    loaded = baselines.load(path)
    assert loaded.computed == "on a CPU / on a GPU"  # "other" has no rows: not named
    both = loaded.describe()
    assert "mlp: on a CPU" in both and "ensemble: on a GPU" in both
    assert loaded.describe(["ensemble"]).endswith("computed on a GPU")
    assert loaded.describe(["mlp"], list(SMOKE)).endswith("computed on a CPU")
    assert "on a TPU" not in loaded.describe(["mlp"], ["other/0"])  # no rows there


def test_the_table_keeps_an_agents_own_report_so_the_leaderboard_still_flags_it(
        tmp_path, mlp_rows, capsys):
    """A published hmc row whose chains failed must stay flagged: the table keeps the
    agent's report (``agent_*``, base.Agent.report) beside the metrics, not the per-bin
    arrays."""
    report = {"agent_converged": 0.0, "agent_rhat": 1.4}
    flagged = [dataclasses.replace(r, diagnostics=json.dumps(
        {**json.loads(r.diagnostics), **report})) for r in mlp_rows]
    path = tmp_path / "flagged.json.gz"
    baselines.write_table(baselines.build_table(flagged, {"smoke": SMOKE}, {"smoke": ["mlp"]},
                                                "0.1.0", "test"), path)
    for row in baselines.load(path).rows:
        kept = json.loads(row.diagnostics)
        assert report.items() <= kept.items() and "reliability" not in kept, kept
    db = tmp_path / "flagged.db"
    with store.ResultsStore(db) as results:
        results.merge(list(baselines.load(path).rows))
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(db), "--verbose"]) == 0
    assert "UNCONVERGED" in capsys.readouterr().out


def test_rows_of_other_configs_and_problem_definitions_are_left_out(mlp_rows):
    other = [dataclasses.replace(r, config_hash="0" * 16) for r in mlp_rows]  # not the default
    table = baselines.build_table(mlp_rows + other, {"smoke": SMOKE}, {"smoke": ["mlp"]},
                                  "0.1.0", "test")
    assert len(table["rows"]) == len(mlp_rows)
    published = baselines.Published("v", "c", tuple(mlp_rows), {
        pid: (*sig[:3], tuple(sig[3])) for pid, sig in table["problems"].items()}, ())
    rows, notes = baselines.rows_for(published, ["mlp"], SMOKE)
    assert len(rows) == len(mlp_rows) and not notes
    changed = {pid: dataclasses.replace(p, num_samples=p.num_samples + 1)
               for pid, p in SMOKE.items()}
    rows, notes = baselines.rows_for(published, ["mlp"], changed)
    assert rows == [] and "4 problems have published rows of another definition" in notes[0]


def test_a_reproduction_sample_visits_every_setting_before_a_second_seed(published):
    sample = baselines.reproduce_sample(baselines.load(published), "mlp", SMOKE, 3)
    settings = [p.stratum for p in sample]
    assert len(set(settings[:2])) == 2 and len(sample) == 3  # smoke: 2 settings x 2 seeds


def test_agreement_is_within_three_standard_errors_of_the_difference(mlp_rows):
    row = dataclasses.replace(mlp_rows[0], kl=1.0, kl_stderr=0.03)
    near = dataclasses.replace(row, kl=1.0 + 2.9 * 0.03 * np.sqrt(2))
    far = dataclasses.replace(row, kl=1.0 + 3.1 * 0.03 * np.sqrt(2))
    assert baselines.agreement(row, near, "kl")["agree"]
    assert not baselines.agreement(row, far, "kl")["agree"]
    real = dataclasses.replace(row, metric="nll", kl=None, kl_stderr=None, nll=1.0,
                               nll_stderr=0.03)  # a real-data row: its NLL is compared
    assert baselines.agreement(real, dataclasses.replace(real, nll=far.kl), "nll") == (
        baselines.agreement(row, far, "kl"))


def test_paired_agreement_asks_whether_the_differences_average_to_zero():
    """Known answers: differences of +-3, +-2, +-1 average to exactly 0 (agree, however far
    each row is); 5.2 +- 0.37 (the sample's standard error of the mean of 5, 6, 4, 5, 6)
    is 14 standard errors from 0; four problems are too few to tell."""
    def records(tau, diffs):
        return [{"tau": tau, "diff": d} for d in diffs]

    checks = baselines.paired_agreement(records(1, [3, -3, 2, -2, 1, -1])
                                        + records(100, [5, 6, 4, 5, 6]) + records(10, [1] * 4))
    by_tau = {c["tau"]: c for c in checks}
    assert by_tau[1]["mean_diff"] == 0 and by_tau[1]["agree"] is True
    assert by_tau[100]["mean_diff"] == pytest.approx(5.2)
    assert by_tau[100]["stderr"] == pytest.approx(np.std([5, 6, 4, 5, 6], ddof=1) / np.sqrt(5))
    assert by_tau[100]["agree"] is False
    assert by_tau[10]["problems"] == 4 and by_tau[10]["agree"] is None


QUICK = problems.get_sweep("quick")


@pytest.mark.parametrize("shift, status", [(0.0, 0), (5.0, 1)])
def test_reproduce_accepts_rows_that_moved_with_training_only_if_they_agree_on_average(
        mlp_rows, tmp_path, monkeypatch, capsys, shift, status):
    """Published KLs of 10 (standard error 0.1), recomputed 10 + shift +- 1-2 (as a chaotic
    training run moves them): every row is off by over 3 standard errors; with no
    shift the differences average to 0 and reproduce passes, with a shift of 5 (7 standard
    errors of the mean difference, 0.7) it fails."""
    table_rows = [dataclasses.replace(mlp_rows[0], problem_id=pid, tau=tau, kl=10.0,
                                      kl_stderr=0.1)
                  for pid, p in QUICK.items() for tau in p.taus]
    table = baselines.build_table(table_rows, {"quick": QUICK}, {"quick": ["mlp"]}, "0.1.0", "t")
    baselines.write_table(table, tmp_path / "published.json.gz")
    monkeypatch.setattr(baselines, "PUBLISHED_TABLE", tmp_path / "published.json.gz")
    offsets = [2.0, -2.0, 1.5, -1.5, 1.0, -1.0]

    def recompute(agent, sample, name, **kwargs):
        return [dataclasses.replace(mlp_rows[0], problem_id=p.problem_id, tau=tau,
                                    kl=10.0 + shift + offsets[i], kl_stderr=0.1)
                for i, p in enumerate(sample) for tau in p.taus]

    monkeypatch.setattr(sweep, "run_agent", recompute)
    assert cli.main(["reproduce", "--agent", "mlp", "--sweep", "quick"]) == status
    out = capsys.readouterr().out
    assert "0 of 12 rows agree" in out
    if status == 0:
        assert "tau = 100: mean difference +0 ± 0.7 over 6 problems: zero within" in out
        assert "on average the published rows are reproduced" in out
    else:
        assert "tau = 1: mean difference +5 ± 0.7 over 6 problems: not zero" in out


def test_leaderboard_with_baselines_works_without_a_store(published, tmp_path, capsys):
    db = tmp_path / "none.db"
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(db), "--with-baselines",
                     "--format", "csv", "--verbose"]) == 0  # the note in full
    out, err = capsys.readouterr()
    assert out.splitlines()[1].startswith("mlp,")
    assert "published baseline rows (baselines v1, neural-testbed 0.1.0" in err
    assert "(marked published): mlp 4 of 4" in err
    assert out.splitlines()[1].startswith("mlp,published,")
    assert not db.exists()  # nothing is created


def test_compare_takes_a_missing_baseline_from_the_published_rows(published, mlp_rows,
                                                                   tmp_path, capsys):
    db = str(tmp_path / "mine.db")
    with store.ResultsStore(db) as results:  # "mine": mlp's rows, a little worse
        results.merge([dataclasses.replace(r, agent="mine", kl=r.kl * 1.5) for r in mlp_rows])
    assert cli.main(["compare", "--agent", "mine", "--sweep", "smoke", "--db", db]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("note: published rows fill gaps of 1 agent (source column)"), err
    assert cli.main(["compare", "--agent", "mine", "--sweep", "smoke", "--db", db,
                     "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert "(marked published): mlp 4 of 4" in err
    assert "mine vs mlp:" in out
    assert cli.main(["compare", "--agent", "mine", "--baseline", "ensemble", "--sweep", "smoke",
                     "--db", db]) == 2
    assert "neither" in capsys.readouterr().err


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_reproduce_agrees_with_the_published_rows_and_catches_a_wrong_one(
        published, mlp_rows, tmp_path, capsys):
    assert cli.main(["reproduce", "--agent", "mlp", "--sweep", "smoke", "--problems", "2",
                     "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "4 of 4 rows agree" in out
    # A published value moved by 10 standard errors is caught.
    wrong = [dataclasses.replace(r, kl=r.kl + 10 * r.kl_stderr * np.sqrt(2)) for r in mlp_rows]
    table = baselines.build_table(wrong, {"smoke": SMOKE}, {"smoke": ["mlp"]}, "0.1.0", "test")
    baselines.write_table(table, published)
    assert cli.main(["reproduce", "--agent", "mlp", "--sweep", "smoke", "--problems", "1"]) == 1
    assert "0 of 2 rows agree" in capsys.readouterr().out
    assert cli.main(["reproduce", "--agent", "ensemble", "--sweep", "smoke"]) == 2
    assert "no rows of 'ensemble' on the smoke sweep; on it they have mlp\n" in (
        capsys.readouterr().err)


def test_the_shipped_table_is_of_todays_problems_and_default_configs():
    """A change to a problem's definition or an agent's default leaves published rows
    that would never be used: this fails until the table is recomputed."""
    shipped = baselines.load(baselines.PUBLISHED_TABLE)
    assert shipped.rows, "the shipped table is empty"
    every = {pid: p for name in shipped.sweeps for pid, p in problems.get_sweep(name).items()}
    for pid, definition in shipped.definitions.items():
        p = every[pid]
        assert definition == (p.key_seed, p.num_test, p.num_samples, p.taus), pid
    for r in shipped.rows:
        assert r.problem_hash == base.definition_hash(every[r.problem_id]), r.problem_id
        spec = agents.get_agent(r.agent)
        assert r.config_hash == store.config_hash(r.agent, spec.default), r.agent
    progress = {(p["agent"], p["sweep"]): (p["problems"], p["of"]) for p in shipped.progress}
    assert progress[("mlp", "paper")] == (210, 210)


def test_a_failed_row_is_counted_and_a_recomputed_part_is_stamped_anew(tmp_path, mlp_rows):
    """The progress says how many problems have a failed row (oracle_gp's GPU rows had 13
    unnoticed); a part whose rows were recomputed (same problems, new times) is stamped
    with where it was recomputed, and an unchanged part keeps its stamp; the README's table
    names each part's stamp by a letter."""
    spec = importlib.util.spec_from_file_location(
        "publish_baselines", pathlib.Path(__file__).parents[2] / "tools/publish_baselines.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    db, out = str(tmp_path / "store.db"), tmp_path / "table.json.gz"
    failed = dataclasses.replace(mlp_rows[0], status="failed", kl=None, error="NaN logits")
    with store.ResultsStore(db) as results:
        results.merge([failed] + mlp_rows[1:])
    tool.pack(db, ["mlp"], ["smoke"], out, "on machine A")
    (part,) = baselines.load(out).progress
    assert (part["problems"], part["failed"], part["computed"]) == (4, 1, "on machine A")
    markdown = tool.progress_markdown(out)  # each part names its note on where it was computed
    assert "| mlp | 4 of 4 (1 with a failed row) (a) |" in markdown
    assert markdown.endswith("\n- (a) on machine A")
    tool.pack(db, ["mlp"], ["smoke"], out, "on machine B")  # nothing new
    assert baselines.load(out).progress[0]["computed"] == "on machine A"
    recomputed = str(tmp_path / "recomputed.db")  # the store after recomputing that row
    with store.ResultsStore(recomputed) as results:
        results.merge([dataclasses.replace(mlp_rows[0], timestamp="2026-11-28T00:00:00+00:00")]
                      + mlp_rows[1:])
    tool.pack(recomputed, ["mlp"], ["smoke"], out, "on machine B")
    (part,) = baselines.load(out).progress
    assert (part["problems"], part["failed"], part["computed"]) == (4, 0, "on machine B")
    assert tool.progress_markdown(out).endswith("| mlp | 4 of 4 (a) |\n\n- (a) on machine B")


def test_the_tool_refuses_to_rewrite_a_table_without_parts_it_holds(tmp_path, mlp_rows):
    """The table is rewritten whole: packing it for fewer agents or sweeps than it holds
    (``--agents uniform --sweeps smoke`` beside ``--resume-from-table``) would drop every
    other part. One line names what would be lost; no store is made, the table is kept."""
    ensemble = [dataclasses.replace(r, agent="ensemble", config_hash=store.config_hash(
        "ensemble", agents.get_agent("ensemble").default)) for r in mlp_rows]
    out = tmp_path / "table.json.gz"
    baselines.write_table(baselines.build_table(
        mlp_rows + ensemble, {"smoke": SMOKE}, {"smoke": ["mlp", "ensemble"]}, "0.1.0", "t"),
        out)
    before = out.read_bytes()
    tool = pathlib.Path(__file__).parents[2] / "tools/publish_baselines.py"
    db = tmp_path / "store.db"
    done = subprocess.run([sys.executable, str(tool), "--db", str(db), "--out", str(out),
                           "--resume-from-table", "--agents", "mlp", "--sweeps", "smoke"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(tool.parents[1])))
    assert done.returncode == 2 and "would lose its rows of ensemble on smoke" in done.stderr, (
        done.stderr)
    assert not db.exists() and out.read_bytes() == before


def test_the_tool_refuses_to_resume_from_a_missing_table_before_making_the_store(tmp_path):
    """Else the empty store it made would stop a second call from filling it."""
    tool = pathlib.Path(__file__).parents[2] / "tools/publish_baselines.py"
    db = tmp_path / "store.db"
    done = subprocess.run([sys.executable, str(tool), "--db", str(db), "--out",
                           str(tmp_path / "missing.json.gz"), "--resume-from-table"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(tool.parents[1])))
    assert done.returncode == 2 and "missing.json.gz" in done.stderr, done.stderr
    assert "which does not exist" in done.stderr and not db.exists()
