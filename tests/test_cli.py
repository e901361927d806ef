"""The neural-testbed command, end to end (in process)."""

import contextlib
import csv
import io
import dataclasses
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from neural_testbed import agents, cli, diagnostics, leaderboard, memory
from neural_testbed import run as sweep_lib
from neural_testbed.leaderboard import baselines, run_report
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import options as run_options
from neural_testbed.run import programs as runner
from neural_testbed.run import rows as run_rows


def test_agents_lists_mlp_with_its_defaults(capsys):
    assert cli.main(["agents"]) == 0
    out = capsys.readouterr().out
    assert "mlp:" in out and "l2_weight_decay = 1.0" in out and "sweep: 14 configs" in out


def test_problems_lists_the_sweep(capsys):
    assert cli.main(["problems", "--sweep", "quick"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + len(leaderboard.get_sweep("quick"))
    assert lines[1].split()[0] == next(iter(leaderboard.get_sweep("quick")))


def test_run_prints_each_problem_and_an_aggregate_and_writes_csv(tmp_path, capsys):
    # taus 1 and 2: the command's output, not the tau = 100 estimate, is under test here.
    out_csv = tmp_path / "rows.csv"
    status = cli.main(["run", "--agent", "mlp", "--set", "num_steps=50", "--quiet", "--sweep",
                       "smoke", "--taus", "1,2", "--db", str(tmp_path / "r.db"),
                       "--output", str(out_csv), "--units-at-once", "1"])
    assert status == 0
    out = capsys.readouterr().out
    assert "s of it compiling); 8 rows computed, 0 reused" in out  # one unit at a time
    for pid in leaderboard.get_sweep("smoke"):
        assert pid in out
    assert "aggregate (stratified ± se): d_KL^1 = " in out
    assert "d_KL^2 = " in out and "d_KL^agg = " in out
    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(leaderboard.get_sweep("smoke"))
    assert {r["tau"] for r in rows} == {"1", "2"} and {r["status"] for r in rows} == {"ok"}


def test_run_shows_and_writes_only_its_own_rows_beside_failed_rows_at_other_taus(
        tmp_path, capsys):
    """Failed rows of an earlier run at other taus (same problems, config and seed) are
    not this run's: they used to crash its table (None seconds) and leak into --output
    and the failure report."""
    db, out_csv = tmp_path / "r.db", tmp_path / "rows.csv"
    config = agents.MLPConfig(num_steps=50)
    smoke = leaderboard.get_sweep("smoke")
    earlier = [dataclasses.replace(p, taus=(7,)) for p in smoke.values()]
    with leaderboard.ResultsStore(db) as store:
        store.write([dataclasses.replace(r, train_seconds=None, eval_seconds=None)
                     for r in run_rows.failed_rows("mlp", config, earlier, "auto", 0, "boom")])
    argv = ["run", "--agent", "mlp", "--set", "num_steps=50", "--quiet", "--sweep", "smoke",
            "--taus", "1,2", "--db", str(db), "--units-at-once", "1"]
    for extra in ([], ["--output", str(out_csv)]):  # computed, then reused
        assert cli.main(argv + extra) == 0
        out, err = capsys.readouterr()
        assert "failed" not in out.lower() and "FAILED" not in err
    assert "0 rows computed, 8 reused" in out
    with open(out_csv) as f:
        assert sorted({(r["tau"], r["status"]) for r in csv.DictReader(f)}) == [
            ("1", "ok"), ("2", "ok")]


def test_run_defaults_to_the_quick_sweep_at_taus_1_and_100():
    args = cli.build_parser().parse_args(["run", "--agent", "mlp"])
    assert args.sweep == "quick" and args.taus is None
    assert {p.taus for p in leaderboard.get_sweep("quick").values()} == {(1, 100)}


def test_run_of_one_shard_counts_the_other_shards_problems_as_not_computed(tmp_path, capsys):
    # smoke has two shapes (T = 10 and 100), so shard 1/2 computes the two T = 10 problems.
    status = cli.main(["run", "--agent", "mlp", "--set", "num_steps=50", "--quiet", "--sweep",
                       "smoke", "--taus", "1,2", "--shard", "1/2", "--db", str(tmp_path / "s.db"),
                       "--units-at-once", "2"])
    assert status == 0
    out = capsys.readouterr().out
    assert "s compiling, added up over the units run side by side)" in out.splitlines()[-1]
    aggregate = out.splitlines()[-2]
    assert aggregate.endswith("2 of 4 problems, 2 not computed here (other shards)"), aggregate
    assert "FAILED" not in aggregate


@pytest.mark.parametrize(
    "argv, message",
    [(["run", "--agent", "nope"], "unknown agent 'nope'; registered agents: "),
     (["run", "--agent", "mlp", "--set", "bogus=1"], "--set bogus: unknown hyperparameter"),
     (["run", "--agent", "mlp", "--set", "num_steps=1.5"], "--set num_steps='1.5': expected")],
)
def test_bad_input_is_one_clear_line_and_status_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unknown_sweep_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--agent", "mlp", "--sweep", "full"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'full' (choose from" in capsys.readouterr().err


def test_help_explains_every_run_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    for option in ("--agent", "--sweep", "--set", "--output", "--seed", "--estimator",
                   "--problems-per-batch", "--dataset", "--label-column"):
        assert option in out
    assert "Not an agent's minibatch size" in " ".join(out.split())  # however argparse wraps


def test_batch_size_means_one_thing_only_xlls():
    """--batch-size was also an alias of --problems-per-batch (beside an agent's minibatch
    size, set with --set batch_size=N): it is xll's alone now."""
    args = cli.build_parser().parse_args(["run", "--agent", "mlp", "--problems-per-batch", "3"])
    assert args.problems_per_batch == 3
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--agent", "mlp", "--batch-size", "3"])


# Hardening: every bad input or unusable path is one line and status 2, before any work.


@dataclasses.dataclass(frozen=True)
class GhostConfig:  # an agent known only from a store (never registered)
    width: int = 3


@pytest.fixture
def store(tmp_path, smoke_rows):
    """A store with mlp (two configs), and ghost, an agent not registered here."""
    path = tmp_path / "r.db"
    with leaderboard.ResultsStore(path) as s:
        s.write(smoke_rows("mlp", agents.MLPConfig(), 0.2)
                + smoke_rows("mlp", agents.MLPConfig(num_steps=30, hidden=(20,)), 0.1)
                + smoke_rows("ghost", GhostConfig(), 0.3))
    return path


@contextlib.contextmanager
def _read_only(path):
    """Makes a file or directory unwritable for this process (root included: chattr +i)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root where chattr +i is unavailable: nothing is read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize(
    "args, fragments",
    [(["--seed", "-1"], ["--seed", "from 0 to 4294967295, got -1"]),
     (["--seed", str(2**32)], ["--seed", "got 4294967296"]),
     (["--workers", "0"], ["--workers", "integer >= 1, got 0"]),
     (["--problems-per-batch", "0"], ["--problems-per-batch", "integer >= 1, got 0"]),
     (["--set", "l2_weight_decay=inf"], ["l2_weight_decay must be a finite number, got inf"]),
     (["--set", "hidden=50,0"], ["hidden must be zero or more widths >= 1"]),
     (["--taus", "1,x"], ["--taus '1,x': expected integers >= 1"]),
     (["--taus", "0,5"], ["--taus '0,5'"]),
     (["--problems", "classification_2d/17"],
      ["--problems: 'classification_2d/17' is not a problem of the smoke sweep"])],
)
def test_bad_run_settings_are_refused_before_the_store_is_made(tmp_path, capsys, no_work, args,
                                                             fragments, one_error_line):
    db = tmp_path / "new.db"
    for command in (["run", "--agent", "mlp"], ["sweep", "--agent", "mlp"]):
        if command[0] == "sweep" and "--set" in args:
            continue
        assert cli.main([*command, "--sweep", "smoke", "--db", str(db), *args]) == 2
        one_error_line(*fragments)
        assert not db.exists()  # not even an empty store file


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_sweep_runs_a_named_config_sweep_and_refuses_an_unknown_one(tmp_path, capsys,
                                                                     monkeypatch, one_error_line):
    """`sweep --configs prior-functions` hands ensemble+'s Figure 7 configs to the sweep;
    an unknown name is one line naming the agent's sweeps, before a store is made."""
    db = tmp_path / "new.db"
    assert cli.main(["sweep", "--agent", "ensemble+", "--configs", "priors", "--db",
                     str(db)]) == 2
    one_error_line("--configs 'priors'", "'paper', 'appendix-b', 'prior-functions'")
    assert cli.main(["sweep", "--agent", "mlp", "--configs", "prior-functions", "--db",
                     str(db)]) == 2
    one_error_line("this agent's config sweeps are 'paper'")
    assert not db.exists()
    handed = []

    def run_sweep(name, configs, problems, store, **kwargs):
        handed.append((name, tuple(configs)))
        raise KeyboardInterrupt  # stop before any work, as Ctrl-C would
    monkeypatch.setattr(sweep_lib, "run_sweep", run_sweep)
    assert cli.main(["sweep", "--agent", "ensemble+", "--configs", "prior-functions",
                     "--sweep", "smoke", "--db", str(db)]) == 130
    assert handed == [("ensemble+", agents.ensemble_plus_prior_sweep())]
    assert "11 configs (prior-functions) x 4 problems" in capsys.readouterr().err
    assert cli.main(["agents"]) == 0
    assert "sweep --configs prior-functions: 11 configs" in capsys.readouterr().out


def test_unusable_output_paths_are_refused_before_any_work(
        tmp_path, capsys, no_work, store, one_error_line):
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("x")
    cases = [
        (["run", "--agent", "mlp", "--output", str(tmp_path / "a_dir")], "is a directory"),
        (["run", "--agent", "mlp", "--output", str(tmp_path / "no" / "x.csv")],
         "there is no directory"),
        (["export", "-o", str(tmp_path / "a_dir")], "is a directory"),
        (["plot", "--out", str(tmp_path / "a_file")], "is a file, not a directory"),
        (["plot", "--out", str(tmp_path / "a_file" / "figs")], "is under the file"),
    ]
    for argv, fragment in cases:
        assert cli.main([*argv, "--db", str(store)]) == 2, argv
        one_error_line(fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_dir", "a_file", "r.db"]
    assert not list((tmp_path / "a_dir").iterdir())


def test_unwritable_output_directories_are_refused_before_any_work(tmp_path, capsys, no_work,
                                                                   store, one_error_line):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with _read_only(shelf):
        for argv in (["run", "--agent", "mlp", "--output", str(shelf / "x.csv")],
                     ["export", "-o", str(shelf / "x.csv")],
                     ["plot", "--out", str(shelf / "figs")]):
            assert cli.main([*argv, "--db", str(store)]) == 2, argv
            one_error_line("is not writable")
    assert not list(shelf.iterdir())


def test_a_read_only_store_is_refused_before_any_work(
        tmp_path, capsys, no_work, store, one_error_line):
    before = store.read_bytes()
    with _read_only(store):
        for argv in (["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(store)],
                     ["sweep", "--agent", "mlp", "--sweep", "smoke", "--db", str(store)],
                     ["merge", str(tmp_path / "missing.db"), "-o", str(store)]):
            assert cli.main(argv) == 2, argv
            one_error_line("is read-only")
        assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store)]) == 0
    assert store.read_bytes() == before


def test_a_store_in_a_read_only_directory_is_refused_before_any_work(
        tmp_path, capsys, no_work, one_error_line):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with _read_only(shelf):
        assert cli.main(["run", "--agent", "mlp", "--db", str(shelf / "r.db")]) == 2
        one_error_line("is read-only")
    assert not list(shelf.iterdir())


def test_a_foreign_sqlite_file_is_byte_identical_after_every_command(
        tmp_path, capsys, no_work, one_error_line):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    before = path.read_bytes()
    for argv in (["leaderboard"], ["export", "-o", str(tmp_path / "x.csv")],
                 ["run", "--agent", "mlp", "--sweep", "smoke"], ["compare", "--agent", "mlp"],
                 ["sweep", "--agent", "mlp", "--sweep", "smoke"]):
        assert cli.main([*argv, "--db", str(path)]) == 2, argv
        one_error_line("is a SQLite database but not a neural-testbed results store")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_an_empty_file_stays_empty_after_read_only_commands(tmp_path, capsys, one_error_line):
    path = tmp_path / "empty.db"
    path.touch()
    for argv in (["leaderboard"], ["export", "-o", str(tmp_path / "x.csv")],
                 ["compare", "--agent", "mlp"]):
        assert cli.main([*argv, "--db", str(path)]) == 2, argv
        one_error_line("is empty: it holds no results yet")
    assert path.stat().st_size == 0


def test_leaderboard_fits_the_terminal_and_shows_every_column_when_wide(
        store, capsys, monkeypatch):
    """By default the table fits the terminal's width (100 columns where it has none):
    scores first, each with its standard error in one cell, and a line names what was
    left out; --wide has every column; --verbose adds each config as JSON."""
    monkeypatch.setenv("COLUMNS", "100")  # read before the terminal's own width
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100, out
    header = next(line for line in out.splitlines() if line.startswith("agent"))
    assert header.split()[:3] == ["agent", "kl_1", "kl_100"], header
    mlp = next(line for line in out.splitlines() if line.startswith("mlp"))
    assert re.match(r"mlp\s+0\.\d+±0\.\d+\s", mlp), mlp  # the best config's kl_1 ± se
    assert "not shown at this width:" in out and "(--wide shows every column)" in out
    monkeypatch.setenv("COLUMNS", "250")  # a wide terminal shows the config changes
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert "hidden=20 num_steps=30" in out  # the best mlp config, as --set reads it
    ghost = next(line for line in out.splitlines() if line.startswith("ghost"))
    assert "(unregistered: see --verbose)" in ghost
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "kl_1_norm_stderr" in out and "seconds_per_problem" in out and '"num_steps"' not in out
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert '"hidden":[20],' in out and '{"width":3}' in out


def test_notes_share_one_line_unless_verbose(store, capsys, monkeypatch):
    """Published rows fill mlp's and ghost's gaps and more agents join the ranking: several
    notes, whose briefs share one line; --verbose prints each in full. A single note is
    printed in full anyway (test_leaderboard_refuses_a_baseline_that_is_nowhere)."""
    argv = ["leaderboard", "--sweep", "smoke", "--db", str(store), "--with-baselines"]
    assert cli.main(argv) == 0
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("note: published rows fill "), line
    assert re.search(r"\((\d+) notes: --verbose shows them in full\)$", line), line
    count = int(re.search(r"\((\d+) notes", line).group(1))
    assert cli.main(argv + ["--verbose"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == count >= 2 and all(line.startswith("note: ") for line in err), err
    assert any("published baseline rows (baselines v1" in line for line in err), err


def test_leaderboard_refuses_a_baseline_that_is_nowhere(store, capsys, one_error_line):
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store),
                     "--normalise-by", "nope"]) == 2
    one_error_line("--normalise-by 'nope': no such agent", "results for ghost, mlp")
    # A registered agent without results is a note, not an error: the table is still shown
    # (--baseline is the option's older name).
    assert cli.main(["leaderboard", "--sweep", "smoke", "--db", str(store),
                     "--baseline", "ensemble", "--verbose"]) == 0
    assert "note: no ensemble default-config results for this sweep" in capsys.readouterr().err


