"""Ends the local Ray cluster a driver started once that driver is gone (Linux only).

Ray ties the processes it starts itself (GCS server, raylet, log monitor) to the driver,
but the raylet's children (its agents, the workers) notice the raylet's death slowly:
after a SIGKILL of the driver they lived for about a minute under PID 1. The driver
starts this script (standard library only, run by path) with a pipe on its stdin whose
write end only the driver holds, and writes the session directory into it once
``ray.init`` has made one. EOF on the pipe means the driver has ended, however it ended;
the script then SIGKILLs every process it may inspect (this user's) that has a file
under that session directory open or names it on its command line (the agents rename
themselves, but keep their log files there open), and exits.

The session directory (``<temp dir>/session_<date>_<driver pid>``) is unique to the
cluster the driver started, so no other cluster's process matches. If the driver ended
inside ``ray.init``, before it could write the directory, the script takes the session
directories named by the driver's pid and created since the script started.
"""

import os
import re
import signal
import sys
import time


def _paths(pid: str) -> list[str]:
    """The command line of a process, and the paths of its open files."""
    found = []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            found.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        for fd in os.listdir(f"/proc/{pid}/fd"):
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except OSError:  # ended meanwhile, or another user's
        pass
    return found


def _fallback(driver: int, since: float, paths: list[str]) -> set[str]:
    """Session directories named by the driver's pid, created since ``since``."""
    pattern = re.compile(rf"(/\S*?/session_\d{{4}}(?:-\d\d){{2}}_\d\d(?:-\d\d){{2}}_\d+_{driver})/")
    dirs = set()
    for path in paths:
        for match in pattern.finditer(path):
            try:
                if os.stat(match.group(1)).st_ctime >= since:
                    dirs.add(match.group(1))
            except OSError:
                continue
    return dirs


def main(driver: int) -> None:
    since = time.time() - 1  # ctime has coarse resolution on some file systems
    sessions = {line.strip() for line in sys.stdin if line.strip()}  # read until EOF
    sessions |= {os.path.realpath(s) for s in sessions}
    for _ in range(20):  # until a pass finds none: the raylet may start one meanwhile
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) in (os.getpid(), driver):  # the driver may be exiting normally
                continue
            paths = _paths(pid)
            ours = sessions or _fallback(driver, since, paths)
            if any(f"{s}/" in p for s in ours for p in paths):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    found += 1
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.1)  # polling: give killed processes time to go


if __name__ == "__main__":
    main(int(sys.argv[1]))
