"""Which rows count: the one rule that every table, comparison, figure and DataFrame uses.

A store's rows and the published baseline rows are combined here and nowhere else:

1. A row counts for a problem only if it evaluated that problem: same id *and* same
   definition (its ``problem_hash``, see :func:`neural_testbed.base.definition_hash`),
   N and M. Rows of an edited data file, of another file of the same name, or of a
   built-in problem whose definition changed are left out, and a note says so.
2. The published rows (each agent's *default* config, agent seed 0, estimator
   ``auto``) fill every (agent, problem) the store lacks. Where the store holds the
   same config's rows, of the same code version, for every tau of a problem, those
   take precedence for that problem; partial or other-version local rows of the default
   config on a problem with published rows are set aside for it, never mixed in.
3. Rows of any other config, seed or estimator are the user's own candidates: published
   rows never merge into them.

Every row that comes back carries its ``source``: ``"local"`` or ``"published"``, which
scoring turns into each record's ``source`` and every table and figure shows.

Example: the store holds mlp's default config on the 4 ``smoke`` problems and a
``hidden=50`` config on the same 4. On the 18-problem ``quick`` sweep, mlp's default
config then counts 4 local and 14 published problems (source ``local+published``) and is
the normaliser; the ``hidden=50`` config is scored on its own 4 problems, flagged MISSING
14 of 18.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base
from neural_testbed.agents import registry
from neural_testbed.leaderboard import baselines as baselines_lib
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard.notes import Note
from neural_testbed.leaderboard.store import StoredRow

__all__ = ["counted_rows", "default_hashes"]


def default_hashes(agents: Iterable[str]) -> dict[str, str]:
    """The config hash of each registered agent's default config (unregistered names
    are left out: their default is not known here)."""
    return {name: configs_lib.config_hash(name, registry.AGENTS[name].default)
            for name in agents if name in registry.AGENTS}


def _evaluates(row: StoredRow, problem: Any) -> bool:
    return (row.problem_hash == base.definition_hash(problem)
            and row.num_test == problem.num_test and row.num_samples == problem.num_samples)


def counted_rows(rows: Iterable[StoredRow], problems: Mapping[str, Any],
                 published_agents: Sequence[str] | None = (),
                 published: baselines_lib.Published | None = None,
                 ) -> tuple[list[StoredRow], list[str]]:
    """The rows that count on ``problems``, each with its ``source``, and notes.

    Args:
      rows: a store's rows (:meth:`ResultsStore.rows`).
      problems: the sweep, problem id -> problem.
      published_agents: the agents whose published rows fill what the store lacks;
        None: every published agent; empty: none (the store alone).
      published: the published table (default: the one shipped with the package).

    Returns:
      The rows (local first, then published; each says its ``source``) and one-line
      notes on what was left out or filled in.
    """
    notes: list[Note] = []
    local, foreign = [], {}
    for r in rows:
        problem = problems.get(r.problem_id)
        if problem is None:
            continue
        if _evaluates(r, problem):
            local.append(r)
        elif r.problem_hash != base.definition_hash(problem):
            foreign.setdefault(r.problem_id, 0)
            foreign[r.problem_id] += 1
    if foreign:
        example = min(foreign)
        notes.append(Note(f"{sum(foreign.values())} stored rows under {len(foreign)} problem "
                          f"ids of this sweep evaluated other data or another problem "
                          f"definition (e.g. {example}: an edited or another data file of that "
                          "name, or rows of an older store) and are left out",
                          f"{sum(foreign.values())} stored rows of other data left out"))
    if published_agents is not None and not published_agents:
        return local, notes
    published = published or baselines_lib.load()
    agents = (sorted({r.agent for r in published.rows}) if published_agents is None
              else list(published_agents))
    extra, stale = baselines_lib.rows_for(published, agents, problems)
    notes += [Note(f"published baselines: {note}", "some published rows not used")
              for note in stale]
    extra = [r for r in extra if _evaluates(r, problems[r.problem_id])]
    defaults = default_hashes(agents)
    by_problem: dict[tuple[str, str], list[StoredRow]] = {}
    for r in extra:
        by_problem.setdefault((r.agent, r.problem_id), []).append(r)
    mine: dict[tuple[str, str], list[StoredRow]] = {}
    for r in local:
        if (r.agent in defaults and r.config_hash == defaults[r.agent]
                and r.estimator == "auto" and r.agent_seed == 0):
            mine.setdefault((r.agent, r.problem_id), []).append(r)
    kept, set_aside, filled = [], [], {}
    for key, theirs in by_problem.items():
        ours = mine.get(key, [])
        version = theirs[0].version
        complete = ({r.tau for r in ours if r.status == "ok" and r.version == version}
                    >= set(problems[key[1]].taus))
        if complete:
            continue  # the store's own rows of the same config and code version win
        set_aside += ours
        kept += theirs
        filled[key[0]] = filled.get(key[0], 0) + 1
    if set_aside:
        aside = {id(r) for r in set_aside}
        local = [r for r in local if id(r) not in aside]
        names = sorted({r.agent for r in set_aside})
        notes.append(Note(f"{len(set_aside)} stored rows of {', '.join(names)}'s default "
                          "config cover only some taus of a problem, or were computed by "
                          "another version, where published rows exist: the published rows "
                          "are used for those problems, not mixed with them",
                          f"{len(set_aside)} stored default-config rows set aside for "
                          "published ones"))
    if filled:
        where = published.describe(sorted(filled), problems)
        counts = ", ".join(f"{name} {count}" for name, count in sorted(filled.items()))
        notes.append(Note(f"published baseline rows ({where}) fill problems your store lacks "
                          f"(marked published): {counts} of {len(problems)}",
                          f"published rows fill gaps of {len(filled)} "
                          f"agent{'s' if len(filled) > 1 else ''} (source column)"))
    return local + kept, notes