def test_compare_reads_agents_from_the_store_and_names_the_ones_it_has(
        store, capsys, one_error_line):
    assert cli.main(["compare", "--agent", "ghost", "--baseline", "mlp", "--sweep", "smoke",
                     "--db", str(store)]) == 0
    assert "ghost vs mlp: significantly better in 0, worse in " in capsys.readouterr().out
    assert cli.main(["compare", "--agent", "nope", "--sweep", "smoke", "--db", str(store)]) == 2
    one_error_line("--agent 'nope': no such agent", "results for ghost, mlp")
    assert cli.main(["compare", "--agent", "ensemble", "--sweep", "smoke",
                     "--db", str(store)]) == 2
    one_error_line("no results for it yet (run `neural-testbed sweep --agent ensemble`)")


def test_plot_of_an_agent_known_only_from_the_store_says_how_to_load_it(
        store, tmp_path, capsys, one_error_line):
    assert cli.main(["plot", "--agent", "ghost", "--out", str(tmp_path / "figs"), "--sweep",
                     "smoke", "--db", str(store)]) == 2
    one_error_line("not registered in this command", "--import MODULE")
    assert not (tmp_path / "figs").exists()


def test_a_failed_merge_writes_nothing_and_names_missing_inputs_plainly(
        store, tmp_path, capsys, smoke_rows, one_error_line):
    other = tmp_path / "other.db"
    with leaderboard.ResultsStore(other) as s:
        s.write(smoke_rows("ghost", GhostConfig(), 0.7))  # same keys, different results
    out = tmp_path / "merged.db"
    assert cli.main(["merge", str(store), str(other), "-o", str(out)]) == 2
    one_error_line("conflict", "nothing was written")
    assert not out.exists()
    assert cli.main(["merge", str(tmp_path / "nope.db"), "-o", str(out)]) == 2
    err = one_error_line("merge input", "nope.db': no such file")
    assert "--db" not in err
    assert not out.exists()


