"""Problem sweeps, running agents over them, the results store, scores and comparisons."""

from neural_testbed.leaderboard.frames import (
    compare_frame,
    leaderboard_frame,
    results_frame,
    studies_frame,
)
from neural_testbed.leaderboard.probing import ProbeSettings, probe_problems
from neural_testbed.leaderboard.problems import (
    SWEEPS,
    Problem,
    get_sweep,
    load_problem,
    prior_knowledge,
)
from neural_testbed.leaderboard.scoring import (
    compare_agents,
    format_records,
    kl_by_setting,
    score_agents,
    score_candidates,
)
from neural_testbed.leaderboard.store import DEFAULT_DB, ResultsStore, StoreError
from neural_testbed.run import RunOptions, SweepSummary, run_agent, run_sweep

__all__ = [
    "DEFAULT_DB",
    "SWEEPS",
    "ProbeSettings",
    "Problem",
    "ResultsStore",
    "RunOptions",
    "StoreError",
    "SweepSummary",
    "compare_agents",
    "compare_frame",
    "format_records",
    "get_sweep",
    "kl_by_setting",
    "leaderboard_frame",
    "load_problem",
    "prior_knowledge",
    "probe_problems",
    "results_frame",
    "run_agent",
    "run_sweep",
    "score_agents",
    "score_candidates",
    "studies_frame",
]
