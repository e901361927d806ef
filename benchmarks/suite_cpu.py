"""Where the test suite's CPU time goes: per test and per file, with its compiling.

Not a test. The suite is CPU-bound on a 2-core machine (its test processes keep both
cores busy, so its wall time is its CPU time over the cores), and CPU time, unlike a
test's wall time, does not grow when other processes compete: this is the figure to
cut. Runs pytest (arguments after ``--`` are passed on; default: the whole suite with a
fresh compilation cache, ``-p no:cacheprovider``) with this file as a plugin in every
test process, which records for each test its wall seconds, its process's CPU seconds,
the CPU seconds of the commands it started and waited for (``RUSAGE_CHILDREN``; a Ray
cluster's processes are not counted) and the seconds and number of XLA compilations
in its process (JAX's ``backend_compile_duration`` events, wall seconds), and the
seconds its process spent tracing to jaxprs and lowering them to StableHLO (JAX's
``jaxpr_trace_duration`` and ``jaxpr_to_mlir_module_duration`` events). Prints the
totals, the tests and files that cost most, and pytest's own summary line, and appends
the totals (machine, date, versions, command, the costliest files) to
``benchmarks/results/suite_cpu.jsonl``.

Usage:
  PYTHONPATH=. python benchmarks/suite_cpu.py                    # whole suite
  PYTHONPATH=. python benchmarks/suite_cpu.py --top 40 -- -m "not slow"
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import pytest

_OUT = "NEURAL_TESTBED_SUITE_CPU_DIR"
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "suite_cpu.jsonl")
_EVENTS = {"/jax/core/compile/backend_compile_duration": "compile",
           "/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}
_compiling = {"compile": 0.0, "trace": 0.0, "lower": 0.0, "programs": 0}
_tests: dict[str, dict] = {}


def _on_duration(event, duration, **_):
    name = _EVENTS.get(event)
    if name:
        _compiling[name] += duration
        _compiling["programs"] += name == "compile"


def _cpu() -> tuple[float, float]:
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_configure(config):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own, children = _cpu()
    before, start = dict(_compiling), time.time()
    yield
    own_after, children_after = _cpu()
    _tests[item.nodeid] = {"wall": time.time() - start, "cpu": own_after - own,
                           "children_cpu": children_after - children,
                           **{k: _compiling[k] - before[k] for k in _compiling}}


def pytest_unconfigure(config):
    directory = os.environ.get(_OUT)
    if directory and _tests:
        with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as f:
            json.dump(_tests, f)


_TOTALS = ("wall", "cpu", "children_cpu", "trace", "lower", "compile", "programs")


def _report(tests: dict[str, dict], top: int) -> dict[str, float]:
    """Prints the totals and the costliest tests and files; returns the totals and files."""
    total = {k: sum(t[k] for t in tests.values()) for k in _TOTALS}
    print(f"{len(tests)} tests: CPU {total['cpu']:.0f} s in test processes + "
          f"{total['children_cpu']:.0f} s in commands they waited for; wall {total['wall']:.0f} s "
          f"added up; {total['programs']:.0f} XLA compilations, {total['compile']:.0f} s (wall), "
          f"after {total['trace']:.0f} s tracing and {total['lower']:.0f} s lowering")
    print(f"\n{'CPU s':>7} {'own':>6} {'cmds':>6} {'wall s':>7} {'comp s':>7} {'progs':>5}  test")
    cost = lambda t: t["cpu"] + t["children_cpu"]
    for name, t in sorted(tests.items(), key=lambda kv: -cost(kv[1]))[:top]:
        print(f"{cost(t):7.1f} {t['cpu']:6.1f} {t['children_cpu']:6.1f} {t['wall']:7.1f} "
              f"{t['compile']:7.1f} {t['programs']:5d}  {name}")
    files = collections.defaultdict(lambda: collections.Counter())
    for name, t in tests.items():
        files[name.split("::")[0]].update({"cpu": cost(t), "wall": t["wall"],
                                           "compile": t["compile"]})
    print(f"\n{'CPU s':>7} {'wall s':>7} {'comp s':>7}  file")
    costliest = sorted(files.items(), key=lambda kv: -kv[1]["cpu"])[:top]
    for name, f in costliest:
        print(f"{f['cpu']:7.1f} {f['wall']:7.1f} {f['compile']:7.1f}  {name}")
    return {**{k: round(v, 1) for k, v in total.items()},
            "files": {name: round(f["cpu"], 1) for name, f in costliest}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30, help="tests and files to list")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be >= 1, got {args.top}")
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="suite_cpu_") as out:
        env = dict(os.environ, **{_OUT: out})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu",
                   *(args.pytest_args or ["-p", "no:cacheprovider"])]
        start = time.time()
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.time() - start
        tests = {}
        for path in glob.glob(os.path.join(out, "*.json")):
            with open(path) as f:
                tests.update(json.load(f))
    lines = (run.stdout.strip().splitlines() or [""])
    print(f"{' '.join(command[1:])}: exit {run.returncode}, {wall:.0f} s; {lines[-1]}; "
          f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs seen")
    if not tests:
        print(run.stdout[-2000:], run.stderr[-2000:], sep="\n", file=sys.stderr)
        return 1
    sys.path.insert(0, here)
    import mechanisms  # machine and versions, recorded alike (not in the test processes)

    record = {"benchmark": "suite_cpu", "tests": len(tests), "exit": run.returncode,
              "wall_s": round(wall, 1), "summary": lines[-1], **_report(tests, args.top),
              "command": "PYTHONPATH=. python benchmarks/suite_cpu.py" + (
                  " -- " + " ".join(args.pytest_args) if args.pytest_args else ""),
              "load_average_after": round(os.getloadavg()[0], 2),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": mechanisms._machine(), "versions": mechanisms._versions()}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
