"""A local worker process: ``python -m neural_testbed.run.worker DRIVER_PID [MODULE ...]``.

Reads pickled work units on stdin and writes each unit's rows on its stdout
(:func:`execute.write_message`); whatever the agents print goes to stderr. It ends
at the end of stdin, and at once when the driver ends, however it ends.
"""

from __future__ import annotations

import os
import signal
import sys


def _die_with_the_driver(driver: int) -> None:
    """On Linux the kernel sends this process SIGKILL when the driver ends
    (``PR_SET_PDEATHSIG``); a driver that ended while this one started shows as a
    changed parent. Elsewhere the end of stdin ends the worker, between units."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1  # from <linux/prctl.h>
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != driver:
        sys.exit(1)  # nothing started yet: an ordinary exit


def main(argv: list[str]) -> None:
    _die_with_the_driver(int(argv[0]))
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints must not reach the rows
    units = sys.stdin.buffer

    # The process is ours: the command's allocator tuning, compilation cache and products.
    from neural_testbed import compilation_cache
    from neural_testbed.agents import plugins
    from neural_testbed.run import execute, programs

    compilation_cache.enable()
    programs.use_full_float32_products()
    plugins.load_entry_points()
    for module in argv[1:]:
        plugins.import_agent_module(module)
    run_programs = programs.Programs()
    while True:
        try:
            unit = execute.read_message(units)
        except EOFError:
            return
        execute.write_message(results, programs.compute_unit(unit, run_programs))


if __name__ == "__main__":
    main(sys.argv[1:])
