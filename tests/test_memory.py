"""The glibc malloc tuning that keeps the evaluator from page-faulting."""

import platform

import pytest

from neural_testbed import memory

on_glibc = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not on_glibc, reason="mallopt is glibc's")
def test_thresholds_are_applied_once_on_glibc(monkeypatch):
    monkeypatch.setattr(memory, "_applied", False)
    monkeypatch.delenv("NEURAL_TESTBED_SYSTEM_MALLOC", raising=False)
    assert memory.keep_freed_memory()
    assert memory.keep_freed_memory()  # idempotent


def test_opt_out_keeps_the_system_defaults(monkeypatch):
    monkeypatch.setattr(memory, "_applied", False)
    monkeypatch.setenv("NEURAL_TESTBED_SYSTEM_MALLOC", "1")
    assert not memory.keep_freed_memory()
