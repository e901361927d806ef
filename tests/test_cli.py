"""The neural-testbed command, end to end (in process)."""

import csv

import pytest

from neural_testbed import cli, leaderboard


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
    out_csv = tmp_path / "rows.csv"
    status = cli.main(["run", "--agent", "mlp", "--set", "num_steps=50", "--quiet",
                       "--output", str(out_csv)])
    assert status == 0
    out = capsys.readouterr().out
    for pid in leaderboard.get_sweep("quick"):
        assert pid in out
    assert "aggregate (stratified ± se): d_KL^1 = " in out and "d_KL^100 = " in out and "d_KL^agg = " in out
    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(leaderboard.get_sweep("quick"))
    assert {r["tau"] for r in rows} == {"1", "100"} and {r["status"] for r in rows} == {"ok"}


def test_run_of_one_shard_counts_the_other_shards_problems_as_not_computed(tmp_path, capsys):
    # smoke has two shapes (T = 10 and 100), so shard 1/2 computes the two T = 10 problems.
    status = cli.main(["run", "--agent", "mlp", "--set", "num_steps=50", "--quiet", "--sweep",
                       "smoke", "--shard", "1/2", "--db", str(tmp_path / "s.db")])
    assert status == 0
    aggregate = capsys.readouterr().out.splitlines()[-2]
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
    for option in ("--agent", "--sweep", "--set", "--output", "--seed", "--estimator"):
        assert option in out
