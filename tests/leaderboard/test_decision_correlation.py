"""Does d_KL predict decisions across agents (`correlate-decisions`)? Known answers from
made-up values, the records' reading, and the command end to end on short runs."""

import csv
import dataclasses
import io
import json

import numpy as np
import pytest
from scipy import stats

from neural_testbed import bandit, cli, leaderboard
from neural_testbed.active import classification
from neural_testbed.agents import registry
from neural_testbed.leaderboard import decision_correlation, studies

SWEEP = leaderboard.get_sweep("quick")  # taus 1 and 100
AGENTS = ("a", "b", "c", "d")
SEEDS = range(6)
MLP = registry.get_agent("mlp").default


def _kl(order_at: dict[int, list[int]]) -> dict[str, dict[str, dict[int, float]]]:
    """Per agent, problem and tau: a d_KL that ranks the agents as ``order_at[tau]`` says
    (rank 0 lowest) on every problem, scaled differently per problem."""
    return {agent: {pid: {tau: (1 + order_at[tau][i]) * (1 + 0.1 * p.seed + 0.01 * p.num_train)
                          for tau in p.taus}
                    for pid, p in SWEEP.items()}
            for i, agent in enumerate(AGENTS)}


def _per_seed(ranks: list[int]) -> dict[str, dict[int, float]]:
    """Per agent and seed: values that rank the agents as ``ranks`` on every seed."""
    return {agent: {s: (1 + rank) * (1 + s) for s in SEEDS}
            for agent, rank in zip(AGENTS, ranks)}


def test_agents_in_the_same_order_on_every_seed_and_problem_correlate_at_one_in_every_draw():
    """Every resample keeps the order, so the interval is the point, and the taus tie."""
    records = decision_correlation.correlate_decisions(
        {"bandit": _per_seed([0, 1, 2, 3])}, {"quick": (SWEEP, _kl({1: [0, 1, 2, 3],
                                                                   100: [0, 1, 2, 3]}))},
        num_bootstrap=200)
    assert [(r["tau"], r["agents"], r["seeds"], r["problems"]) for r in records] == [
        (1, 4, 6, len(SWEEP)), (100, 4, 6, len(SWEEP))]
    for r in records:
        assert (r["spearman"], r["p5"], r["p95"]) == pytest.approx((1, 1, 1))
    assert np.isnan(records[0]["advantage"])  # tau 1 against itself
    assert (records[1]["advantage"], records[1]["advantage_p5"],
            records[1]["advantage_p95"]) == pytest.approx((0, 0, 0))


def test_the_advantage_is_positive_where_only_the_joint_kl_orders_the_agents_as_the_claim_says():
    """Regret rises with KL (sign +1), gain falls (sign -1): d_KL^100 in the decisions'
    order and d_KL^1 reversed give advantage 2 for both."""
    kl = _kl({1: [3, 2, 1, 0], 100: [0, 1, 2, 3]})
    records = decision_correlation.correlate_decisions(
        {"bandit": _per_seed([0, 1, 2, 3]), "active": _per_seed([3, 2, 1, 0])},
        {"quick": (SWEEP, kl)}, num_bootstrap=100)
    got = {(r["decision"], r["tau"]): r for r in records}
    assert got["bandit", 1]["spearman"] == pytest.approx(-1)
    assert got["bandit", 100]["spearman"] == pytest.approx(1)
    assert got["active", 1]["spearman"] == pytest.approx(1)
    assert got["active", 100]["spearman"] == pytest.approx(-1)
    for decision in ("bandit", "active"):
        assert got[decision, 100]["advantage"] == pytest.approx(2)
        assert got[decision, 100]["advantage_p5"] == pytest.approx(2)


def test_the_point_estimate_is_scipys_spearman_of_the_agents_means_and_the_draws_repeat():
    rng = np.random.default_rng(0)
    per_seed = {a: {s: float(rng.exponential(1 + i)) for s in SEEDS}
                for i, a in enumerate(AGENTS)}
    kl = {a: {pid: {tau: float(rng.exponential(1 + (i * tau) % 3)) for tau in p.taus}
              for pid, p in SWEEP.items()} for i, a in enumerate(AGENTS)}
    args = ({"bandit": per_seed}, {"quick": (SWEEP, kl)})
    records = decision_correlation.correlate_decisions(*args, num_bootstrap=300)
    values = [np.mean(list(per_seed[a].values())) for a in AGENTS]
    for r in records:
        means = [np.mean([kl[a][pid][r["tau"]] for pid in SWEEP]) for a in AGENTS]
        assert r["spearman"] == pytest.approx(stats.spearmanr(means, values).statistic)
        assert r["kl"] == pytest.approx(means) and r["value"] == pytest.approx(values)
        assert r["p5"] <= r["p95"]
    again = decision_correlation.correlate_decisions(*args, num_bootstrap=300)
    assert [(r["p5"], r["p95"]) for r in again] == [(r["p5"], r["p95"]) for r in records]


