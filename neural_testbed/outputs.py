"""Output files (CSV tables, figures) written whole or not at all.

A command that fails while writing one (on a full disk) must leave neither a
truncated file, which reads as a complete one, nor an empty one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from typing import IO, Any

__all__ = ["DiskFullError", "FORMULA_STARTS", "spreadsheet_safe", "written_whole"]

# How a text cell that a spreadsheet would run as a formula begins.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class DiskFullError(Exception):
    """The disk filled up writing an output file, of which nothing was kept."""


@contextlib.contextmanager
def written_whole(path: str | os.PathLike, mode: str = "w", **kwargs: object) -> Iterator[IO]:
    """A file object to write ``path`` with (``open``'s ``mode`` and ``kwargs``).

    It is a temporary file beside ``path``, renamed to it (keeping an existing
    file's permissions) once the block ends without an error and removed
    otherwise, so ``path`` is complete or as it was. A path that exists and is
    not a regular file (``/dev/stdout``, a pipe) is written directly.

    Raises:
      DiskFullError: the disk filled up; its message names ``path``.
    """
    path = os.fspath(path)
    target = os.path.realpath(path)  # a link stays a link to the file written
    try:
        if os.path.exists(target) and not os.path.isfile(target):
            with open(target, mode, **kwargs) as file:
                yield file
            return
        partial = f"{target}.{os.getpid()}.{threading.get_ident()}.partial"
        try:
            with open(partial, mode, **kwargs) as file:
                yield file
            if os.path.exists(target):
                os.chmod(partial, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
            raise
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise DiskFullError(f"the disk is full writing {path!r}: nothing was written to "
                            "it") from None


def spreadsheet_safe(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with each text value that a spreadsheet would run as a formula given a
    leading single quote: OWASP's defence against CSV injection (numbers are not text)."""
    return {key: "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS)
            else value for key, value in record.items()}
