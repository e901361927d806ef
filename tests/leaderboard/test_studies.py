"""Stored `tal` and `probe` results: resuming, the leaderboard's and compare's study
metrics, compare --metric, merge and export."""

import csv
import functools
import io
import json
import math
import sqlite3

import numpy as np
import pytest

from neural_testbed import active, agents, cli, leaderboard
from neural_testbed.active import tal
from neural_testbed.leaderboard import configs, probing, studies, study_runs
from neural_testbed.run import rows as run_rows

QUICK = leaderboard.get_sweep("regression-quick")
TAL_SETTINGS = active.TALSettings(num_rounds=2, batch_size=3, methods=("batchmig", "random"))
PROBE_SETTINGS = probing.ProbeSettings(inclusion_ks=(1.0,), reduction_ks=(1,), num_bins=2,
                                       num_samples=10)


def _csv(text):
    return list(csv.DictReader(io.StringIO(text)))


def _one_error_line(capsys, fragment):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neural-testbed: error: "), err
    assert fragment in err, err


@pytest.fixture
def computed(monkeypatch):
    """The problem ids each `tal` or `probe` call computes (rather than reuses)."""
    calls = []
    real_tal, real_probe = tal.iter_tal, probing.probe_problems

    def iter_tal(agent, problems, *args, **kwargs):
        calls.append([p.problem_id for p in problems])
        return real_tal(agent, problems, *args, **kwargs)

    def probe_problems(agent, problems, *args, **kwargs):
        calls.append([p.problem_id for p in problems])
        return real_probe(agent, problems, *args, **kwargs)

    monkeypatch.setattr(tal, "iter_tal", iter_tal)
    monkeypatch.setattr(probing, "probe_problems", probe_problems)
    return calls


def _without_timings(err):
    """stderr lines that do not depend on what was reused or on the clock."""
    return [line for line in err.splitlines()
            if not line.startswith(("time:", "tal:", "probe ")) and "problems computed" not in line]


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_tal_resumes_from_the_store_and_a_rerun_prints_the_same(tmp_path, capsys, computed):
    db = tmp_path / "r.db"
    argv = ["tal", "--agent", "oracle_gp", "--rounds", "2", "--batch", "3", "--method",
            "batchmig,random", "--format", "csv", "--quiet", "--db", str(db), "--problems"]
    both = "regression_wang/0,regression_wang/1"
    # A run stopped after its first problem, then the whole command twice.
    assert cli.main([*argv, "regression_wang/0"]) == 0
    first = capsys.readouterr()
    assert cli.main([*argv, both]) == 0
    resumed = capsys.readouterr()
    assert cli.main([*argv, both]) == 0
    again = capsys.readouterr()
    assert computed == [["regression_wang/0"], ["regression_wang/1"]]  # the rerun: none
    assert "1 problems computed, 0 reused" in first.err
    assert "1 problems computed, 1 reused" in resumed.err
    assert "0 problems computed, 2 reused" in again.err
    assert again.out == resumed.out
    # The methods in another order are the same settings: nothing is computed again.
    swapped = ["random,batchmig" if a == "batchmig,random" else a for a in argv]
    assert cli.main([*swapped, both]) == 0
    assert "0 problems computed, 2 reused" in capsys.readouterr().err
    assert len(computed) == 2  # nothing more was computed
    assert _without_timings(again.err) == _without_timings(resumed.err)
    # The table is the mean of the stored curves; the first problem's, exactly what the
    # first run printed.
    with leaderboard.ResultsStore(db, create=False) as store:
        records = store.studies(study="tal")
    assert [r["problem_id"] for r in records] == ["regression_wang/0", "regression_wang/1"]
    assert {r["settings_hash"] for r in records} == {
        studies.settings_hash("tal", studies.tal_settings_json(TAL_SETTINGS))}
    curves = [studies.tal_result(r).log_likelihood for r in records]
    for r, row in enumerate(_csv(first.out)):
        assert float(row["batchmig"]) == curves[0]["batchmig"][r]
        assert float(row["random"]) == curves[0]["random"][r]
    for r, row in enumerate(_csv(resumed.out)):
        assert float(row["batchmig"]) == pytest.approx(np.mean([c["batchmig"][r] for c in curves]))


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_probe_resumes_from_the_store_and_a_rerun_prints_the_same(tmp_path, capsys, computed):
    db, out = tmp_path / "r.db", tmp_path / "figures"
    argv = ["probe", "--agent", "mlp", "--set", "num_steps=10", "--reduction-k", "1",
            "--inclusion-k", "1", "--bins", "2", "--num-samples", "10", "--per-problem",
            "--format", "csv", "--quiet", "--db", str(db), "--problems", "regression/0"]
    assert cli.main(argv) == 0
    first = capsys.readouterr()
    assert cli.main([*argv, "regression/1"]) == 0
    resumed = capsys.readouterr()
    assert cli.main([*argv, "regression/1", "--out", str(out)]) == 0  # figures from the store
    again = capsys.readouterr()
    assert computed == [["regression/0"], ["regression/1"]]  # the rerun: none
    assert "0 problems computed, 2 reused" in again.err
    assert again.out == resumed.out
    assert _without_timings(again.err) == _without_timings(resumed.err) + [
        f"wrote {out / name}.png" for name in ("variance_by_distance", "self_certainty", "mse",
                                               "inclusion", "uncertainty_reduction")]
    assert first.out.split()[1:] == [line for line in resumed.out.split()[1:]
                                     if line.startswith("regression/0,")]
    # The stored record gives back the probes exactly (the figures' arrays included).
    with leaderboard.ResultsStore(db, create=False) as store:
        record = store.studies(agent="mlp", study="probe")[0]
    probes = studies.probe_result(record)
    assert probes.distance.shape == probes.variance.shape == (1000,)
    assert probes.distance.dtype == np.float32 and float(probes.self_certainty) == 0.0