def test_score_refuses_a_predictions_directory_that_holds_no_problems_file_before_the_store(
        tmp_path, monkeypatch, capsys, one_error_line):
    """Nothing to score is a mistake (a wrong path, files named otherwise), not a run that
    scores nothing: one line, and no store is made."""
    monkeypatch.chdir(tmp_path)
    score = ["score", "--agent", "mine", "--sweep", "classification-quick", "--predictions"]
    assert cli.main([*score, "nowhere/"]) == 2
    one_error_line("--predictions 'nowhere/' is not a directory")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "classification_5.txt").write_text("not a predictions file")
    assert cli.main([*score, "empty"]) == 2
    one_error_line("--predictions 'empty' holds no predictions file for any of the 12 "
                   "problems (e.g. classification_5.npz)")
    assert not (tmp_path / store_lib.DEFAULT_DB).exists()


def test_import_of_a_file_named_like_an_installed_module_is_refused(
        tmp_path, capsys, one_error_line):
    shadow = tmp_path / "json.py"
    shadow.write_text("raise SystemExit('the stray json.py was executed')\n")
    assert cli.main(["agents", "--import", str(shadow)]) == 2
    one_error_line("the module 'json'", "rename the file")


def test_a_module_that_exits_while_imported_is_one_line_not_a_silent_exit(
        tmp_path, capsys, one_error_line):
    quitter = tmp_path / "quitter_mod.py"
    quitter.write_text("import sys\nsys.exit(7)\n")
    assert cli.main(["agents", "--import", str(quitter)]) == 2
    one_error_line(f"--import {quitter}: the module exited with status 7 while "
                            "being imported")
    assert "quitter_mod" not in sys.modules


