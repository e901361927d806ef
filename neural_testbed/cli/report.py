"""`report`: the static leaderboard site (:mod:`neural_testbed.site`)."""

from __future__ import annotations

import os
import pathlib
import sys

from neural_testbed import site
from neural_testbed.cli import options
from neural_testbed.leaderboard import baselines
from neural_testbed.leaderboard import problems as problems_lib
from neural_testbed.leaderboard import store as store_lib


def _add_report(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "report", parents=[g.common],
        help="write the leaderboard as a static web site",
        description="Writes DIR/index.html (the leaderboard of each sweep with standard errors, "
                    "significance groups, health and cost; sortable and filterable, readable "
                    "with scripts off), a page per agent (config, per-setting breakdown), a "
                    "page comparing each agent with its sweep's leader (compare's paired "
                    "tests) and the figures. From the published baseline rows, or a store's "
                    "rows with the published rows of the agents it lacks (marked by source). "
                    "Plain files: open index.html, or copy DIR to any static host.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the folder to write (created if missing; other files in it are "
                             "left alone)")
    parser.add_argument("--db", default=None,
                        help="a results store whose rows to show beside the published ones "
                             "(default: the published rows alone)")
    parser.add_argument("--sweep", dest="sweeps", action="append", default=None,
                        metavar="SWEEP",
                        help="a sweep to show (repeat for more; default: every sweep of the "
                             "published table)")
    parser.add_argument("--compare", nargs=2, action="append", default=[],
                        metavar=("AGENT", "BASELINE"),
                        help="also write the page comparing these two agents (repeatable)")
    parser.set_defaults(handler=report)


def report(args) -> int:
    """`report`: boards of the sweeps, then the site."""
    published = baselines.load()
    sweeps = args.sweeps or list(published.sweeps)
    for sweep in sweeps:
        if sweep not in problems_lib.SWEEPS:
            raise ValueError(f"--sweep {sweep!r}: no such sweep; allowed: "
                             f"{', '.join(problems_lib.SWEEPS)}")
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out!r} is a file, not a folder")
    if args.db is not None and not os.path.exists(args.db):
        raise ValueError(f"--db {args.db!r}: no results store there")
    rows = [] if args.db is None else store_lib.rows_to_score(args.db, with_baselines=True)
    boards = []
    for sweep in sweeps:
        try:
            boards.append(site.board(rows, sweep, problems_lib.get_sweep(sweep), None,
                                     published))
        except ValueError as error:  # a sweep nobody has rows of: said, and the rest go on
            print(f"note: {sweep}: {error}", file=sys.stderr)
    if not boards:
        raise ValueError("no sweep has results to show")
    known = {r["agent"] for b in boards for r in b.records}
    for pair in args.compare:
        for name in pair:
            if name not in known:
                raise ValueError(f"--compare {name!r}: no results for that agent on "
                                 f"{', '.join(b.sweep for b in boards)}")
    options.print_notes(args, [n for b in boards for n in b.notes])
    written = site.write_site(out, boards, [tuple(p) for p in args.compare])
    pages = sum(p.suffix == ".html" for p in written)
    print(f"wrote {out / 'index.html'} ({pages} pages, {len(written) - pages} figures) for "
          f"{', '.join(b.sweep for b in boards)}")
    return 0


PARSERS = {"report": _add_report}
