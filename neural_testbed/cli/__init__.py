"""The ``neural-testbed`` command.

Each command's module adds its options and runs it by calling the library and
printing; this module assembles the parser and owns the process: logging,
settings of JAX, agent plugins, and how an error, a closed pipe, a full disk or
Ctrl-C ends the command.
"""

from __future__ import annotations

import _thread
import argparse
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

import neural_testbed
from neural_testbed import compilation_cache, outputs
from neural_testbed.agents import plugins
from neural_testbed.cli import (
    arrays,
    compute,
    decisions,
    listing,
    options,
    report,
    reproduce,
    scores,
    stores,
    studies,
)
from neural_testbed.generative import datasets
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import programs

__all__ = ["build_parser", "main"]

_PARSERS = {**compute.PARSERS, **scores.PARSERS, **reproduce.PARSERS, **studies.PARSERS,
            **stores.PARSERS, **listing.PARSERS, **arrays.PARSERS, **report.PARSERS,
            **decisions.PARSERS}
# The order in which `neural-testbed --help` lists the commands.
_ORDER = ("run", "sweep", "leaderboard", "compare", "plot", "report", "reproduce", "diagnose",
          "correlate", "probe", "tal", "xll", "bandit", "active",
          "correlate-decisions", "inputs", "score", "merge",
          "export", "agents", "problems")
# The commands that compute results into --db.
_STORE_WRITERS = ("run", "sweep", "diagnose", "tal", "probe", "bandit", "active",
                  "correlate-decisions", "score")


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser; each command's parser sets ``handler``, the function
    that runs it."""
    parser = argparse.ArgumentParser(
        prog="neural-testbed",
        description="Evaluate the joint predictions of learning agents on the Neural Testbed.",
    )
    parser.add_argument("--version", action="version",
                        version=f"neural-testbed {neural_testbed.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = options.groups()
    for name in _ORDER:
        _PARSERS[name](commands, groups)
    return parser


def _set_up(args) -> None:
    """What every command does first: the command owns its process (see
    compilation_cache.py and run.programs.MATMUL_PRECISION), and agents from plugins and
    ``--import`` are registered."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # On a CPU a program's LAPACK calls (triangular solves, inverses) run in scipy's
    # OpenBLAS, whose pool of a thread per core waits for the cores XLA's threads hold:
    # one thread is many times faster (benchmarks/openblas_threads.py). OpenBLAS reads
    # this when scipy loads it, at the first such call, after this; the workers a run
    # starts inherit it. A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    compilation_cache.enable()
    programs.use_full_float32_products()
    plugins.load_entry_points()
    for module in args.imports:
        plugins.import_agent_module(module)


def _run(args) -> int:
    """Runs the command; after it succeeds, says which built-in datasets stand in for the
    paper's (results on wine or digits are never to be read as the paper's datasets')."""
    status = args.handler(args)
    sys.stdout.flush()  # here, so that a closed pipe is met in main, not at shutdown
    for note in datasets.stand_in_notes(getattr(args, "built_in_datasets", ())):
        print(f"note: {note}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neural-testbed`` command; returns the exit status.

    Run as the command (``argv`` None), an interrupted command (Ctrl-C) ends
    the process at once with status 130 after its one-line message, without
    interpreter shutdown (see :func:`_exit_now`); called with ``argv`` it
    returns 130 instead. A full disk ends it the same way, with status 2.
    """
    if sys.stdout is None:  # started with it closed (`>&-`): a file opened later would get
        if sys.stderr is not None:  # its descriptor and receive the output
            print("neural-testbed: error: standard output is closed; redirect it to a file "
                  "or /dev/null instead", file=sys.stderr)
        return 2
    args = None
    if argv is None:
        _catch_ctrl_c()
    try:
        args = build_parser().parse_args(argv)
        _set_up(args)
        return _run(args)
    except BrokenPipeError:  # output piped into a reader that stopped (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 141  # as a shell reports a process ended by SIGPIPE
    except (store_lib.StoreFullError, outputs.DiskFullError) as error:
        return _disk_full(error, args, argv)
    except (ValueError, TypeError, store_lib.StoreError) as error:
        print(f"neural-testbed: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(args, argv)


def _catch_ctrl_c() -> None:
    """Ctrl-C through :func:`_on_ctrl_c`, where Python's own handler has it (a shell's
    background job ignores SIGINT, and so does the command then)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_ctrl_c)


def _on_ctrl_c(signum, frame) -> None:
    """SIGINT as ``KeyboardInterrupt``, but not inside a garbage-collection callback:
    Python drops an exception raised there ("Exception ignored in: _xla_gc_callback",
    jax-ml/jax#18246), and JAX's callback runs so often while it traces that most
    Ctrl-Cs of a large sweep's memory check were lost. There it is raised again
    a moment later, when the callback has returned."""
    callbacks = {getattr(c, "__code__", None) for c in gc.callbacks}
    if frame is not None and frame.f_code in callbacks:
        again = threading.Timer(0.01, _thread.interrupt_main)
        again.daemon = True
        again.start()
        return
    raise KeyboardInterrupt


def _disk_full(error: Exception, args, argv: Sequence[str] | None) -> int:
    """A full disk: one line, saying where the results are kept; status 2."""
    kept = ""
    if isinstance(error, outputs.DiskFullError) and args is not None \
            and args.command in _STORE_WRITERS:
        kept = f"; the results are kept in {args.db!r}"
    print(f"neural-testbed: error: {error}{kept}", file=sys.stderr)
    # Units may still be computing in threads of this process (their results could not
    # be stored anyway); at interpreter shutdown they would fail and warn, one line a
    # problem, so the process ends here, as after Ctrl-C.
    if argv is None:
        _exit_now(2)
    return 2


def _interrupted(args, argv: Sequence[str] | None) -> int:
    """Ctrl-C: one line, saying whether a rerun continues; status 130."""
    # Every store is closed by now: the exception has left each `with` block.
    if args is not None and args.command in ("run", "sweep", "tal", "probe"):
        print("neural-testbed: interrupted; everything computed so far is in the store, "
              "rerun the same command to continue", file=sys.stderr)
    else:
        print("neural-testbed: interrupted", file=sys.stderr)
    if argv is None:
        _exit_now(130)
    return 130


def _exit_now(status: int) -> None:
    """Flushes the output and ends the process without interpreter shutdown.

    Ctrl-C interrupts the main thread's wait for an XLA compilation, but the
    compilation goes on in XLA's own thread pool. Interpreter shutdown then
    destroys the JAX client under that thread, which crashes the process with
    a segmentation fault (exit 139) after the message. Nothing is left to
    save at this point (the store is closed, local workers are stopped, a Ray
    cluster started here is shut down), so the process ends here instead.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
