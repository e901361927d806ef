"""Keep freed heap memory in the process instead of returning it to the OS.

XLA:CPU allocates and frees buffers of tens of MB on every iteration of the
evaluator's loop over test samples. With glibc's default settings, blocks that
large are mapped fresh from the OS and unmapped on free, so every iteration
page-faults (and zeroes) them again. On the 2-core development machine that
was 130 of the 150 CPU-seconds of system time in a bbb + dropout tau = 100
evaluation, and the evaluation took twice as long. Raising glibc's mmap and
trim thresholds keeps such blocks on the heap for reuse; the cost is that the
process keeps its peak heap size until it exits.

Only glibc's ``mallopt`` is touched; elsewhere (macOS, musl) this does
nothing. Set ``NEURAL_TESTBED_SYSTEM_MALLOC=1`` to keep the system defaults.

:func:`total_bytes` is the memory that JAX's programs may ever have here, which
a run's settings are checked against before any work.
"""

from __future__ import annotations

import ctypes
import os
import sys

import jax

__all__ = ["keep_freed_memory", "total_bytes"]

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_THRESHOLD_BYTES = 1 << 30
_applied = False


def keep_freed_memory() -> bool:
    """Sets glibc's mmap and trim thresholds to 1 GiB, once per process.

    Returns whether the settings are in effect.
    """
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("NEURAL_TESTBED_SYSTEM_MALLOC"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    # musl's mallopt exists but does nothing and returns 0.
    _applied = (mallopt(_M_MMAP_THRESHOLD, _THRESHOLD_BYTES) == 1
                and mallopt(_M_TRIM_THRESHOLD, _THRESHOLD_BYTES) == 1)
    return _applied


def total_bytes() -> tuple[int, str]:
    """The memory of JAX's default device and what it is: an accelerator's own (as JAX
    reports it), or on a CPU the machine's, or less where a cgroup limits this process.

    The whole, not what is free now: an array larger than this can never be held.
    """
    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.device_kind} memory"
    total, what = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "memory"
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
    except OSError:
        return total, what
    if limit.isdigit() and int(limit) < total:
        return int(limit), "memory (cgroup limit)"
    return total, what