@pytest.mark.slow  # every diagnostic at four taus, and its figures
def test_diagnose_prints_every_diagnostic_and_writes_its_figures(tmp_path, capsys,
                                                                 monkeypatch):
    pytest.importorskip("matplotlib")
    db, out = tmp_path / "d.db", tmp_path / "figs"
    argv = ["diagnose", "--agent", "mlp", "--set", "num_steps=30", "--sweep", "smoke",
            "--problem", "classification_2d/90", "--taus", "1,2,10,100", "--db", str(db),
            "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    for name in (*diagnostics.METRICS, "tau=10 (monte_carlo)", "d_KL"):
        assert name in text, name
    assert sorted(p.name for p in out.iterdir()) == [
        f"{name}.{kind}" for name in ("rejection", "reliability", "upds")
        for kind in ("pdf", "png")]  # each figure as a PNG and a PDF
    with leaderboard.ResultsStore(db, create=False) as store:
        rows = store.rows()
    assert sorted((r.tau, r.estimator) for r in rows) == [
        (1, "auto"), (2, "auto"), (10, "auto"), (10, "monte_carlo"), (100, "auto")]
    # A second call reuses the stored rows (nothing is trained); plot draws the tau curve.
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")
    monkeypatch.setattr(runner.UnitRunner, "rows", no_training)
    assert cli.main(argv) == 0
    assert "rejection_ability" in capsys.readouterr().out
    assert cli.main(["plot", "--db", str(db), "--sweep", "smoke", "--out", str(out)]) == 0
    assert (out / "tau_curve.png").stat().st_size > 0


def test_diagnose_takes_the_taus_asked_for_on_a_problem_found_in_the_paper_sweep(tmp_path):
    """classification_2d/97 is not in the default sweep (quick): it is looked up in the
    paper sweep, and still diagnosed at --taus, not at the paper's 1 and 100."""
    db = tmp_path / "d.db"
    assert cli.main(["diagnose", "--agent", "mlp", "--set", "num_steps=5", "--problem",
                     "classification_2d/97", "--taus", "2", "--db", str(db), "--out",
                     str(tmp_path / "figs"), "--quiet"]) == 0
    with leaderboard.ResultsStore(db, create=False) as store:
        assert {r.tau for r in store.rows()} == {2}


def test_diagnose_names_an_unknown_problem_in_one_line(tmp_path, capsys, no_work, one_error_line):
    assert cli.main(["diagnose", "--agent", "mlp", "--problem", "nope/1",
                     "--db", str(tmp_path / "d.db"), "--out", str(tmp_path)]) == 2
    one_error_line("unknown problem 'nope/1'")
    assert not (tmp_path / "d.db").exists()


def test_leaderboard_adds_diagnostics_columns_and_names_bad_ones(store, capsys, one_error_line):
    assert cli.main(["leaderboard", "--db", str(store), "--sweep", "smoke", "--metrics",
                     "ece,aud,rejection_ability", "--wide"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("agent")).split()
    assert header[-9:] == ["aud_ood_aleatoric", "aud_ood_aleatoric_stderr", "aud_ood_epistemic",
                           "aud_ood_epistemic_stderr", "aud_ood_total", "aud_ood_total_stderr",
                           "rejection_ability", "rejection_ability_stderr", "changes"]
    assert cli.main(["leaderboard", "--db", str(store), "--sweep", "smoke", "--metrics",
                     "bogus"]) == 2
    one_error_line("unknown --metrics bogus; allowed: ece, accuracy, aud, aleatoric")


@pytest.mark.parametrize("sweep", ["paper", "smoke"])  # output beyond / within one buffer
def test_output_piped_into_a_reader_that_stopped_ends_quietly_with_141(sweep):
    """`neural-testbed problems --sweep paper | head -1`: the reader closes the pipe, and
    the command ends with the status a shell gives SIGPIPE, without a traceback."""
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))
    env.pop("PYTHONUNBUFFERED", None)  # a pipe's output is buffered, as on most machines
    proc = subprocess.Popen([sys.executable, "-m", "neural_testbed.cli", "problems", "--sweep",
                             sweep], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the command (still importing) has written anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == "", err


@pytest.mark.parametrize("extra, message", [
    (["--units-at-once", "0"], "units at once (--units-at-once) must be an integer >= 1, got 0"),
    (["--units-at-once", "2", "--workers", "2"], "--units-at-once applies to a run in this "
                                                 "process; with --workers or --backend ray"),
])
def test_bad_units_at_once_is_one_line_before_any_store(tmp_path, capsys, extra, message):
    db = tmp_path / "r.db"
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not db.exists()


@pytest.mark.parametrize("argv, fragments", [
    (["--taus", ""], ["--taus '': expected integers >= 1"]),
    (["--set", "hidden=10", "hidden=20"], ["--set hidden is given twice ('hidden=10' and "
                                           "'hidden=20'); give each hyperparameter once"]),
    (["--set", "num_steps=1000000000000"], ["num_steps must be an integer that fits int32"]),
    (["--set", f"num_steps={2**31}"], ["num_steps must be an integer that fits int32"]),
    (["--set", "learning_rate=1e-320"], ["learning_rate must be a number float32 holds"]),
    (["--workers", "1000"], ["workers (--workers) must be at most 4 (2 per core; this "
                             "process may use 2)", "got 1000"]),
])
def test_settings_that_cannot_work_or_would_be_ignored_are_one_line_before_any_store(
        tmp_path, capsys, no_work, monkeypatch, argv, fragments, one_error_line):
    monkeypatch.setattr(run_options, "usable_cores", lambda: 2)
    db = tmp_path / "new.db"
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db), *argv]) == 2
    one_error_line(*fragments)
    assert not db.exists()


