"""How much memory this machine has for JAX's programs.

:func:`total_bytes` is the memory that JAX's programs may ever have here, which
a run's settings are checked against before any work.
"""

from __future__ import annotations

import os

import jax

__all__ = ["total_bytes"]


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
