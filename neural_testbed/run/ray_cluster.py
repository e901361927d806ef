"""Joining a Ray cluster, or starting a local one that no other machine can reach and
that ends with the driver, however the driver ends (``ray_watchdog.py``)."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import subprocess
import sys

__all__ = ["check_address", "connect", "disconnect"]

log = logging.getLogger(__name__)


# Ray gives every process of a node its node address and binds its servers
# (GCS, raylet, object manager, workers, agents) to loopback only when that
# address is loopback. ray.init replaces a loopback _node_ip_address by the
# machine's network address unless cluster mode is off, which this variable
# does (it is read when Ray is imported, and inherited by every Ray process).
_RAY_LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def _ray_loopback_only():
    """Starts Ray processes in single-machine mode: every listener on loopback."""
    previous = os.environ.get(_RAY_LOCAL_ONLY)
    os.environ[_RAY_LOCAL_ONLY] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    cluster = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if constants is not None:  # Ray was imported before the variable was set
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_RAY_LOCAL_ONLY, None)
        else:
            os.environ[_RAY_LOCAL_ONLY] = previous
        if constants is not None:
            constants.ENABLE_RAY_CLUSTER = cluster


_CONNECT_SECONDS = 5


def check_address(address: str) -> None:
    """Raises a one-line error unless ``address`` is HOST:PORT and something there accepts
    a TCP connection within a few seconds. Ray itself retries an unreachable address
    for minutes; this plain connect touches that address only."""
    host, port = _host_and_port(address)
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_SECONDS):
            pass
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (
            error.strerror or type(error).__name__)
        raise ValueError(f"--address {address}: no Ray cluster reachable there ({reason} "
                         f"within {_CONNECT_SECONDS} s); give the HOST:PORT of a running "
                         "cluster's head, or leave --address out to start a local one") from None


def _host_and_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"--address {address!r}: need HOST:PORT of a running Ray cluster's "
                         "head, e.g. 10.0.0.5:6379")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: Ray leaves it as it is
        return False


_RAY_WATCHDOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_watchdog.py")


def _start_ray_watchdog() -> subprocess.Popen | None:
    """On Linux, starts the process that ends the local Ray cluster about to be started
    once this process has ended, however it ends (see ``ray_watchdog.py``: Ray leaves the
    raylet's agents and workers alive for up to a minute after a SIGKILL of the driver).

    Its stdin is a pipe whose write end only this process holds (Python's pipes are
    close-on-exec, so Ray's processes do not inherit it): EOF there is this process's end.
    It runs in a session of its own, so a signal to this process group spares it. None
    elsewhere (it reads /proc).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return subprocess.Popen([sys.executable, "-I", _RAY_WATCHDOG, str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:  # no interpreter to start: Ray's own clean-up only
        log.warning("no watchdog for the local Ray cluster (%s): if this process is killed, "
                    "Ray's agents may outlive it for a minute", error)
        return None


def _tell_ray_watchdog(watchdog: subprocess.Popen | None, session_dir: str) -> None:
    if watchdog is not None:
        with contextlib.suppress(OSError):  # it died: the run goes on without it
            watchdog.stdin.write(session_dir.encode() + b"\n")
            watchdog.stdin.flush()


def _end_ray_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Closes the pipe, so the watchdog ends what Ray left of the cluster, and reaps it."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=10)


def connect(ray, address: str | None, num_cpus: int) -> subprocess.Popen | None:
    """Joins the cluster at ``address``, or starts a local one of ``num_cpus``; returns
    the watchdog of a local cluster (None otherwise)."""
    if address:
        check_address(address)
        host = _host_and_port(address)[0]
        # Ray replaces a loopback host by this machine's network address unless in
        # single-machine mode: the address goes to Ray as the user wrote it.
        try:
            with _ray_loopback_only() if _is_loopback(host) else contextlib.nullcontext():
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError) as error:  # something else listens there
            raise ValueError(f"--address {address}: no Ray cluster there would "
                             f"connect ({str(error).splitlines()[0]}); nothing was run") from None
        return None
    watchdog = _start_ray_watchdog()  # before ray.init: it starts the processes
    try:
        with _ray_loopback_only():
            context = ray.init(num_cpus=num_cpus, include_dashboard=False,
                               log_to_driver=False, _node_ip_address="127.0.0.1")
        _tell_ray_watchdog(watchdog, context.address_info["session_dir"])
    except BaseException:
        _end_ray_watchdog(watchdog)
        raise
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        ray.shutdown()
        _end_ray_watchdog(watchdog)
        raise ValueError(f"the local Ray cluster took the address {node_ip}, not a loopback "
                         "one, so it would be reachable from other machines; nothing was run "
                         "(this Ray version is not supported: pip install 'neural-testbed[ray]')")
    return watchdog


def disconnect(ray, watchdog: subprocess.Popen | None) -> None:
    """Leaves the cluster; ends a local one and, after Ray's own shutdown, what it left."""
    ray.shutdown()
    _end_ray_watchdog(watchdog)