def test_a_probe_record_without_the_mse_is_probed_again_and_replaced(tmp_path, monkeypatch):
    """A record stored before the MSE probe (it lacks a probe of PROBES) is not reused: that
    problem is computed again and its record replaced; a complete record is reused."""
    db = str(tmp_path / "r.db")
    config = agents.MLPConfig()
    old = studies.probe_record("mlp", config, "regression/0", _fake_probes(0.5), PROBE_SETTINGS)
    old["data"] = json.dumps([e for e in json.loads(old["data"]) if e["probe"] != "mse"],
                             sort_keys=True, separators=(",", ":"))
    kept = studies.probe_record("mlp", config, "regression/1", _fake_probes(0.25, mse=0.125),
                                PROBE_SETTINGS)
    with leaderboard.ResultsStore(db) as store:
        store.write_studies([old, kept])
    assert not studies.probe_record_is_complete(old) and studies.probe_record_is_complete(kept)
    computed = []

    def probe_problems(build, problems, settings, progress=True, desc="probe"):
        for problem in problems:
            computed.append(problem.problem_id)
            yield problem, _fake_probes(0.5, mse=0.375)

    monkeypatch.setattr(probing, "probe_problems", probe_problems)
    problems = [QUICK["regression/0"], QUICK["regression/1"]]
    run = study_runs.run_probes(db, "mlp", functools.partial(agents.make_mlp_agent, config),
                                config, problems, PROBE_SETTINGS, progress=False)
    assert computed == ["regression/0"] and (run.computed, run.reused) == (1, 1)
    assert [float(result.mse) for _, result in run.results] == [0.375, 0.125]
    with leaderboard.ResultsStore(db, create=False) as store:
        assert len(store.studies(agent="mlp", study="probe")) == 2


def _fake_tal(problem_id, batchmig_first, random_first, metacorrelation=0.5):
    """A TAL result whose round-1 scores are given (rounds 0 and 2 made up)."""
    return tal.TALResult(
        problem_id, np.array([0, 3, 6]),
        {"batchmig": np.array([0.1, batchmig_first, 0.9]),
         "random": np.array([0.1, random_first, 0.8])},
        {"batchmig": np.array([[0, 1, 2], [3, 4, 5]]), "random": np.array([[6, 7, 8], [1, 2, 3]])},
        metacorrelation, 1.5)