def test_an_agent_lacking_problems_or_seeds_is_left_out_or_trimmed_and_the_note_says_so():
    kl = _kl({1: [0, 1, 2, 3], 100: [0, 1, 2, 3]})
    del kl["d"][next(iter(SWEEP))]  # d lacks a problem
    per_seed = _per_seed([0, 1, 2, 3])
    del per_seed["a"][5]  # a lacks seed 5: seeds 0..4 are used for all
    record = decision_correlation.correlate_decisions(
        {"bandit": per_seed}, {"quick": (SWEEP, kl)}, num_bootstrap=50)[0]
    assert record["agent_names"] == ("a", "b", "c") and record["seeds"] == 5
    assert "without every quick problem: d" in record["note"]
    assert "only the 5 seeds every agent has are used" in record["note"]

    del kl["c"]
    record = decision_correlation.correlate_decisions(
        {"bandit": per_seed}, {"quick": (SWEEP, kl)}, num_bootstrap=50)[0]
    assert np.isnan(record["spearman"]) and record["agents"] == 2
    assert "2 agents with both; a correlation needs 3" in record["note"]


@pytest.mark.parametrize("decisions, draws, fragment", [
    ({"regret": {}}, 10, "unknown decision 'regret'; allowed: bandit, active"),
    ({"bandit": {}}, 0, "num_bootstrap must be an integer >= 1, got 0"),
])
def test_bad_arguments_are_refused(decisions, draws, fragment):
    with pytest.raises(ValueError, match=fragment):
        decision_correlation.correlate_decisions(decisions, {}, num_bootstrap=draws)


def test_values_are_read_from_the_stored_records_of_the_default_config_and_seeds_only():
    """Regret is a record's total; gain is uniform's mean d_KL minus the priority's on the
    same seed; another config, a seed not asked for and a seed without its uniform twin
    are left out."""
    hashes = {"mlp": "h"}
    setting = bandit.BanditSetting(num_steps=3, retrain_every=1)

    def regret_record(config_hash, seed, regret):
        record = studies.bandit_record("mlp", MLP, seed, bandit.BanditRun(
            np.zeros(3, np.int32), np.zeros(3, np.int32), np.array(regret, np.float32)),
            setting)
        return {**record, "config_hash": config_hash}

    regrets = decision_correlation.bandit_regrets(
        [regret_record("h", 0, [0.5, 0.25, 0]), regret_record("h", 1, [1, 1, 1]),
         regret_record("other", 0, [9, 9, 9]), regret_record("h", 2, [1, 1, 1])], hashes,
        seeds=range(2))
    assert regrets == {"mlp": {0: 0.75, 1: 3.0}}

    def active_record(priority, seed, kl):
        run = classification.ActiveRun(np.zeros(3, np.int32), np.array([1, 2, 3], np.int32),
                                       np.array(kl, np.float32))
        record = studies.active_record("mlp", MLP, seed, run, classification.ActiveSetting(
            priority=priority, num_steps=3, batch_size=1))
        return {**record, "config_hash": "h"}

    gains = decision_correlation.active_gains(
        [active_record("uniform", 0, [0.5, 0.25, 0.125]), active_record("bald", 0, [0.5, 0.125, 0]),
         active_record("bald", 1, [0.5, 0.5, 0.5]), active_record("uniform", 2, [1, 1, 1]),
         active_record("bald", 2, [0, 0, 0])], hashes, "bald", seeds=range(2))
    assert gains == {"mlp": {0: pytest.approx((0.875 - 0.625) / 3)}}


WORDS = ["--seeds", "2", "--steps", "12", "--retrain-every", "6", "--labels", "11",
         "--batch-size", "5", "--num-bootstrap", "50"]  # the settings below, as flags
BANDIT = bandit.BanditSetting(num_steps=12, retrain_every=6)
ACTIVE = classification.ActiveSetting(num_steps=11, batch_size=5)


def _correlate(tmp_path, *words):
    return cli.main(["correlate-decisions", "--db", str(tmp_path / "decisions.db"), "--quiet",
                     *WORDS, *words])


def _stored_runs(agent: str, regret: float, kl: float, seeds=(0, 1)) -> list[dict]:
    """Made-up bandit and active-learning records of ``seeds`` of ``agent``'s default
    config with the settings of WORDS, as the command stores them."""
    config = registry.get_agent(agent).default
    records = []
    for seed in seeds:
        run = bandit.BanditRun(np.zeros(12, np.int32), np.zeros(12, np.int32),
                               np.full(12, regret / 12 * (1 + seed), np.float32))
        records.append(studies.bandit_record(agent, config, seed, run, BANDIT))
        for priority, shift in (("uniform", 0.0), ("bald", 0.01)):
            run = classification.ActiveRun(np.zeros(11, np.int32), np.arange(1, 4),
                                           np.full(3, kl - shift, np.float32))
            records.append(studies.active_record(agent, config, seed, run, dataclasses.replace(
                ACTIVE, priority=priority)))
    return records


