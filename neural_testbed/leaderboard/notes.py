"""Notes for the reader of a table: each a full sentence, and a brief for the one-line summary.

Scoring says a lot beside a table (where published rows fill a store's gaps, which
neighbours are within a standard error, ...). A terminal shows the briefs on one line, and
every note in full on request (``--verbose``); DataFrames and the library return the full
texts, since a :class:`Note` is a ``str``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["Note", "one_line"]


class Note(str):
    """A note's full text (the string itself) and its ``brief``: what it is about in a few
    words. Notes with equal briefs are counted, not repeated, on the summary line."""

    brief: str

    def __new__(cls, text: str, brief: str) -> Note:
        note = super().__new__(cls, text)
        note.brief = brief
        return note


def one_line(notes: Sequence[str]) -> str:
    """The notes' briefs on one line (a plain ``str`` is its own brief), each with its count,
    and how to see them in full."""
    counts = Counter(getattr(note, "brief", note) for note in notes)
    briefs = [brief if n == 1 else f"{brief} (x{n})" for brief, n in counts.items()]
    what = "1 note: --verbose shows it" if len(notes) == 1 else (
        f"{len(notes)} notes: --verbose shows them")
    return f"note: {'; '.join(briefs)} ({what} in full)"