def _fake_probes(self_certainty, mse=0.75):
    two = np.array([0.25, 0.5], np.float32)
    return probing.ProblemProbes(np.float32(self_certainty), np.float32(mse), two[:1], two[:1],
                                 two, two, two[:1], two[:1], np.arange(4, dtype=np.float32),
                                 np.ones(4, np.float32))


def _rows(agent, config, kl, diagnostics=lambda pid: None):
    return [run_rows.result_row(
        agent, configs.config_hash(agent, config), configs.config_json(config), p, tau, "auto", 0,
        estimate=kl * tau, estimate_stderr=0.01, num_clipped=0, accuracy=None, ece=None,
        train_seconds=1.0,
        compile_seconds=0.0, eval_seconds=0.5, diagnostics=diagnostics(pid) if tau == 1 else None)
        for pid, p in QUICK.items() for tau in p.taus]


def _stratified(values):
    """Mean and stratified standard error over regression-quick strata, by hand."""
    groups = {}
    for pid, value in values.items():
        groups.setdefault(QUICK[pid].stratum, []).append(value)
    n = sum(map(len, groups.values()))
    if min(map(len, groups.values())) < 2:
        return np.mean(list(values.values())), math.nan
    var = sum((len(g) / n) ** 2 * np.var(g, ddof=1) / len(g) for g in groups.values())
    return np.mean(list(values.values())), math.sqrt(var)


