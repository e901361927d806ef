"""`--backend ray` without --address: every socket the local cluster listens on is loopback.

The test runs the real command and, while it runs, lists the listening TCP
sockets (and bound UDP sockets) of every process under it: the driver, the
GCS server, the raylet, the agents and the workers that run the work units.
"""

import importlib.util
import ipaddress
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

psutil = pytest.importorskip("psutil")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray"),
]

REPO = pathlib.Path(__file__).resolve().parents[2]
TOY = str(pathlib.Path(__file__).with_name("toy_agent.py"))


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    if address.version == 6 and address.ipv4_mapped is not None:  # ::ffff:127.0.0.1
        address = address.ipv4_mapped
    return address.is_loopback


def _listening(process) -> list:
    """The process's listening TCP sockets and unconnected UDP sockets."""
    try:
        connections = process.net_connections(kind="inet")
    except AttributeError:  # psutil < 6
        connections = process.connections(kind="inet")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    return [c for c in connections
            if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)]


def _label(process) -> str:
    try:
        return f"{process.pid} {process.name()}: {' '.join(process.cmdline())[:100]}"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return f"{process.pid} (gone)"


def test_local_ray_cluster_listens_on_loopback_only(tmp_path):
    # Taus 1 and 2, not the sweep's 1 and 100: the same cluster and work units, less evaluation.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)  # a local cluster, started by the command
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "neural_testbed.cli", "run", "--agent", "toy", "--import",
             TOY, "--sweep", "smoke", "--taus", "1,2", "--problems-per-batch", "1", "--backend", "ray",
             "--workers", "1",
             "--db", str(tmp_path / "ray.db"), "--quiet"],
            cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True)
    seen: dict[str, set[str]] = {}  # process -> "ip:port" it listened on
    try:
        root = psutil.Process(proc.pid)
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                processes = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for process in processes:
                for c in _listening(process):
                    seen.setdefault(_label(process), set()).add(f"{c.laddr.ip}:{c.laddr.port}")
            time.sleep(0.05)  # polling interval, not a wait for an event
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    errors = (tmp_path / "err.txt").read_text()
    assert status == 0, errors
    assert "8 rows computed" in (tmp_path / "out.txt").read_text()
    listeners = "\n".join(f"{name} -> {sorted(addresses)}" for name, addresses in seen.items())
    # Not vacuous: the cluster's servers and a worker that ran units were seen listening.
    for name in ("gcs_server", "raylet", "ray::"):
        assert name in listeners, listeners
    exposed = {name: sorted(a for a in addresses if not _is_loopback(a.rsplit(":", 1)[0]))
               for name, addresses in seen.items()}
    exposed = {name: addresses for name, addresses in exposed.items() if addresses}
    assert not exposed, f"listening beyond loopback: {exposed}\nall listeners:\n{listeners}"
