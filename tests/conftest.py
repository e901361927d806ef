"""Test-session set-up: one persistent XLA compilation cache for every process.

Many tests (and the CLI subprocesses they start) compile the same small
programs; sharing compiled programs through a session-scoped cache directory
keeps the suite within CI's time budget. It changes no numbers.
"""

import os
import tempfile

_CACHE = tempfile.mkdtemp(prefix="neural_testbed_test_xla_cache_")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