def test_sweep_beside_dataset_is_refused_and_the_default_sweep_is_not(tmp_path, capsys,
                                                                      no_work, one_error_line):
    data = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x_train=rng.normal(size=(20, 2)), y_train=np.arange(20) % 2,
             x_test=rng.normal(size=(10, 2)), y_test=np.arange(10) % 2)
    assert cli.main(["problems", "--dataset", str(data), "--sweep", "quick"]) == 2
    one_error_line(f"--sweep quick and --dataset {data} both name the problems; "
                            "give one of them")
    assert cli.main(["problems", "--dataset", str(data)]) == 0
    assert "d.npz/0" in capsys.readouterr().out


def _stored(problem, **changes):
    """A stored row of ``problem`` (d_KL or NLL 0.5 ± 0.01), with ``changes``."""
    row = run_rows.result_row("mlp", "h", "{}", problem, 1, "auto", 0, estimate=0.5,
                            estimate_stderr=0.01, num_clipped=0, accuracy=0.9, ece=0.05,
                            train_seconds=12345.0, compile_seconds=0.1, eval_seconds=0.5)
    return store_lib.StoredRow(**{**row.as_dict(), **changes}, version="0", timestamp="t")


def test_problem_table_columns_fit_a_million_training_pairs():
    row = _stored(next(iter(leaderboard.get_sweep("smoke").values())),
                  problem_id="a_long_problem_id_of_my_data/1234567", num_train=12_345_678,
                  seed=1_000_000, temperature=0.123456)
    header, line = run_report.problem_table([row], [1]).splitlines()
    assert line.split() == ["a_long_problem_id_of_my_data/1234567", "0.123456", "12345678",
                            "1000000", "0.5000", "±", "0.0100", "0.900", "0.050", "12345.50"]
    assert header.split() == ["problem_id", "temp", "T", "seed", "kl(tau=1)", "±", "se", "acc",
                              "ece", "secs"]
    for name in ("T", "seed", "secs"):  # right-aligned above their values
        assert header.index(f" {name}") + len(name) + 1 in {
            m.end() for m in re.finditer(r"\S+", line)}, name


