"""`merge` and `export`: whole stores combined, or written out as CSV or Parquet."""

from __future__ import annotations

from neural_testbed.cli import checks, options
from neural_testbed.leaderboard import frames, studies
from neural_testbed.leaderboard import store as store_lib

_KINDS = ", ".join(studies.STUDIES)  # the study results a store holds beside its rows


def _add_merge(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "merge", parents=[g.common], help="combine results stores into one",
        description=f"Copy the rows and the stored study results ({_KINDS}) of several "
                    "stores (e.g. the shards of a sweep, or one study's runs made on two "
                    "machines) into one. Exact duplicates are "
                    "skipped; rows or results with the same key but different values are "
                    "refused, and nothing is written.")
    parser.add_argument("inputs", nargs="+", metavar="DB", help="stores to read")
    parser.add_argument("-o", "--output", required=True, metavar="DB",
                        help="store to write (created if missing; may already hold rows)")
    parser.set_defaults(handler=merge)


def _add_export(commands, g: options.Groups) -> None:
    parser = commands.add_parser(
        "export", parents=[g.common, g.db],
        help="write every stored row (or study result) to a CSV or Parquet file",
        description="Write every stored row to a CSV or Parquet file (the predictives kept "
                    "for `xll` are binary and are not exported; `merge` carries them), or with "
                    "--table "
                    f"studies the study results ({_KINDS}), one value per line. For "
                    f"spreadsheets, {options.SPREADSHEET_NOTE}.")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the file to write")
    parser.add_argument("--format", default="csv", choices=["csv", "parquet"],
                        help="csv (default), or parquet (typed columns, for pandas, polars "
                             "or DuckDB; needs pyarrow: pip install "
                             "'neural-testbed[analysis]')")
    parser.add_argument("--table", default="rows", choices=["rows", "studies"],
                        help="rows (default): one line per stored row; studies: one line per "
                             f"value of the stored study results ({_KINDS}), "
                             "columns " + ", ".join(studies.LONG_COLUMNS) + " (TAL: name a "
                             "method, at round=R, then its metacorrelation; probes: name a "
                             "probe, at its parameter; bandit: name cumulative_regret, at "
                             "step=S; active: name 'kl_1 PRIORITY', at labels=N)")
    parser.set_defaults(handler=export)


def merge(args) -> int:
    """`merge`: the stores' rows and study records into one (:func:`store.merge_stores`)."""
    summary = store_lib.merge_stores(args.inputs, args.output)
    line = (f"merged {len(args.inputs)} stores into {args.output}: {summary.added} rows added, "
            f"{summary.duplicates} exact duplicates skipped")
    if summary.studies:
        line += (f"; {summary.studies_added} study results added ({_KINDS}), "
                 f"{summary.studies_duplicates} exact duplicates skipped")
    print(line)
    return 0


def export(args) -> int:
    """`export`: every stored row, or every study value, to a CSV or Parquet file."""
    checks.output_file(args.output, "-o")
    if args.format == "parquet":
        try:
            frames.parquet_engine()  # before any work
        except ImportError as error:
            raise ValueError(f"--format parquet: {error}") from None
    with store_lib.ResultsStore(args.db, create=False) as store:
        if args.format == "parquet":
            records, columns = (([r.record() for r in store.rows()], store_lib.COLUMNS)
                                if args.table == "rows" else
                                (studies.long_records(store.studies()), studies.LONG_COLUMNS))
            count = frames.write_parquet(records, columns, args.output)
        elif args.table == "rows":
            count = store.to_csv(args.output, spreadsheet_safe=True)
        else:
            count = studies.write_long_csv(store.studies(), args.output)
    print(f"wrote {count} {'rows' if args.table == 'rows' else 'study values'} to "
          f"{args.output}")
    return 0


# Each command's parser, added by the top-level parser (see cli.build_parser).
PARSERS = {"merge": _add_merge, "export": _add_export}
