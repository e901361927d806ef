"""The tier of programs compiled as users' are: the suite compiles with XLA's backend
optimisations and fusion emitters off (conftest.py, to halve compile times), so this runs
the command with a user's process settings and checks its rows against the suite's."""

import functools
import os
import subprocess
import sys

import pytest

from neural_testbed import agents, leaderboard

SUITE_ONLY = ("JAX_DISABLE_MOST_OPTIMIZATIONS", "XLA_FLAGS")  # what conftest.py adds


@pytest.mark.slow  # a cold command with the users' flags (their programs are not cached)
def test_the_command_compiled_as_users_run_it_gives_the_suites_numbers(tmp_path):
    """Both compile the same programs; only LLVM's optimisation and XLA's emitters differ,
    which changes float32 rounding, not the algorithm or keys. Rounding moves an estimate
    far less than its standard error (a different algorithm or key moves it by about one
    se), so 0.2 se is the tolerance; accuracy may differ by the few test points whose
    predicted class flips with the rounding (a point is 1/1000 of it)."""
    env = {k: v for k, v in os.environ.items() if k not in SUITE_ONLY}
    db = tmp_path / "users.db"
    done = subprocess.run([sys.executable, "-m", "neural_testbed.cli", "run", "--agent", "mlp",
                           "--sweep", "smoke", "--db", str(db), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with leaderboard.ResultsStore(db, create=False) as store:
        users = {(r.problem_id, r.tau): r for r in store.rows()}
    spec = agents.get_agent("mlp")
    suite = leaderboard.run_agent(functools.partial(spec.make, spec.default),
                                  list(leaderboard.get_sweep("smoke").values()), "mlp",
                                  config=spec.default, progress=False)
    assert len(suite) == len(users) == 8
    for row in suite:
        user = users[row.problem_id, row.tau]
        assert row.status == user.status == "ok"
        assert abs(user.kl - row.kl) <= 0.2 * row.kl_stderr, (row.problem_id, row.tau)
        assert abs(user.accuracy - row.accuracy) <= 5e-3, (row.problem_id, row.tau)
