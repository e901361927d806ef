"""Terminal tables that fit: a value and its standard error in one cell, and as many
columns as the terminal's width holds, by priority; the others are named below the table.

Only the terminal table is shaped here: ``--format csv|markdown|json`` and ``--wide``
keep every column, one meaning each.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from neural_testbed.leaderboard import scoring

__all__ = ["DEFAULT_WIDTH", "cells", "fitted", "fitted_records", "truncated",
           "width", "wrapped"]

DEFAULT_WIDTH = 100  # where no terminal says its width (a pipe, a file)


def width() -> int:
    """The terminal's width in columns (``COLUMNS`` first), else :data:`DEFAULT_WIDTH`."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def fitted(columns: Sequence[tuple[str, Sequence[str], int]],
           limit: int) -> tuple[str, list[str]]:
    """The aligned table of ``columns`` ((header, cells, priority), in the order shown)
    that fits in ``limit`` characters, and the headers left out.

    Columns are taken by priority (lowest first; the order shown among equals) while
    they fit; the first column is always shown, and a column whose cells are all empty
    is left out without a word."""
    sizes = {i: max(len(header), *map(len, cells)) if cells else len(header)
             for i, (header, cells, _) in enumerate(columns) if any(cells)}
    chosen, used = set(), -2
    for i in sorted(sizes, key=lambda i: (i != 0, columns[i][2], i)):
        if not chosen or used + 2 + sizes[i] <= limit:
            chosen.add(i)
            used += 2 + sizes[i]
    shown = [(columns[i][0], columns[i][1], sizes[i]) for i in sorted(chosen)]
    lines = ["  ".join(header.ljust(size) for header, _, size in shown).rstrip()]
    for row in range(len(shown[0][1])):
        lines.append("  ".join(cells[row].ljust(size) for _, cells, size in shown).rstrip())
    return "\n".join(lines), [columns[i][0] for i in sorted(set(sizes) - chosen)]


def truncated(text: str, size: int) -> str:
    """``text`` cut to ``size`` characters, its end marked with "..." where cut."""
    return text if len(text) <= size else text[:size - 3] + "..."


def cells(records: Sequence[Mapping[str, Any]], name: str) -> list[str]:
    """Column ``name`` of ``records`` as text, as every table writes a value."""
    return [scoring.format_cell(r.get(name)) for r in records]


def wrapped(text: str, indent: str = "") -> str:
    """``text`` wrapped to the terminal's width, later lines indented by ``indent``."""
    return textwrap.fill(text, width(), subsequent_indent=indent)


def fitted_records(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """``records`` as a terminal table of ``columns`` that fits the terminal (those on the
    right go first), with a line naming any left out."""
    table, left_out = fitted([(c, cells(records, c), i) for i, c in enumerate(columns)],
                             width())
    return table + (f"\n(not shown at this width: {', '.join(left_out)}; --format csv has "
                    "every column)" if left_out else "")
