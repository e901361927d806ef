"""Leaderboard aggregation on a hand-made results table with hand-computed answers."""

import math

import pytest

from neural_testbed import leaderboard
from neural_testbed.leaderboard import scoring

PAPER = leaderboard.get_sweep("paper")
# Two settings (temperature 0.1, T = 10 and T = 100), two seeds each.
PROBLEMS = {pid: PAPER[pid] for pid in ("classification_2d/90", "classification_2d/91",
                                        "classification_2d/110", "classification_2d/111")}


def _row(agent, config_hash, pid, tau, kl, status="ok", accuracy=0.9, ece=0.1):
    p = PAPER[pid]
    return {
        "agent": agent, "config_hash": config_hash, "config": f'{{"name":"{config_hash}"}}',
        "problem_id": pid, "temperature": p.temperature, "num_train": p.num_train,
        "seed": p.seed, "input_dim": 2, "num_classes": 2, "tau": tau, "num_test": 1000,
        "num_samples": 1000, "estimator": "auto", "agent_seed": 0, "kl": kl, "kl_stderr": 0.01,
        "accuracy": accuracy, "ece": ece, "train_seconds": 1.0, "eval_seconds": 0.5,
        "status": status, "error": "", "version": "0", "timestamp": "t",
    }


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
    records, warnings = scoring.score_agents(ROWS, PROBLEMS, "global")
    assert warnings == []
    mlp, ens = _by_agent(records)["mlp"], _by_agent(records)["ens"]
    assert mlp["config_hash"] == "A"
    assert mlp["kl_1"] == pytest.approx(0.2) and mlp["kl_100"] == pytest.approx(20)
    # stderr of [0.2, 0.4, 0.1, 0.1]: sample variance 0.06 / 3 = 0.02, / 4 problems -> sqrt
    assert mlp["kl_1_stderr"] == pytest.approx(math.sqrt(0.02 / 4))
    assert mlp["kl_agg"] == pytest.approx(0.4)
    assert mlp["kl_1_norm"] == pytest.approx(1.0)
    assert ens["kl_1"] == pytest.approx(0.1) and ens["kl_100"] == pytest.approx(10)
    assert ens["kl_1_stderr"] == pytest.approx(0.05 / math.sqrt(3))
    assert ens["kl_1_norm"] == pytest.approx(0.5) and ens["kl_100_norm"] == pytest.approx(0.5)
    assert ens["kl_agg"] == pytest.approx(0.2)
    assert ens["accuracy"] == pytest.approx(0.8) and ens["ece"] == pytest.approx(0.2)
    assert ens["seconds_per_problem"] == pytest.approx(2.0)  # 1 s train + 2 x 0.5 s eval
    assert (ens["problems"], ens["of"]) == (3, 4)
    assert ens["flag"] == "MISSING 1 of 4 problems" and mlp["flag"] == ""
    assert [r["agent"] for r in records] == ["ens", "mlp"]  # sorted by d_KL^agg


def test_per_setting_tuning_picks_the_best_config_in_each_setting():
    records, _ = scoring.score_agents(ROWS, PROBLEMS, "per-setting")
    mlp = _by_agent(records)["mlp"]
    assert mlp["config_hash"] == "A,B" and mlp["config"] == "per setting: 2 configs"
    # B on T = 10 (0.1, 0.1 / 10, 10), A on T = 100 (0.1, 0.1 / 10, 10).
    assert mlp["kl_1"] == pytest.approx(0.1) and mlp["kl_100"] == pytest.approx(10)
    ens = _by_agent(records)["ens"]
    assert ens["kl_1_norm"] == pytest.approx(1.0) and ens["kl_100_norm"] == pytest.approx(1.0)


def test_no_baseline_results_is_a_warning_and_nan_normalisation():
    records, warnings = scoring.score_agents(ENS, PROBLEMS)
    assert len(warnings) == 1 and "no mlp results" in warnings[0]
    assert math.isnan(records[0]["kl_1_norm"])


def test_unknown_tuning_is_rejected():
    with pytest.raises(ValueError, match="unknown tuning 'best'; allowed: global, per-setting"):
        scoring.score_agents(ROWS, PROBLEMS, "best")


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
    cells = {(r["num_train"], r["tau"]): r for r in records}
    assert cells[(10, 1)]["kl_diff"] == pytest.approx(-1.0)
    # stderr of the paired differences: std(noise, ddof=1) / sqrt(5)
    se = math.sqrt(sum(e * e for e in [0.0, 0.1, -0.1, 0.05, -0.05]) / 4 / 5)
    assert cells[(10, 1)]["stderr"] == pytest.approx(se)
    assert cells[(10, 1)]["verdict"] == "better" and cells[(10, 1)]["pairs"] == 5
    assert cells[(10, 100)]["verdict"] == "n.s."
    assert cells[(100, 100)]["verdict"] == "worse"
    assert cells[(100, 100)]["kl_diff"] == pytest.approx(5.0)


def test_compare_without_results_for_an_agent_is_a_clear_error():
    rows, problems = _five_seed_table()
    with pytest.raises(ValueError, match="no results for agent 'mlp' on this sweep; agents with "
                                         "results: base, new"):
        scoring.compare_agents(rows, problems, "new", ["mlp"])


def test_format_records_as_csv_and_markdown():
    records = [{"agent": "a", "kl": 0.5}, {"agent": "b", "kl": math.nan}]
    assert scoring.format_records(records, "csv").splitlines() == ["agent,kl", "a,0.5", "b,nan"]
    assert scoring.format_records(records, "markdown").splitlines()[2] == "| a | 0.5 |"
    assert "n/a" in scoring.format_records(records, "table")
