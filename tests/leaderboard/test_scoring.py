"""Leaderboard aggregation on a hand-made results table with hand-computed answers."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from neural_testbed import leaderboard
from neural_testbed.leaderboard import scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

PAPER = leaderboard.get_sweep("paper")
# Two settings (temperature 0.1, T = 10 and T = 100), two seeds each.
PROBLEMS = {pid: PAPER[pid] for pid in ("classification_2d/90", "classification_2d/91",
                                        "classification_2d/110", "classification_2d/111")}


def _row(agent, config_hash, pid, tau, kl, status="ok", accuracy=0.9, ece=0.1, **extra):
    return _stored(PAPER[pid], agent, config_hash, tau, kl, status=status, accuracy=accuracy,
                   ece=ece, **extra)


def _stored(problem, agent, config_hash, tau, estimate, accuracy=0.9, ece=0.1, **extra):
    """A stored row of ``problem``: ``estimate`` is its d_KL or NLL, as its metric says."""
    row = run_rows.result_row(agent, config_hash, f'{{"name":"{config_hash}"}}', problem, tau,
                            "auto", 0, estimate=estimate, estimate_stderr=0.01, num_clipped=0,
                            accuracy=accuracy, ece=ece, train_seconds=1.0, compile_seconds=0.0,
                            eval_seconds=0.5)
    return store_lib.StoredRow(**{**row.as_dict(), **extra}, version="0", timestamp="t")


# The hand-made configs that stand for each agent's default config: every table
# normalises by the baseline's default config (A for mlp, whose rows below use A and B).
DEFAULTS = {"mlp": "A", "a": "A", "base": "X"}


def _score(rows, problems, *args, **kwargs):
    return scoring.score_agents(rows, problems, *args, defaults=DEFAULTS, **kwargs)


def _pid(temperature, num_train, seed):
    return next(pid for pid, p in PAPER.items()
                if (p.temperature, p.num_train, p.seed) == (temperature, num_train, seed))


def _sweep(num_trains, seeds, temperature=0.1):
    return {pid: p for pid, p in PAPER.items() if p.temperature == temperature
            and p.num_train in num_trains and p.seed in seeds}


def _rows(agent, config_hash, kl1, kl100, **kwargs):
    out = []
    for pid in kl1:
        out.append(_row(agent, config_hash, pid, 1, kl1[pid], **kwargs))
        out.append(_row(agent, config_hash, pid, 100, kl100[pid], **kwargs))
    return out


IDS = list(PROBLEMS)
# mlp config A: mean d_KL^1 0.2, d_KL^100 20 -> agg 0.4 (best globally);
# best in the T = 100 setting (agg 0.1 + 10/100 = 0.2).
MLP_A = _rows("mlp", "A", dict(zip(IDS, [0.2, 0.4, 0.1, 0.1])), dict(zip(IDS, [20, 40, 10, 10])))
# mlp config B: mean 0.3 and 30 -> agg 0.6; best in the T = 10 setting (agg 0.1 + 10/100 = 0.2).
MLP_B = _rows("mlp", "B", dict(zip(IDS, [0.1, 0.1, 0.5, 0.5])), dict(zip(IDS, [10, 10, 50, 50])))
# ens: one config, results for 3 of 4 problems (the 4th failed).
ENS = _rows("ens", "C", dict(zip(IDS[:3], [0.05, 0.15, 0.1])), dict(zip(IDS[:3], [5, 15, 10])),
            accuracy=0.8, ece=0.2)
ENS_FAILED = [_row("ens", "C", IDS[3], tau, math.nan, status="failed") for tau in (1, 100)]
ROWS = MLP_A + MLP_B + ENS + ENS_FAILED


def _by_agent(records):
    return {r["agent"]: r for r in records}


def test_global_tuning_means_stderrs_and_normalisation():
    records, warnings = _score(ROWS, PROBLEMS, "global")
    mlp, ens = _by_agent(records)["mlp"], _by_agent(records)["ens"]
    assert mlp["config_hash"] == "A"
    assert mlp["kl_1"] == pytest.approx(0.2) and mlp["kl_100"] == pytest.approx(20)
    # Stratified: T = 10 has [0.2, 0.4] (s2 = 0.02), T = 100 has [0.1, 0.1] (s2 = 0), so
    # var = (2/4)^2 * 0.02 / 2 + 0 = 0.0025.
    assert mlp["kl_1_stderr"] == pytest.approx(0.05)
    assert mlp["kl_agg"] == pytest.approx(0.4)
    assert mlp["kl_1_norm"] == pytest.approx(1.0) and mlp["kl_1_norm_stderr"] == 0.0
    assert ens["kl_1"] == pytest.approx(0.1) and ens["kl_100"] == pytest.approx(10)
    # ens has one problem at T = 100: no variance estimate there, so no stderr, and a warning.
    assert math.isnan(ens["kl_1_stderr"]) and math.isnan(ens["kl_1_norm_stderr"])
    assert warnings == ["standard errors are n/a for ens: some (temperature, T) setting has a "
                        "single scored problem, so no variance estimate"]
    # Paired: ens 0.1 over its 3 problems against mlp's (0.2 + 0.4 + 0.1) / 3 on the same ones.
    assert ens["kl_1_norm"] == pytest.approx(3 / 7) and ens["kl_100_norm"] == pytest.approx(3 / 7)
    assert ens["kl_agg"] == pytest.approx(0.2)
    assert ens["accuracy"] == pytest.approx(0.8) and ens["ece"] == pytest.approx(0.2)
    assert ens["seconds_per_problem"] == pytest.approx(2.0)  # 1 s train + 2 x 0.5 s eval
    assert (ens["problems"], ens["of"], ens["clipped"]) == (3, 4, 0)
    assert ens["flag"] == "MISSING 1 of 4 problems" and mlp["flag"] == ""
    assert ens["metric"] == "kl" and ens["selection"] == "same"
    assert [r["agent"] for r in records] == ["ens", "mlp"]  # sorted by d_KL^agg


def test_per_setting_tuning_picks_the_best_config_in_each_setting():
    records, _ = _score(ROWS, PROBLEMS, "per-setting")
    mlp, default = [r for r in records if r["agent"] == "mlp"]
    assert mlp["config_hash"] == "A,B" and mlp["config"] == "per setting: 2 configs"
    # B on T = 10 (0.1, 0.1 / 10, 10), A on T = 100 (0.1, 0.1 / 10, 10).
    assert mlp["kl_1"] == pytest.approx(0.1) and mlp["kl_100"] == pytest.approx(10)
    # The default config is a row of its own, and the normaliser of every row.
    assert (default["config_hash"], default["label"]) == ("A", "mlp (default)")
    assert default["kl_1_norm"] == pytest.approx(1.0)
    assert mlp["kl_1_norm"] == pytest.approx(0.5)  # over the 4 problems: 0.1 / 0.2
    ens = _by_agent(records)["ens"]  # 0.1 against A's (0.2 + 0.4 + 0.1) / 3 on its problems
    assert ens["kl_1_norm"] == pytest.approx(3 / 7) and ens["kl_100_norm"] == pytest.approx(3 / 7)


def test_no_baseline_results_is_a_warning_and_nan_normalisation():
    records, warnings = _score(ENS, PROBLEMS)
    assert "no mlp default-config results" in warnings[0]
    assert math.isnan(records[0]["kl_1_norm"]) and math.isnan(records[0]["kl_1_norm_stderr"])


def test_unknown_tuning_is_rejected():
    with pytest.raises(ValueError, match="unknown tuning 'best'; allowed: global, per-setting"):
        _score(ROWS, PROBLEMS, "best")


def _five_seed_table():
    """Setting T = 10: the agent is 1.0 lower at tau = 1 (clearly better) and equal up to
    noise at tau = 100; setting T = 100: 5.0 higher at tau = 100 (clearly worse)."""
    problems = {p.problem_id: p for p in PAPER.values()
                if p.temperature == 0.1 and p.num_train in (10, 100) and p.seed < 5}
    noise = [0.0, 0.1, -0.1, 0.05, -0.05]
    rows = []
    for pid, p in problems.items():
        e = noise[p.seed]
        if p.num_train == 10:
            rows += [_row("base", "X", pid, 1, 2.0), _row("new", "Y", pid, 1, 1.0 + e),
                     _row("base", "X", pid, 100, 50.0), _row("new", "Y", pid, 100, 50.0 + e)]
        else:
            rows += [_row("base", "X", pid, 1, 1.0), _row("new", "Y", pid, 1, 1.0 + e),
                     _row("base", "X", pid, 100, 10.0), _row("new", "Y", pid, 100, 15.0 + e)]
    return rows, problems


def test_compare_pairs_by_problem_and_tests_significance():
    rows, problems = _five_seed_table()
    records = scoring.compare_agents(rows, problems, "new", ["base"])
    assert [r["scope"] for r in records] == ["pooled"] * 2 + ["setting"] * 4  # pooled first
    pooled = {r["tau"]: r for r in records if r["scope"] == "pooled"}
    cells = {(r["num_train"], r["tau"]): r for r in records if r["scope"] == "setting"}
    assert cells[(10, 1)]["kl_diff"] == pytest.approx(-1.0)
    # stderr of the paired differences: std(noise, ddof=1) / sqrt(5)
    s2 = sum(e * e for e in [0.0, 0.1, -0.1, 0.05, -0.05]) / 4
    assert cells[(10, 1)]["stderr"] == pytest.approx(math.sqrt(s2 / 5))
    assert cells[(10, 1)]["verdict"] == "better" and cells[(10, 1)]["pairs"] == 5
    assert cells[(10, 100)]["verdict"] == "n.s."
    assert cells[(100, 100)]["verdict"] == "worse"
    assert cells[(100, 100)]["kl_diff"] == pytest.approx(5.0)
    # Pooled tau = 1: -1 at T = 10, 0 at T = 100, same noise in both; the spread between the
    # settings is design, not noise: var = 2 * (5/10)^2 * s2 / 5, df = 10 pairs - 2 settings.
    p1 = pooled[1]
    assert (p1["temperature"], p1["num_train"], p1["pairs"], p1["df"]) == (None, None, 10, 8)
    assert p1["kl_diff"] == pytest.approx(-0.5)
    assert p1["stderr"] == pytest.approx(math.sqrt(2 * 0.25 * s2 / 5))
    assert p1["p_value"] == pytest.approx(2 * stats.t.sf(0.5 / p1["stderr"], 8))
    assert p1["verdict"] == "better" and pooled[100]["verdict"] == "worse"


def test_compare_without_results_for_an_agent_is_a_clear_error():
    rows, problems = _five_seed_table()
    with pytest.raises(ValueError, match="no results for agent 'mlp' on this sweep; agents with "
                                         "results: base, new"):
        scoring.compare_agents(rows, problems, "new", ["mlp"])


def test_format_records_as_csv_and_markdown():
    records = [{"agent": "a", "kl": 0.5, "T": None}, {"agent": "b", "kl": math.nan, "T": 3}]
    assert scoring.format_records(records, "csv").splitlines() == ["agent,kl,T", "a,0.5,",
                                                                   "b,nan,3"]
    assert scoring.format_records(records, "markdown").splitlines()[2] == "| a | 0.5 |  |"
    assert "n/a" in scoring.format_records(records, "table")


def _table(values_by_agent, problems, tau_100_scale=100.0, **extra):
    """Rows of one config per agent (A, its default): ``values_by_agent[agent][pid]`` is
    its KL at tau = 1."""
    return [_row(agent, "A", pid, tau, kl * (tau_100_scale if tau == 100 else 1.0),
                 **extra)
            for agent, values in values_by_agent.items() for pid, kl in values.items()
            for tau in (1, 100)]


def test_stratified_mean_and_stderr_by_hand():
    problems = {**_sweep((10,), (0, 1, 2)), **_sweep((100,), (0, 1))}
    kl = {_pid(0.1, 10, 0): 1.0, _pid(0.1, 10, 1): 2.0, _pid(0.1, 10, 2): 3.0,
          _pid(0.1, 100, 0): 10.0, _pid(0.1, 100, 1): 14.0}
    records, warnings = _score(_table({"a": kl}, problems), problems, baseline="a")
    a = records[0]
    # mean = (3/5) * 2 + (2/5) * 12 = 6;
    # var = (3/5)^2 * s2(1, 2, 3) / 3 + (2/5)^2 * s2(10, 14) / 2 = 0.36 / 3 + 0.16 * 8 / 2 = 0.76
    # (the unstratified stderr, sqrt(32.5 / 5) = 2.55, would count the settings' spread as noise).
    assert a["kl_1"] == pytest.approx(6.0) and a["kl_1_stderr"] == pytest.approx(math.sqrt(0.76))
    assert a["kl_100_stderr"] == pytest.approx(100 * math.sqrt(0.76))
    assert warnings == []
    cells = {r["num_train"]: r for r in scoring.kl_by_setting(_table({"a": kl}, problems),
                                                              problems) if r["tau"] == 1}
    assert cells[10]["kl"] == pytest.approx(2.0)
    assert cells[10]["kl_stderr"] == pytest.approx(math.sqrt(1 / 3))
    assert cells[100]["kl_stderr"] == pytest.approx(2.0)


def test_ratio_stderr_by_hand_from_the_delta_method():
    base = dict(zip(IDS, [1.0, 3.0, 10.0, 14.0]))  # T = 10: 1, 3; T = 100: 10, 14
    new = dict(zip(IDS, [1.0, 2.0, 4.0, 8.0]))
    records, _ = _score(_table({"mlp": base, "new": new}, PROBLEMS), PROBLEMS)
    r = _by_agent(records)["new"]
    ratio = 3.75 / 7.0  # means 15 / 4 over 28 / 4
    # Per setting (n_s = 2, weight 1/2): s2_a = 0.5, 8; s2_b = 2, 8; cov = 1, 8; each enters as
    # (1/2)^2 * x / 2, so var(A) = 8.5 / 8, var(B) = 10 / 8, cov(A, B) = 9 / 8.
    var = (8.5 / 8 - 2 * ratio * 9 / 8 + ratio**2 * 10 / 8) / 7.0**2
    assert r["kl_1_norm"] == pytest.approx(ratio)
    assert r["kl_1_norm_stderr"] == pytest.approx(math.sqrt(var))


def test_ratio_stderr_matches_the_spread_of_the_ratio_over_replicates():
    """Many independent sweeps of two correlated agents: the delta-method stderr predicts
    the ratio's spread; dividing the two agents' own errors does not (it ignores pairing)."""
    problems = _sweep((10, 100), range(10))
    setting_mean = {10: 2.0, 100: 0.5}
    rng = np.random.default_rng(0)
    num_replicates = 400
    ratios, stderrs, naive = [], [], []
    for _ in range(num_replicates):
        base, new = {}, {}
        for pid, p in problems.items():
            difficulty = setting_mean[p.num_train] * (1 + 0.3 * rng.standard_normal())
            base[pid] = difficulty
            new[pid] = 0.6 * difficulty + 0.05 * setting_mean[p.num_train] * rng.standard_normal()
        records, _ = _score(_table({"mlp": base, "new": new}, problems), problems)
        mlp, r = _by_agent(records)["mlp"], _by_agent(records)["new"]
        ratios.append(r["kl_1_norm"])
        stderrs.append(r["kl_1_norm_stderr"])
        naive.append(r["kl_1_norm"] * math.hypot(r["kl_1_stderr"] / r["kl_1"],
                                                 mlp["kl_1_stderr"] / mlp["kl_1"]))
    spread = np.std(ratios, ddof=1)
    # The sample sd of 400 replicates has a relative standard error of 1 / sqrt(2 * 399) = 3.5%:
    # allow 4 of them (plus the delta method's O(1/n) bias, small here).
    tolerance = 4 / math.sqrt(2 * (num_replicates - 1))
    assert np.sqrt(np.mean(np.square(stderrs))) == pytest.approx(spread, rel=tolerance)
    assert abs(np.sqrt(np.mean(np.square(naive))) / spread - 1) > 3 * tolerance


def test_pooled_comparison_in_one_setting_is_scipys_paired_t_test():
    problems = _sweep((10,), range(10))
    rng = np.random.default_rng(1)
    base = {pid: float(v) for pid, v in zip(problems, rng.uniform(0.5, 1.5, 10))}
    new = {pid: base[pid] + float(rng.normal(0.05, 0.1)) for pid in problems}
    records = scoring.compare_agents(_table({"base": base, "new": new}, problems), problems,
                                     "new", ["base"])
    pooled, cell = records[0], next(r for r in records if r["scope"] == "setting")
    diffs = [new[pid] - base[pid] for pid in problems]
    assert pooled["scope"] == "pooled" and (pooled["pairs"], pooled["df"]) == (10, 9)
    assert pooled["kl_diff"] == pytest.approx(np.mean(diffs))
    assert pooled["stderr"] == pytest.approx(stats.sem(diffs))
    assert pooled["p_value"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)
    expected = stats.ttest_rel([new[pid] for pid in problems], [base[pid] for pid in problems])
    assert cell["p_value"] == pytest.approx(expected.pvalue)
    assert cell["verdict"] == ("n.s." if expected.pvalue >= 0.05 else "worse")


def test_held_out_selection_chooses_on_the_first_half_and_reports_the_second():
    problems = _sweep((10, 100), range(4))
    # P looks best on seeds 0, 1 (the selection half) but is poor on seeds 2, 3;
    # Q is steady and best on all seeds together (0.25 < 0.3).
    p_kl = {pid: 0.1 if p.seed < 2 else 0.5 for pid, p in problems.items()}
    q_kl = dict.fromkeys(problems, 0.25)
    rows = [_row("agent", name, pid, tau, kl * (100 if tau == 100 else 1))
            for name, values in (("P", p_kl), ("Q", q_kl)) for pid, kl in values.items()
            for tau in (1, 100)]
    rows += _table({"mlp": dict.fromkeys(problems, 0.5)}, problems)
    same = _by_agent(_score(rows, problems, baseline="mlp")[0])["agent"]
    assert same["config_hash"] == "Q" and same["kl_1"] == pytest.approx(0.25)
    assert same["selection"] == "same" and same["of"] == 8
    for tuning in scoring.TUNINGS:
        held = _by_agent(_score(rows, problems, tuning, selection="held-out")[0])
        agent = held["agent"]
        assert agent["config_hash"] == "P" and agent["kl_1"] == pytest.approx(0.5)
        assert (agent["problems"], agent["of"], agent["selection"]) == (4, 4, "held-out")
        assert agent["kl_1_norm"] == pytest.approx(1.0)
    records = scoring.compare_agents(rows, problems, "agent", ["mlp"], selection="held-out")
    assert records[0]["pairs"] == 4 and records[0]["kl_diff"] == pytest.approx(0.0)
    assert {r["selection"] for r in records} == {"held-out"}
    cells = scoring.kl_by_setting(rows, problems, selection="held-out")
    mine = [r for r in cells if r["agent"] == "agent"]
    assert len(mine) == 4 and all(r["problems"] == 2 for r in mine)
    assert [r["kl"] / r["tau"] for r in mine] == pytest.approx([0.5] * 4)


def test_held_out_selection_needs_two_seeds_in_every_setting():
    problems = {**_sweep((10,), (0, 1)), **_sweep((100,), (0,))}
    rows = _table({"mlp": dict.fromkeys(problems, 0.5)}, problems)
    with pytest.raises(ValueError, match=r"at least 2 seeds .* setting \(0.1, 100\) has 1"):
        _score(rows, problems, selection="held-out")
    with pytest.raises(ValueError, match="unknown selection 'half'; allowed: same, held-out"):
        _score(rows, problems, selection="half")


def test_rows_with_clipped_kl_terms_are_flagged():
    def clip(rows, pid, tau, count):
        return [dataclasses.replace(r, num_clipped=count) if (r.problem_id, r.tau) == (pid, tau)
                else r for r in rows]

    # Chosen config A: one clipped row; unchosen B: a clipped row that must not count;
    # ens: a missing problem and a clipped row.
    rows = (clip(MLP_A, IDS[0], 100, 7) + clip(MLP_B, IDS[2], 1, 3)
            + clip(ENS, IDS[1], 1, 1) + ENS_FAILED)
    records, _ = _score(rows, PROBLEMS)
    mlp, ens = _by_agent(records)["mlp"], _by_agent(records)["ens"]
    assert (mlp["clipped"], mlp["flag"]) == (1, "CLIPPED 1 row")
    assert (ens["clipped"], ens["flag"]) == (1, "MISSING 1 of 4 problems; CLIPPED 1 row")
    pooled = {r["tau"]: r for r in scoring.compare_agents(rows, PROBLEMS, "ens", ["mlp"])
              if r["scope"] == "pooled"}
    assert pooled[1]["flag"] == "MISSING 1 of 4 problems; CLIPPED 1 row"
    assert pooled[100]["clipped"] == 1  # mlp's row
    records, _ = _score(clip(rows, IDS[1], 100, 2), PROBLEMS)
    assert _by_agent(records)["ens"]["flag"] == "MISSING 1 of 4 problems; CLIPPED 2 rows"


def test_a_real_data_sweep_is_scored_by_its_rows_nll():
    """Each value is read from the column of the problem's metric: the NLL of real data
    (never a kl column, which those rows leave empty), and reported in nll_ columns (no
    kl_ column holds an NLL); a sweep mixing both is refused."""
    real = dict(list(leaderboard.get_sweep("real-quick").items())[:4])  # iris: 2 strata x 2
    rows = [_stored(p, "mlp", "A", tau, (1.0 + i) * tau) for i, p in enumerate(real.values())
            for tau in p.taus]
    assert all(r.kl is None and r.nll is not None for r in rows)
    (record,), _ = _score(rows, real)
    assert record["metric"] == "nll"
    assert record["nll_1"] == pytest.approx(2.5) and record["nll_100"] == pytest.approx(250)
    assert record["nll_agg"] == pytest.approx(2.5 + 250 / 100)
    assert not [name for name in record if name.startswith("kl")]
    (candidate,) = scoring.score_candidates(rows, real)
    assert candidate["nll_100"] == pytest.approx(250) and "kl_100" not in candidate
    assert {r["metric"] for r in scoring.kl_by_setting(rows, real)} == {"nll"}
    other = [dataclasses.replace(r, agent="ens") for r in rows]
    pooled = [r for r in scoring.compare_agents(rows + other, real, "mlp", ["ens"])
              if r["scope"] == "pooled"]
    assert [r["nll_diff"] for r in pooled] == pytest.approx([0.0, 0.0])
    assert all(r["metric"] == "nll" and "kl_diff" not in r for r in pooled)
    named = [r for r in scoring.compare_agents(rows + other, real, "mlp", ["ens"],
                                               metric="nll") if r["scope"] == "pooled"]
    assert named == pooled
    with pytest.raises(ValueError, match=r"metric 'kl': the rows of this sweep carry nll"):
        scoring.compare_agents(rows + other, real, "mlp", ["ens"], metric="kl")
    with pytest.raises(ValueError, match=r"mix metrics \(kl, nll\)"):
        _score(MLP_A + rows, {**PROBLEMS, **real})


def test_neighbours_closer_than_a_standard_error_get_a_note():
    """mlp (config A) and a copy shifted by 0.001 at tau 1 (kl_stderr 0.01 per row, so the
    stratified SE of the mean is ~0.005) differ by less than a standard error there; at
    tau 100 the copy is 5 higher, many standard errors apart."""
    kl1 = dict(zip(IDS, [0.2, 0.4, 0.1, 0.1]))
    close = _rows("close", "D", {pid: v + 0.001 for pid, v in kl1.items()},
                  dict(zip(IDS, [25, 45, 15, 15])))
    _, warnings = _score(MLP_A + close, PROBLEMS)
    (note,) = [w for w in warnings if "standard error" in w and "differ" in w]
    assert note.startswith("mlp and close differ by less than a standard error at tau = 1:")
    far = _rows("far", "E", {pid: v + 1.0 for pid, v in kl1.items()},
                dict(zip(IDS, [25, 45, 15, 15])))
    _, warnings = _score(MLP_A + far, PROBLEMS)
    assert not [w for w in warnings if "differ by less" in w]


def test_diagnostics_are_averaged_over_the_smallest_taus_rows():
    diag = lambda value: '{"rejection_ability": %s, "epistemic": null}' % value
    rows = [dataclasses.replace(r, diagnostics=diag(0.1 * i) if r.tau == 1 else diag(9.0))
            for i, r in enumerate(MLP_A)]
    (record,), _ = _score(rows, PROBLEMS)
    # tau = 1 rows are MLP_A's even positions: i = 0, 2, 4, 6 -> 0.0, 0.2, 0.4, 0.6
    assert record["rejection_ability"] == pytest.approx(0.3)
    assert math.isnan(record["epistemic"]) and math.isnan(record["occupied_cells"])


def test_health_and_the_references_fill_and_clip_rules():
    """ens has 3 of 4 problems (the 4th failed) and one estimate below the tolerance:
    health (3 * 2 - 1) / 8. Under the reference's rules its means are over all 4 problems,
    the missing one at 1e6 and the negative one at 0; under ours over its 3, unchanged."""
    rows = MLP_A + _rows("ens", "C", dict(zip(IDS[:3], [0.05, -0.01, 0.1])),
                         dict(zip(IDS[:3], [5, 15, 10]))) + ENS_FAILED
    ours = _by_agent(_score(rows, PROBLEMS)[0])["ens"]
    theirs = _by_agent(_score(rows, PROBLEMS, rules="reference")[0])["ens"]
    assert ours["health"] == theirs["health"] == pytest.approx(5 / 8)
    assert _by_agent(_score(rows, PROBLEMS)[0])["mlp"]["health"] == 1
    assert ours["rules"] == "ours" and theirs["rules"] == "reference"
    # Stratified means weigh each (temperature, T) stratum by its problems: here the
    # plain mean over the problems each counts.
    assert ours["kl_1"] == pytest.approx((0.05 - 0.01 + 0.1) / 3)
    assert theirs["kl_1"] == pytest.approx((0.05 + 0.0 + 0.1 + 1e6) / 4)
    assert ours["problems"] == theirs["problems"] == 3 and theirs["of"] == 4
    with pytest.raises(ValueError, match="unknown rules 'nope'"):
        _score(rows, PROBLEMS, rules="nope")


@pytest.mark.parametrize("sweep, columns", [
    ("paper", ["temperature", "num_train"]),
    ("classification-quick", ["temperature", "num_train", "input_dim"]),
    ("real-quick", ["dataset", "num_train"]),
    ("regression-quick", ["input_dim", "noise_variance", "num_train"]),
])
def test_setting_columns_are_named_by_the_problems_one_meaning_each(sweep, columns):
    """A per-setting record names its stratum's coordinates as its problems do: a
    regression setting's noise variance is in ``noise_variance``, never in
    ``temperature``; a dataset in ``dataset``; pooled records have the same names, None."""
    problems = dict([(pid, p) for pid, p in leaderboard.get_sweep(sweep).items()
                     if p.input_dim != 2 or sweep == "paper"][:12])  # d = 2: no d column
    rows = [_stored(p, agent, "A", tau, 1.0 + i)
            for agent in ("a", "base") for i, p in enumerate(problems.values())
            for tau in p.taus]
    for record in scoring.kl_by_setting(rows, problems):
        assert [k for k in record if k in (*columns, "temperature", "dataset",
                                           "noise_variance", "input_dim")] == columns
        problem = next(p for p in problems.values()
                       if all(p.stratum_columns[c] == record[c] for c in columns))
        assert problem.stratum_columns == {c: record[c] for c in columns}
    pooled = [r for r in scoring.compare_agents(rows, problems, "a", ["base"])
              if r["scope"] == "pooled"]
    assert pooled and all({c: r[c] for c in columns} == dict.fromkeys(columns) for r in pooled)


def test_the_floor_columns_are_each_agents_paired_excess_over_the_floor_agent():
    """Hand-computed: agent a is the floor plus 0.1 on the T = 10 problems and plus 0.3 on
    the T = 100 ones at tau 1, so its excess is 0.2, and its paired standard error is 0
    (no spread within a setting); the floor itself is 0 above; without floor rows the
    columns are NaN with a warning."""
    floor_kl = {"classification_2d/90": 0.5, "classification_2d/91": 0.9,
                "classification_2d/110": 0.2, "classification_2d/111": 0.4}
    rows = []
    for pid, kl in floor_kl.items():
        extra = 0.1 if PAPER[pid].num_train == 10 else 0.3
        for tau in PAPER[pid].taus:
            rows += [_row("base", "X", pid, tau, kl * tau), _row("a", "A", pid, tau, kl * tau + extra)]
    defaults = {**DEFAULTS, "hmc": "X"}
    records, _ = scoring.score_agents([r for r in rows], PROBLEMS, defaults=defaults,
                                      baseline="base", floor="base")
    got = {r["agent"]: r for r in records}
    assert got["a"]["kl_1_above_floor"] == pytest.approx(0.2)
    assert got["a"]["kl_1_above_floor_stderr"] == pytest.approx(0.0, abs=1e-12)
    assert got["base"]["kl_100_above_floor"] == pytest.approx(0.0)
    records, warnings = scoring.score_agents(rows, PROBLEMS, defaults=defaults,
                                             baseline="base", floor="hmc")
    assert all(math.isnan(r["kl_1_above_floor"]) for r in records)
    assert any("no hmc default-config results" in str(w) for w in warnings)
