"""Shared fixtures: the SDK is imported from this source tree (python/), not an install;
the integration tests' real daemons (``daemon`` for the whole run, ``fresh_daemon`` for a
test of its own) and their clients."""

import os
import re
import shutil
import signal
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


from fbtest_helpers import (  # noqa: E402 - needs TESTS_DIR in sys.path
    CLIENT_TIMEOUT_S,
    HANG_GUARD_S,
    DaemonProc,
    binary_under_test,
    copy_binary,
    describe_answer,
    make_tmp,
)
from forkbox import Forkbox  # noqa: E402 - needs PYTHON_DIR in sys.path


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


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """Fail (not hang) a test that blocks for more than HANG_GUARD_S."""

    def fire(signum, frame):
        raise TimeoutError(f"test still running after {HANG_GUARD_S} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(HANG_GUARD_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# What tests provoke on purpose in a daemon's log; any other warning or error there fails the
# run. (Every session create once logged "sandbox: epoll add: Bad file descriptor", a
# connection registered twice, and every test passed.)
EXPECTED_LOG_LINES = re.compile(
    r"No module named 'no_such_module_for_forkbox'"  # test_warm_python: a preload that fails
    r"|zygote: bad request"  # test_integration: a message that is no sandbox request
    r"|the sandbox service exited \(status 9\)"  # test_integration: the service SIGKILLed
)


def unexpected_log_lines(d: DaemonProc) -> str:
    """The warnings and errors of the daemon's log that no test asks for, one a line."""
    try:
        with open(d.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(line for line in text.splitlines()
                     if re.search(r"\b(warning|error)\b", line) and not EXPECTED_LOG_LINES.search(line))


@pytest.fixture(scope="session")
def daemon() -> Iterator[DaemonProc]:
    src = binary_under_test()
    if not os.access(src, os.X_OK):
        pytest.skip(f"no forkbox binary at {src} (make, or set FORKBOX_BIN)")
    tmp = make_tmp("fbit-")
    d = None
    try:
        binary = copy_binary(src, tmp)
        d = DaemonProc(binary, os.path.join(tmp, "forkbox.sock"), os.path.join(tmp, "daemon.log"))
        d.start()
        info = d.wait_ready()
        if info is None or info.get("protocol") != 1:
            answer = describe_answer(d.sock) if d.proc and d.proc.poll() is None else "the daemon exited"
            pytest.skip(f"{src} daemon --socket X does not answer sandbox/1 info ({answer}; log: {d.log_tail(300)!r})")
        yield d
    finally:
        unexpected = ""
        if d is not None:
            d.stop()
            unexpected = unexpected_log_lines(d)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not unexpected, f"the daemon logged what no test asked for:\n{unexpected}"


@pytest.fixture
def fresh_daemon(daemon: DaemonProc, request: pytest.FixtureRequest) -> Iterator[DaemonProc]:
    """A daemon of its own (same binary), whose pools no other test has shaped; extra
    daemon arguments from the test's parameter."""
    tmp = make_tmp("fbfr-")
    args = list(getattr(request, "param", ()) or ())
    d = DaemonProc(daemon.binary, os.path.join(tmp, "forkbox.sock"), os.path.join(tmp, "daemon.log"), args=args)
    try:
        d.start()
        assert d.wait_ready() is not None, d.log_tail()
        yield d
    finally:
        d.stop()
        unexpected = unexpected_log_lines(d)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not unexpected, f"the daemon logged what no test asked for:\n{unexpected}"


@pytest.fixture
def fb(daemon: DaemonProc) -> Forkbox:
    return Forkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)


@pytest.fixture
def default_socket(daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> str:
    """Class-level calls (``Forkbox.run``) reach the fixture's daemon through FORKBOX_SOCKET."""
    monkeypatch.setenv("FORKBOX_SOCKET", daemon.sock)
    monkeypatch.delenv("FORKBOX_NO_AUTOSTART", raising=False)
    return daemon.sock