def test_the_command_computes_only_what_is_not_stored_and_correlates_with_published_kl(
        tmp_path, capsys):
    """Two agents' runs are in the store already, the third's are computed and stored (a
    rerun computes nothing); d_KL comes from the published rows of both sweeps; the table
    has a row per decision, sweep and tau, and the figure is drawn. (Computing all three
    would compile nine programs: the tasks' own tests run real agents.)"""
    with leaderboard.ResultsStore(str(tmp_path / "decisions.db")) as store:
        store.write_studies([*_stored_runs("mlp", 5.0, 0.1),
                             *_stored_runs("average_class_probs", 4.0, 0.2)])
    agents = ["--agent", "uniform,average_class_probs,mlp"]
    figure = tmp_path / "decisions.png"
    assert _correlate(tmp_path, *agents, "--out", str(figure)) == 0
    out = capsys.readouterr().out
    assert "6 seed runs computed" in out  # uniform's bandit, uniform and bald x 2 seeds
    assert figure.stat().st_size > 0 and figure.with_suffix(".pdf").exists()
    assert _correlate(tmp_path, *agents, "--format", "csv") == 0
    captured = capsys.readouterr()
    assert "0 seed runs computed" in captured.err
    table = list(csv.DictReader(io.StringIO(captured.out)))
    assert [(r["decision"], r["sweep"], r["tau"]) for r in table] == [
        (d, s, t) for d in ("bandit", "active")
        for s, taus in (("classification", "1 10"), ("paper", "1 100")) for t in taus.split()]
    assert all(r["agents"] == "3" and r["seeds"] == "2" for r in table)
    with leaderboard.ResultsStore(str(tmp_path / "decisions.db"), create=False) as store:
        computed = [(r["study"], json.loads(r["data"]).get("priority"), r["problem_id"])
                    for r in store.studies(agent="uniform")]
    assert sorted(computed) == [("active", p, f"active/{s}") for p in ("bald", "uniform")
                                for s in (0, 1)] + [("bandit", None, f"bandit/{s}") for s in (0, 1)]


def test_the_study_is_of_the_seeds_asked_for_where_the_store_holds_more(tmp_path, capsys):
    """A store with a longer run's seeds (0 to 2) gives `--seeds 2` the correlation of
    seeds 0 and 1, as its header says, and `--seeds 3` that of all three."""
    agents = ("uniform", "average_class_probs", "mlp")
    with leaderboard.ResultsStore(str(tmp_path / "decisions.db")) as store:
        store.write_studies([r for i, agent in enumerate(agents)
                             for r in _stored_runs(agent, 3.0 + i, 0.1 * (1 + i),
                                                   seeds=(0, 1, 2))])
    for seeds in (2, 3):
        assert _correlate(tmp_path, "--agent", ",".join(agents), "--format", "csv",
                          "--seeds", str(seeds)) == 0
        captured = capsys.readouterr()
        assert "0 seed runs computed" in captured.err
        assert f"seeds 0..{seeds - 1};" in captured.err
        table = list(csv.DictReader(io.StringIO(captured.out)))
        assert table and all(r["seeds"] == str(seeds) for r in table)


@pytest.mark.parametrize("words, fragments", [
    (["--agent", "cnp,mlp,uniform"], ["'cnp' is for regression only"]),
    (["--agent", "random_forest,mlp,uniform"], ["agent 'random_forest'", "a host agent"]),
    (["--agent", "mlp,uniform"], ["needs 3 agents, got 2 (mlp, uniform)"]),
    (["--agent", "mlp,uniform,nobody"], ["nobody"]),
    (["--seeds", "0"], ["--seeds must be an integer >= 1, got 0"]),
    (["--num-bootstrap", "0"], ["--num-bootstrap must be an integer >= 1, got 0"]),
])
def test_bad_input_is_one_line_before_the_store_is_made(tmp_path, one_error_line, words,
                                                         fragments):
    assert _correlate(tmp_path, *words) == 2
    one_error_line(*fragments)
    assert not (tmp_path / "decisions.db").exists()


def test_the_default_agents_are_those_both_tasks_can_run_but_the_trivial_baselines():
    from neural_testbed.cli import decisions

    parser = cli.build_parser()
    able, unable = decisions._decision_agents(parser.parse_args(["correlate-decisions"]))
    assert {"mlp", "knn", "ensemble", "epinet", "sgmcmc"} <= set(able)
    assert {"uniform", "average_class_probs", "cnp", "random_forest"}.isdisjoint(able)
    # random_forest, a host agent; hmc, which declines padded data (its sampling would
    # pay for every padded row), where the tasks train on data padded to num_steps rows
    assert unable == ["hmc", "random_forest"]