def test_leaderboard_study_metrics_are_the_chosen_configs_means(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    db = str(tmp_path / "r.db")
    default, worse = agents.MLPConfig(), agents.MLPConfig(num_steps=7)
    rng = np.random.default_rng(0)
    ids = list(QUICK)
    other = active.TALSettings(num_rounds=2, batch_size=2, methods=("batchmig", "random"))
    with leaderboard.ResultsStore(db) as store:
        store.write(_rows("mlp", default, 0.3) + _rows("mlp", worse, 0.9)
                    + _rows("ensemble", agents.EnsembleConfig(), 0.5))
        store.write_studies(
            [studies.tal_record("mlp", default, _fake_tal(pid, *rng.normal(size=2)), TAL_SETTINGS)
             for pid in ids]
            # Another config (not the chosen one) and other settings on fewer problems: unused.
            + [studies.tal_record("mlp", worse, _fake_tal(pid, 100.0, 0.0), TAL_SETTINGS)
               for pid in ids]
            + [studies.tal_record("mlp", default, _fake_tal(pid, 50.0, 0.0), other)
               for pid in ids[:3]]
            + [studies.probe_record("mlp", default, pid, _fake_probes(rng.uniform()),
                                    PROBE_SETTINGS) for pid in ids[:5]])
    assert cli.main(["leaderboard", "--sweep", "regression-quick", "--db", db, "--metrics",
                     "tal,self_certainty", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    board = {r["agent"]: r for r in _csv(captured.out)}
    assert "records under 2 settings" in captured.err
    # By hand, from the DataFrame of the stored values.
    frame = leaderboard.studies_frame(db)
    chosen = frame[(frame.config_hash == configs.config_hash("mlp", default))
                   & (frame.settings_hash == studies.settings_hash(
                       "tal", studies.tal_settings_json(TAL_SETTINGS)))]
    first = chosen[chosen["at"] == "round=1"].pivot_table(index="problem_id", columns="name",
                                                       values="value")
    scores = (first["batchmig"] - first["random"]).to_dict()
    assert len(scores) == 8
    mean, stderr = _stratified(scores)
    assert float(board["mlp"]["tal"]) == pytest.approx(mean, rel=1e-12)
    assert float(board["mlp"]["tal_stderr"]) == pytest.approx(stderr, rel=1e-12)
    certainty = frame[frame.name == "self_certainty"].set_index("problem_id")["value"]
    assert len(certainty) == 5
    assert float(board["mlp"]["self_certainty"]) == pytest.approx(certainty.mean(), rel=1e-6)
    assert board["mlp"]["self_certainty_stderr"] == "nan"  # a stratum with one problem
    assert board["ensemble"]["tal"] == board["ensemble"]["self_certainty"] == "nan"
    # The DataFrame of the leaderboard has them too.
    frame = leaderboard.leaderboard_frame(db, sweep="regression-quick").set_index("agent")
    assert frame.loc["mlp", "tal"] == pytest.approx(mean, rel=1e-12)
    assert isinstance(frame, pd.DataFrame)


def test_compare_any_metric_is_the_paired_mean_difference(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    rng = np.random.default_rng(1)
    values = {"b": {pid: rng.normal(size=2) for pid in QUICK}}
    # a's metacorrelation and xll: b's plus 1 plus noise (a clear "better")
    values["a"] = {pid: v + 1.0 + 0.1 * rng.normal(size=2) for pid, v in values["b"].items()}

    def diagnostics(name):
        def of(pid):
            meta, xll = values[name][pid]
            missing = name == "b" and pid == "regression/0"  # b has no XLL there
            return json.dumps({"metacorrelation": meta, "xll": None if missing else xll})
        return of

    with leaderboard.ResultsStore(db) as store:
        store.write(_rows("a", agents.MLPConfig(), 0.3, diagnostics("a"))
                    + _rows("b", agents.MLPConfig(), 0.4, diagnostics("b")))
    argv = ["compare", "--agent", "a", "--baseline", "b", "--sweep", "regression-quick",
            "--db", db]
    assert cli.main([*argv, "--metric", "xll", "--format", "csv"]) == 0
    records = _csv(capsys.readouterr().out)
    pooled = records[0]
    assert pooled["scope"] == "pooled" and pooled["metric"] == "xll" and "tau" not in pooled
    differences = {pid: values["a"][pid][1] - values["b"][pid][1] for pid in QUICK
                   if pid != "regression/0"}
    mean, stderr = _stratified(differences)
    assert float(pooled["xll_diff"]) == pytest.approx(mean, rel=1e-12)
    # regression/0's stratum has one pair left: no variance estimate there (as for KL)
    assert math.isnan(float(pooled["stderr"])) and math.isnan(stderr)
    assert pooled["pairs"] == "7" and pooled["flag"] == "MISSING 1 of 8 problems"
    assert len(records) == 1 + 4  # pooled + 4 strata
    # metacorrelation on every problem; the table says which way is better.
    assert cli.main([*argv, "--metric", "metacorrelation", "--format", "csv"]) == 0
    pooled = _csv(capsys.readouterr().out)[0]
    mean, stderr = _stratified({pid: values["a"][pid][0] - values["b"][pid][0] for pid in QUICK})
    assert float(pooled["metacorrelation_diff"]) == pytest.approx(mean, rel=1e-12)
    assert float(pooled["stderr"]) == pytest.approx(stderr, rel=1e-12)
    assert pooled["verdict"] == "better" and float(pooled["p_value"]) < 0.05
    assert cli.main([*argv, "--metric", "metacorrelation"]) == 0
    out = capsys.readouterr().out
    assert "a - baseline in metacorrelation (higher is better" in out
    line = next(line for line in out.splitlines() if line.startswith("b "))
    assert line.split()[1:3] == ["local", f"{mean:.4g}"]  # baseline, source, difference
    assert "worse in 0 of 4 setting cells (paired t-test, 5%)" in out
    # The TAL score from stored studies: no record for b -> no pairs.
    with leaderboard.ResultsStore(db) as store:
        store.write_studies([studies.tal_record("a", agents.MLPConfig(), _fake_tal(pid, 1.0, 0.0),
                                                TAL_SETTINGS) for pid in QUICK])
    assert cli.main([*argv, "--metric", "tal", "--format", "csv"]) == 0
    pooled = _csv(capsys.readouterr().out)[0]
    assert pooled["pairs"] == "0" and pooled["flag"] == "MISSING 8 of 8 problems"
    assert cli.main([*argv, "--metric", "nope"]) == 2
    _one_error_line(capsys, "unknown --metric 'nope'; allowed: loss, kl, nll, metacorrelation, xll, tal, "
                            "self_certainty")


def test_merge_carries_study_records_and_refuses_conflicting_ones(tmp_path, capsys):
    a, b, c, out = (str(tmp_path / f"{name}.db") for name in "abco")
    config = agents.MLPConfig()
    record = lambda pid, score: studies.tal_record("mlp", config, _fake_tal(pid, score, 0.0),
                                                   TAL_SETTINGS)
    with leaderboard.ResultsStore(a) as store:
        store.write_studies([record("regression/0", 1.0)])
    with leaderboard.ResultsStore(b) as store:
        store.write_studies([record("regression/0", 1.0), record("regression/1", 2.0)])
    assert cli.main(["merge", a, b, "-o", out]) == 0
    assert ("2 study results added (tal, probe, bandit, active), 1 exact duplicates skipped"
            in capsys.readouterr().out)
    with leaderboard.ResultsStore(out, create=False) as store:
        merged = store.studies()
    assert [r["problem_id"] for r in merged] == ["regression/0", "regression/1"]
    assert studies.tal_result(merged[1]).log_likelihood["batchmig"][1] == 2.0
    # The same key with other values: refused, nothing written (not even its rows).
    with leaderboard.ResultsStore(c) as store:
        store.write_studies([record("regression/1", 3.0)])
        store.write(_rows("ensemble", agents.EnsembleConfig(), 0.5))
    assert cli.main(["merge", c, "-o", out]) == 2
    _one_error_line(capsys, "1 study record(s) conflict with study records already merged")
    with leaderboard.ResultsStore(out, create=False) as store:
        assert store.studies() == merged and store.rows() == []
    # Exported in long form: 2 methods x 3 rounds + the metacorrelation per problem.
    assert cli.main(["export", "--db", out, "--table", "studies", "-o",
                     str(tmp_path / "s.csv")]) == 0
    assert "wrote 14 study values" in capsys.readouterr().out
    exported = _csv((tmp_path / "s.csv").read_text())
    assert list(exported[0]) == list(studies.LONG_COLUMNS)
    assert [(r["name"], r["at"], float(r["value"])) for r in exported[:2]] == [
        ("batchmig", "round=0", 0.1), ("batchmig", "round=1", 1.0)]


def test_a_store_without_the_studies_table_reads_none_and_gains_it(tmp_path):
    path = tmp_path / "old.db"
    with leaderboard.ResultsStore(path) as store:
        store.write(_rows("mlp", agents.MLPConfig(), 0.3)[:1])
    with sqlite3.connect(path) as conn:  # as a store written before studies were kept
        conn.execute("DROP TABLE studies")
    with leaderboard.ResultsStore(path, create=False) as store:
        assert store.studies() == []
    with leaderboard.ResultsStore(path) as store:
        store.write_studies([studies.probe_record("mlp", agents.MLPConfig(), "regression/0",
                                                  _fake_probes(0.5), PROBE_SETTINGS)])
        (record,) = store.studies()
    assert float(studies.probe_result(record).self_certainty) == 0.5


@pytest.mark.parametrize("command", [
    ["tal", "--agent", "oracle_gp", "--problems", "1"],
    ["probe", "--agent", "mlp", "--problems", "regression/0"],
])
def test_tal_and_probe_refuse_a_foreign_store_before_any_work(tmp_path, capsys, monkeypatch,
                                                              command):
    def no_work(*args, **kwargs):
        raise AssertionError("no work may start with an unusable store")
    monkeypatch.setattr(tal, "iter_tal", no_work)
    monkeypatch.setattr(probing, "probe_problems", no_work)
    foreign = tmp_path / "notes.db"
    foreign.write_text("not a database, and it stays as it is\n" * 200)
    assert cli.main([*command, "--db", str(foreign)]) == 2
    _one_error_line(capsys, "is not a usable neural-testbed results store")
    assert foreign.read_text().startswith("not a database")