def test_the_run_table_tells_regression_rows_by_their_target():
    """A regression row says it is one (target), has no temperature or class count, and
    shows its noise variance where a classification row shows its temperature; its
    accuracy and ECE are n/a."""
    problem = leaderboard.get_sweep("regression-quick")["regression/0"]
    row = _stored(problem)
    assert (row.target, row.temperature, row.num_classes) == ("regression", None, None)
    header, line = run_report.problem_table([row], [1]).splitlines()
    assert header.split()[:2] == ["problem_id", "noise"]
    assert line.split() == ["regression/0", f"{problem.noise_variance:g}", str(problem.num_train),
                            "0", "0.5000", "±", "0.0100", "n/a", "n/a", "12345.50"]


def test_export_neutralises_formula_like_text_for_spreadsheets(tmp_path, capsys, smoke_rows):
    db, out = tmp_path / "r.db", tmp_path / "rows.csv"
    with leaderboard.ResultsStore(db) as s:
        for name in ("=HYPERLINK(\"x\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "plain"):
            s.write(smoke_rows(name, GhostConfig(), 0.2)[:1])
    assert cli.main(["export", "--db", str(db), "-o", str(out)]) == 0
    with open(out, newline="") as f:
        names = sorted(r["agent"] for r in csv.DictReader(f))
    assert names == sorted(["'=HYPERLINK(\"x\")", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx",
                            "plain"])
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    assert "is written with a leading single quote" in " ".join(capsys.readouterr().out.split())


def test_a_closed_standard_output_is_one_line_and_status_2(capsys, monkeypatch, one_error_line):
    monkeypatch.setattr(sys, "stdout", None)  # as Python starts with `>&-`
    assert cli.main(["problems", "--sweep", "smoke"]) == 2
    one_error_line("standard output is closed; redirect it to a file or /dev/null")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_plot_draws_figure_5_for_a_host_agent(store, tmp_path, capsys):
    """random_forest: host agents share one path to the figure (knn's is no different)."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("sklearn")
    out = tmp_path / "figs"
    assert cli.main(["plot", "--agent", "random_forest", "--out", str(out), "--sweep", "smoke",
                     "--db", str(store)]) == 0
    assert (out / "figure5.png").stat().st_size > 0
    assert f"wrote {out / 'figure5.png'}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, fragments", [
    (["--set", "batch_size=1000000000"], [
        "agent mlp (batch_size=1000000000) cannot run classification_2d/90, "
        "classification_2d/91: its training program holds an array of 372.5 GiB for a batch "
        "of 2 problems, more than the 64 GiB of memory here; use smaller sizes (batch_size, "
        "widths, --taus) or --problems-per-batch 1"]),
    (["--set", "hidden=1000000000"], ["agent mlp (hidden=(1000000000,)) cannot run",
                                      "evaluation program holds an array of"]),
    (["--taus", "1000000"], ["its tau = 1000000 evaluation program holds an array of"]),
    (["--taus", "100000000"], [
        "tau 100000000 (--taus) is too large for classification_2d/90: its N = 1000 test "
        "samples of tau + 1 inputs each are counted in int32, so tau must be at most 2147482"]),
])
def test_sizes_beyond_memory_or_int32_are_refused_before_any_store(
        tmp_path, capsys, no_work, monkeypatch, argv, fragments, one_error_line):
    """Programs are traced (not run) before any work, at the batches the run computes: an
    array larger than the machine's memory, or more test inputs than int32 counts, is one
    line instead of failed rows."""
    monkeypatch.setattr(memory, "total_bytes", lambda: (64 * 2**30, "memory"))
    db = tmp_path / "new.db"
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db), *argv]) == 2
    one_error_line(*fragments)
    assert not db.exists()


def test_the_memory_check_traces_each_program_once_for_the_run(tmp_path, monkeypatch):
    """The check before work traces the run's own programs at the run's batches and the run
    compiles those traces: every program of the command is traced once, not once for the
    check and again for the run."""
    traced, run_keys = [], []
    trace, run = runner.trace_program, runner.Programs.run
    monkeypatch.setattr(runner, "trace_program", lambda *a: traced.append(1) or trace(*a))
    monkeypatch.setattr(runner.Programs, "run", lambda self, key, *a: run_keys.append(key)
                        or run(self, key, *a))
    assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--set", "num_steps=5",
                     "--db", str(tmp_path / "r.db"), "--quiet"]) == 0
    assert run_keys and len(traced) == len(set(run_keys))


def test_the_memory_check_traces_only_what_the_store_still_lacks(tmp_path, smoke_rows,
                                                                 monkeypatch):
    """The check before work traces the programs of the configs and problems still to
    compute: none for a complete store (a resumed sweep pays no tracing), the missing
    problem for a store that lacks one, every problem for a new store."""
    from neural_testbed.run import checks as run_checks

    checked = []
    monkeypatch.setattr(run_checks, "check_memory", lambda units, programs, **_: checked.append(
        sorted(p.problem_id for u in units for p in u.problems)) if units else None)
    monkeypatch.setattr(sweep_lib, "run_sweep", lambda *a, **k: sweep_lib.SweepSummary())
    rows = smoke_rows("mlp", agents.MLPConfig(), 0.2)
    smoke = sorted(leaderboard.get_sweep("smoke"))
    complete, partial = tmp_path / "complete.db", tmp_path / "partial.db"
    with store_lib.ResultsStore(complete) as store:
        store.write(rows)
    with store_lib.ResultsStore(partial) as store:
        store.write([r for r in rows if r.problem_id != smoke[0]])
    for db, expected in ((complete, []), (partial, [[smoke[0]]]),
                         (tmp_path / "new.db", [smoke])):
        checked.clear()
        assert cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--db", str(db),
                         "--quiet"]) in (0, 1)
        assert checked == expected, db.name


def test_the_memory_check_shows_its_progress_before_the_run_announces_itself(
        tmp_path, capsys, monkeypatch):
    """Tracing every program set of a large grid takes minutes before the run's own bar:
    it has a bar of its own (not with --quiet), erased before the run's first line."""
    monkeypatch.setattr(sweep_lib, "run_sweep", lambda *a, **k: sweep_lib.SweepSummary())
    for quiet in ((), ("--quiet",)):
        cli.main(["sweep", "--agent", "mlp", "--sweep", "smoke", "--db",
                  str(tmp_path / "new.db"), *quiet])
        err = capsys.readouterr().err
        if quiet:
            assert "checking memory" not in err, err
        else:
            assert err.index("checking memory") < err.index("sweep mlp:"), err


def test_ctrl_c_met_inside_a_garbage_collection_callback_still_interrupts():
    """Python drops an exception raised in a gc callback (jax-ml/jax#18246), where
    JAX's callback made most Ctrl-Cs of a large sweep's memory check go unheard: the
    command's handler raises it again outside. Here SIGINT is raised inside a callback
    (Python's own handler then prints "Exception ignored" and the loop runs on)."""
    script = """if True:
        import gc, signal, sys, time
        from neural_testbed import cli
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
        if sys.argv[1] == "command":
            cli._catch_ctrl_c()
        raised = []
        def callback(phase, info):
            if not raised:
                raised.append(phase)
                signal.raise_signal(signal.SIGINT)  # handled here, in the callback
        gc.callbacks.append(callback)
        try:
            gc.collect()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.001)
            print("ran on")
        except KeyboardInterrupt:
            print("interrupted")
        """
    for handler, expected in (("command", "interrupted"), ("python", "ran on")):
        done = subprocess.run([sys.executable, "-c", script, handler], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.stdout.strip() == expected, (handler, done.stdout, done.stderr[-2000:])


def test_a_ctrl_c_just_after_the_announce_line_finds_the_line_ended(tmp_path, monkeypatch):
    """Python runs a signal's handler as soon as a write to stderr returns. A Ctrl-C that
    lands just after the announce line is written must find that line ended: the
    interrupted line is then the last line, alone (it was once glued to the announce)."""

    class InterruptedAfterTheAnnounce(io.StringIO):
        def write(self, text):
            written = super().write(text)
            if text.startswith("agent mlp:"):
                raise KeyboardInterrupt  # what the handler raises once the write returned
            return written

    err = InterruptedAfterTheAnnounce()
    monkeypatch.setattr(sys, "stderr", err)
    status = cli.main(["run", "--agent", "mlp", "--sweep", "smoke", "--quiet",
                       "--db", str(tmp_path / "r.db")])
    lines = err.getvalue().splitlines()
    assert status == 130, lines
    assert lines[-2].startswith("agent mlp: MLPConfig("), lines
    assert lines[-1] == ("neural-testbed: interrupted; everything computed so far is in the "
                         "store, rerun the same command to continue"), lines


def test_problems_names_a_handful_of_problems_from_any_sweep_or_from_the_one_given():
    from neural_testbed.cli import options

    def chosen(*argv):
        args = cli.build_parser().parse_args(["run", "--agent", "mlp", *argv])
        return options.sweep_problems(args)

    picked = chosen("--problems", "classification/65", "classification/3", "classification/65")
    assert list(picked) == ["classification/65", "classification/3"]  # in order, once each
    assert picked["classification/65"] == leaderboard.get_sweep("classification")[
        "classification/65"]
    assert list(chosen("--sweep", "smoke", "--problems", "classification_2d/90")) == [
        "classification_2d/90"]
    assert list(chosen("--problems", "iris_dyadic/3")) == ["iris_dyadic/3"]
    with pytest.raises(ValueError, match="no built-in sweep has a problem 'nope/1'"):
        chosen("--problems", "classification/3", "nope/1")
    with pytest.raises(ValueError, match=r"classification_2d/17 \(tau 1, 100\) and "
                                         r"classification/65 \(tau 1, 10\)"):
        chosen("--problems", "classification_2d/17", "classification/65")
    assert len(chosen("--problems", "classification_2d/17", "classification/65",
                      "--taus", "1,10")) == 2


def test_leaderboard_floor_columns_are_paired_excess_over_the_floor_agent(tmp_path, capsys,
                                                                          one_error_line):
    """`--floor mlp` on the published paper rows: mlp's own excess is 0, every agent's is
    its mean minus mlp's over the same problems: for an agent with all 210, the difference
    of the two means; for hmc, published on `quick`'s 18 (two per (temperature, T), so
    the stratified mean is the plain one), the mean of its differences to mlp there. An
    agent with no rows is one line."""
    db = str(tmp_path / "none.db")
    assert cli.main(["leaderboard", "--sweep", "paper", "--with-baselines", "--floor", "mlp",
                     "--db", db, "--format", "csv"]) == 0
    table = {r["agent"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert float(table["mlp"]["kl_1_above_floor"]) == 0
    for r in table.values():
        if r["problems"] == r["of"]:
            assert float(r["kl_100_above_floor"]) == pytest.approx(
                float(r["kl_100"]) - float(table["mlp"]["kl_100"]), rel=1e-6, abs=1e-9)
    kl = {(r.agent, r.problem_id): r.kl for r in baselines.load().rows
          if r.tau == 100}
    shared = [pid for agent, pid in kl if agent == "hmc"]
    assert len(shared) == 18 == int(table["hmc"]["problems"])
    assert float(table["hmc"]["kl_100_above_floor"]) == pytest.approx(
        np.mean([kl["hmc", pid] - kl["mlp", pid] for pid in shared]), rel=1e-6)
    assert cli.main(["leaderboard", "--sweep", "paper", "--with-baselines", "--floor", "nobody",
                     "--db", db]) == 2
    one_error_line("--floor", "nobody")
