"""Shared fixtures: the SDK is imported from this source tree (python/), not an install."""

import os
import shutil
import sys
import tempfile
from typing import Iterator

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
TESTS_DIR = os.path.join(PYTHON_DIR, "tests")
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


@pytest.fixture
def sockdir() -> Iterator[str]:
    """A short temporary directory (unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="fbt-", dir="/tmp")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No FORKBOX_* variables from the caller's environment."""
    for k in ("FORKBOX_SOCKET", "FORKBOX_BIN", "FORKBOX_NO_AUTOSTART"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch
