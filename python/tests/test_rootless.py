"""A subset of the integration suite with the daemon and the client run as the
unprivileged user fbrootless (uid 23456, made when missing and left in place).

The daemon serves only its own uid (SO_PEERCRED), so the client code runs as that user
too: a ``/usr/bin/python3 -`` under ``setpriv`` reading its script on stdin (so that no
marker string of a test is in the client's own command line), with this tree's SDK copied
where the user can read it. Skipped, with the reason, when that daemon does not answer
``sandbox/1 info``.
"""

import base64
import json
import errno
import os
import pwd
import random
import shutil
import signal
import subprocess
import textwrap
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

import pytest

from fbtest_helpers import (
    ESCAPE_SCRIPT,
    PYTHON_DIR,
    ROOTLESS_UID,
    ROOTLESS_USER,
    SYSTEM_PYTHON,
    DaemonProc,
    binary_under_test,
    copy_binary,
    escape_mismatches,
    host_snapshot,
    leak_differences,
    make_tmp,
    peer_pid,
    procs_with,
    user_prefix,
    wait_gone,
)
from forkbox import RunResult

pytestmark = [pytest.mark.integration, pytest.mark.rootless]

SCRIPT_TIMEOUT_S = 300

PRELUDE = """
import base64, json, sys, time
from forkbox import Forkbox, AsyncForkbox, RunResult
def dump(r):
    return {"raw": r.raw, "stdout": base64.b64encode(r.stdout_bytes).decode(),
            "stderr": base64.b64encode(r.stderr_bytes).decode()}
def emit(obj):
    print("FBJSON " + json.dumps(obj), flush=True)
"""


def ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        subprocess.run(["useradd", "--uid", str(ROOTLESS_UID), "--create-home", ROOTLESS_USER], check=True)
        return pwd.getpwnam(ROOTLESS_USER)


def user_dir(path: str, uid: int) -> str:
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, uid)
    os.chmod(path, 0o700)
    return path


class UserSide:
    """The unprivileged user's daemon and a way to run client scripts as that user."""

    def __init__(self) -> None:
        self.pw = ensure_user()
        self.uid = self.pw.pw_uid
        self.base = make_tmp("fbrl-")
        os.chmod(self.base, 0o711)
        self.run_dir = user_dir(os.path.join(self.base, "run"), self.uid)
        bin_dir = os.path.join(self.base, "bin")
        os.makedirs(bin_dir)
        os.chmod(bin_dir, 0o755)
        self.binary = copy_binary(binary_under_test(), bin_dir)
        self.sdk = os.path.join(self.base, "sdk")
        shutil.copytree(os.path.join(PYTHON_DIR, "forkbox"), os.path.join(self.sdk, "forkbox"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(self.sdk):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        self.sock = os.path.join(user_dir(os.path.join(self.run_dir, "forkbox"), self.uid), "forkbox.sock")
        self.daemon = DaemonProc(self.binary, self.sock, os.path.join(self.base, "daemon.log"),
                                 prefix=user_prefix(self.uid, self.pw.pw_dir, self.run_dir))
        self.extra_pids: List[int] = []

    def python(self, body: str, env: Optional[Dict[str, str]] = None, run_dir: Optional[str] = None) -> List[Any]:
        """Run PRELUDE + body as the user; return the objects it emitted."""
        e = {"PYTHONPATH": self.sdk, "FORKBOX_NO_AUTOSTART": "1"}
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        cmd = user_prefix(self.uid, self.pw.pw_dir, run_dir or self.run_dir, e) + [SYSTEM_PYTHON, "-"]
        p = subprocess.run(cmd, input=(PRELUDE + textwrap.dedent(body)).encode(), capture_output=True,
                           timeout=SCRIPT_TIMEOUT_S, cwd="/")
        out = [json.loads(line[7:]) for line in p.stdout.decode().splitlines() if line.startswith("FBJSON ")]
        assert p.returncode == 0, f"client script failed ({p.returncode}): {p.stderr.decode()[-2000:]}"
        return out

    def result(self, body: str) -> RunResult:
        """Run a body whose last emit is dump(result)."""
        d = self.python(body)[-1]
        return RunResult.from_reply(d["raw"], base64.b64decode(d["stdout"]), base64.b64decode(d["stderr"]))

    def cleanup(self) -> None:
        self.daemon.stop()
        for pid in self.extra_pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in self.extra_pids:
            if not wait_gone(pid, 10):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # Anything of the user's still running from this test's directory.
        for pid in procs_with(self.base):
            try:
                if os.stat(f"/proc/{pid}").st_uid == self.uid:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def user() -> Iterator[UserSide]:
    src = binary_under_test()
    if not os.access(src, os.X_OK):
        pytest.skip(f"no forkbox binary at {src} (make, or set FORKBOX_BIN)")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv (util-linux)")
    u = UserSide()
    try:
        u.daemon.start()
        # root cannot ask the user's daemon (SO_PEERCRED): the user asks, in a loop.
        ready = False
        until = time.monotonic() + 20
        while time.monotonic() < until and u.daemon.proc and u.daemon.proc.poll() is None:
            out = u.python("""
                from forkbox import ForkboxError
                try:
                    emit(Forkbox(request_timeout_s=5).info())
                except ForkboxError as e:
                    emit({"error": str(e)})
            """)
            if out and out[-1].get("protocol") == 1:
                ready = True
                break
            time.sleep(0.3)
        if not ready:
            pytest.skip(f"{src} daemon run as {ROOTLESS_USER} does not answer sandbox/1 info "
                        f"(log: {u.daemon.log_tail(300)!r})")
        yield u
    finally:
        u.cleanup()


def test_rootless_info(user):
    info = user.python("emit(Forkbox().info())")[-1]
    assert info["uid"] == user.uid and info["mode"] == "rootless", info


def test_rootless_example_factorial(user):
    r = user.result("""
        r = Forkbox.run("python3 -c 'import math; print(math.factorial(20))'")
        emit(dump(r))
    """)
    assert r.stdout == "2432902008176640000\n", r
    assert r.exit_code == 0 and isinstance(r.duration_ms, float)


def test_rootless_example_timeout(user):
    r = user.result("""
        r = Forkbox.run("while true; do :; done", timeout_ms=500)
        emit(dump(r))
    """)
    assert r.timed_out is True and r.exit_code == 124, r


def test_rootless_hosts_file(user):
    before = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    out = user.python("""
        emit(dump(Forkbox.run("echo payload >> /etc/hosts")))
        emit(dump(Forkbox.run("cat /etc/hosts")))
    """)
    after = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    w, c = (RunResult.from_reply(d["raw"], base64.b64decode(d["stdout"]), base64.b64decode(d["stderr"]))
            for d in out)
    assert after == before
    assert w.exit_code != 0 and "Permission denied" in w.stderr, w
    assert c.ok and "payload" not in c.stdout, c


def test_rootless_escape_syscalls(user):
    r = user.result(f"""
        emit(dump(Forkbox.run(argv=["python3", "-c", {ESCAPE_SCRIPT!r}])))
    """)
    assert r.ok, r
    bad = escape_mismatches(r.stdout)
    assert not bad, bad


def test_rootless_watchdog_kills_every_process(user):
    marker, number = f"fbmark-{uuid.uuid4().hex}", str(random.randrange(10**8, 10**9))
    cmd = (f"sleep 1000.{number} & sleep 1000.{number} & "
           f"sh -c 'while :; do sleep 1; done' {marker} & sh -c 'while :; do :; done' {marker}")
    r = user.result(f"emit(dump(Forkbox.run({cmd!r}, timeout_ms=300)))")
    assert r.timed_out and r.exit_code == 124, r
    left = procs_with(marker) + procs_with(f"1000.{number}")
    assert not left, f"processes left after the result: {left}"


SETTLE = """
def settled(target=None, timeout=30.0):
    until = time.monotonic() + timeout
    while True:
        try:
            info = Forkbox(keep_connections=False).info()
        except Exception:  # not up yet
            if time.monotonic() > until:
                raise
            time.sleep(0.1)
            continue
        pool = info.get("pool") or {}
        ok = info.get("live") == 0 and pool.get("building", 0) == 0 and info.get("exiting", 0) == 0
        if target is not None:
            # Idle like before: a leak never gets there, a slow refill does.
            ok = ok and pool.get("ready") == (target.get("pool") or {}).get("ready")
            ok = ok and info.get("open_fds") == target.get("open_fds")
        if ok or time.monotonic() > until:
            return info
        time.sleep(0.1)
"""


@pytest.fixture
def fresh_user_daemon(user, request):
    """A daemon of the user's of its own, whose pools no other test has shaped; extra
    daemon arguments from the test's parameter."""
    args = list(getattr(request, "param", ()) or ())
    run_dir = user_dir(os.path.join(user.base, f"run-{uuid.uuid4().hex[:8]}"), user.uid)
    sock = os.path.join(user_dir(os.path.join(run_dir, "forkbox"), user.uid), "forkbox.sock")
    d = DaemonProc(user.binary, sock, os.path.join(run_dir, "daemon.log"),
                   prefix=user_prefix(user.uid, user.pw.pw_dir, run_dir), args=args)
    try:
        d.start()
        until = time.monotonic() + 20
        while time.monotonic() < until and not os.path.exists(sock):
            time.sleep(0.05)
        yield d
    finally:
        d.stop()


@pytest.mark.parametrize(
    "fresh_user_daemon",
    [(), ("--sandbox-pool", "0")],
    indirect=True,
    ids=["default-pool", "no-pool"],
)
def test_rootless_no_leak_after_100_runs(user, fresh_user_daemon):
    d = fresh_user_daemon
    pid = d.pid
    env = {"FORKBOX_SOCKET": d.sock}
    user.python(SETTLE + 'settled(); Forkbox.run("true")', env=env)
    before_info = user.python(SETTLE + "emit(settled())", env=env)[-1]
    before = host_snapshot(before_info, pid)
    out = user.python(SETTLE + textwrap.dedent(f"""
        with Forkbox() as fb:  # then closes the connection it kept
            bad = [dump(r) for r in (fb.run("true") for _ in range(100)) if not r.ok]
        emit(bad[:3])
        emit(settled(json.loads({json.dumps(before_info)!r})))
    """), env=env)
    failures, after_info = out[-2], out[-1]
    assert not failures, failures
    # The host side may lag the daemon's own count by a close: wait for it (30 s at most).
    until = time.monotonic() + 30
    while True:
        after = host_snapshot(after_info, pid)
        diff = leak_differences(before, after)
        if not diff or time.monotonic() > until:
            break
        time.sleep(0.1)
    assert not diff, f"{diff}\nbefore: {json.dumps(before_info, sort_keys=True)}\n" \
                     f"after:  {json.dumps(after_info, sort_keys=True)}"


def test_rootless_autostart_on_the_default_socket(user):
    run2 = user_dir(os.path.join(user.base, "run2"), user.uid)
    expected = os.path.join(run2, "forkbox", "forkbox.sock")
    out = user.python("""
        c = Forkbox()
        emit({"socket": c.socket_path, "default": c.socket_is_default, "autostart": c.autostart})
        emit(dump(Forkbox.run("echo started")))
    """, env={"FORKBOX_BIN": user.binary, "FORKBOX_NO_AUTOSTART": None}, run_dir=run2)
    pids = procs_with(expected)
    user.extra_pids.extend(pids)
    facts, d = out[0], out[1]
    assert facts == {"socket": expected, "default": True, "autostart": True}, facts
    r = RunResult.from_reply(d["raw"], base64.b64decode(d["stdout"]), base64.b64decode(d["stderr"]))
    assert r.stdout == "started\n", r
    # The daemon is the socket's owner; the others with its command line are its forks.
    main = peer_pid(expected)
    assert main in pids, (main, pids)
    os.kill(main, signal.SIGTERM)
    assert wait_gone(main, 15)
    left = [p for p in pids if not wait_gone(p, 10)]
    assert not left, f"processes of the autostarted daemon left after its SIGTERM: {left}"


# Sessions as the user -----------------------------------------------------------------------


def test_rootless_session_state_and_files(user):
    mark = f"fbmark-{uuid.uuid4().hex}"
    hosts_before = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    out = user.python(f"""
        import hashlib, os
        from forkbox import FileError, InvalidRequest, SandboxClosed
        data = b"\\x00\\xff\\x00" + bytes(range(256)) * 64 + b"\\xff\\x00"
        big = os.urandom(5 << 20)
        with Forkbox.create(ttl_s=600) as sb:
            emit({{"id": sb.id, "limits": sb.limits}})
            sb.run("mkdir -p /work && echo 42 > /work/answer")
            emit({{"persist": sb.run("cat /work/answer; id -u").stdout}})
            sb.write_file("/work/bin", data)
            sb.write_file("/work/big", big)
            emit({{"bin": sb.read_file("/work/bin") == data, "big": sb.read_file("/work/big") == big,
                   "sha": sb.run("sha256sum /work/big").stdout.split()[0] == hashlib.sha256(big).hexdigest()}})
            sb.mkdir("/work/d/e")
            names = [e.name for e in sb.list("/work") if e.name in ("answer", "bin", "big", "d")]
            sb.remove("/work/d", recursive=True)
            try:
                sb.read_file("/work/d/e")
                missing = None
            except FileNotFoundError as e:
                missing = [e.errno, e.filename, isinstance(e, FileError)]
            try:
                sb.read_file("/work/../etc/passwd")
                dotdot = None
            except InvalidRequest as e:
                dotdot = str(e)
            emit({{"names": names, "missing": missing, "dotdot": dotdot}})
            # A symlink out resolves inside: the write lands in the sandbox's /etc.
            sb.run("ln -s /../../../etc /work/esc")
            sb.write_file("/work/esc/{mark}", b"inside")
            try:
                sb.write_file("/work/esc/hosts", b"127.0.0.1 through-a-symlink\\n")
                hosts = "written"
            except PermissionError:
                hosts = "refused"  # the host's root-owned /etc/hosts, read-only to this user
            emit({{"esc": sb.run("cat /etc/{mark}").stdout, "hosts": hosts,
                   "diff": sorted(c.path for c in sb.diff())}})
        emit({{"closed": sb.closed, "listed": [i.id for i in Forkbox.sandboxes()],
               "sessions": Forkbox().info().get("sessions")}})
    """)
    facts = {k: v for d in out for k, v in d.items()}
    assert facts["persist"] == "42\n0\n", facts
    assert facts["bin"] and facts["big"] and facts["sha"], facts
    assert facts["names"] == ["answer", "big", "bin", "d"], facts
    assert facts["missing"] == [2, "/work/d/e", True], facts
    assert facts["dotdot"] and ".." in facts["dotdot"], facts
    assert facts["esc"] == "inside" and f"/etc/{mark}" in facts["diff"], facts
    assert not os.path.exists(f"/etc/{mark}")
    assert (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns) == hosts_before
    assert facts["closed"] and facts["id"] not in facts["listed"] and facts["sessions"] == 0, facts


def test_rootless_rename_between_the_sandboxs_mounts(user):
    # A user's sandbox has an overlay per top-level directory and /tmp of its own: rename
    # between them is a copy and a removal, as mv does, hard links and modes kept.
    out = user.python("""
        with Forkbox.create(ttl_s=600) as sb:
            sb.write_file("/tmp/a", b"file", mode=0o640)
            sb.run("mkdir -p /tmp/d/e && echo deep > /tmp/d/e/f && ln /tmp/d/e/f /tmp/d/hard && ln -s e/f /tmp/d/soft"
                   " && mkdir -p /work/empty /work/full/x")
            sb.rename("/tmp/a", "/work/a")
            sb.rename("/tmp/d", "/work/empty")  # replaces an empty directory
            errors = []
            sb.write_file("/tmp/z", b"z")
            for to in ("/work/full", "/work/a/under"):
                try:
                    sb.rename("/tmp/z", to)
                except OSError as e:
                    errors.append(e.errno)
            emit({"gone": [sb.exists(p) for p in ("/tmp/a", "/tmp/d")], "a": sb.stat("/work/a").mode,
                  "tree": sb.run("cat /work/a /work/empty/hard /work/empty/soft; stat -c %h /work/empty/hard;"
                                 " ls -A /work | grep forkbox-move || echo clean").stdout,
                  "errors": errors, "z": sb.read_file("/tmp/z").decode()})
    """)
    facts = out[0]
    assert facts["gone"] == [False, False] and facts["a"] == 0o640, facts
    assert facts["tree"] == "filedeep\ndeep\n2\nclean\n", facts
    assert facts["errors"] == [errno.EISDIR, errno.ENOTDIR] and facts["z"] == "z", facts


def test_rootless_fork(user):
    out = user.python("""
        with Forkbox.create(ttl_s=600) as sb:
            sb.write_file("/work/state", b"parent")
            sb.run("sleep 1000 &")
            kids = sb.fork(3)
            for i, k in enumerate(kids):
                k.write_file("/work/state", f"child {i}")
            emit({"kids": [k.read_file("/work/state").decode() for k in kids],
                  "diffs": [[(c.path, c.change) for c in k.diff()] for k in kids],
                  "procs": [k.run("pgrep -x sleep || echo none").stdout for k in kids],
                  "parent": sb.read_file("/work/state").decode(),
                  "parent_procs": sb.run("pgrep -x sleep >/dev/null && echo kept").stdout})
            (deep,) = kids[0].fork()
            for depth in range(2, 9):
                (deep,) = deep.fork()
                deep.run(f"echo {depth} > /tmp/level")
            emit({"deep": deep.read_file("/tmp/level").decode(), "deep_state": deep.read_file("/work/state").decode()})
            for k in kids:
                k.close()
        emit({"sessions": [i.id for i in Forkbox.sandboxes() if i.parent is None]})
    """)
    facts = {k: v for d in out for k, v in d.items()}
    assert facts["kids"] == ["child 0", "child 1", "child 2"], facts
    assert facts["diffs"] == [[["/work/state", "modified"]]] * 3, facts
    assert facts["procs"] == ["none\n"] * 3 and facts["parent_procs"] == "kept\n", facts
    assert facts["parent"] == "parent", facts
    assert facts["deep"] == "8\n" and facts["deep_state"] == "child 0", facts
    assert facts["sessions"] == [], facts


def test_rootless_session_expiry_and_close_release(user, fresh_user_daemon):
    d = fresh_user_daemon
    env = {"FORKBOX_SOCKET": d.sock}
    user.python(SETTLE + 'settled(); Forkbox.run("true")', env=env)
    before_info = user.python(SETTLE + "emit(settled())", env=env)[-1]
    out = user.python(SETTLE + textwrap.dedent(f"""
        from forkbox import SandboxClosed
        fb = Forkbox()
        sb = fb.create(ttl_s=1)
        sb.run("sleep 1000 &")
        until = time.monotonic() + 15
        while sb.id in [i.id for i in fb.sandboxes()] and time.monotonic() < until:
            time.sleep(0.1)
        try:
            sb.run("true")
            emit({{"expired": None}})
        except SandboxClosed as e:
            emit({{"expired": e.reason}})
        for _ in range(20):
            s = fb.create()
            s.run("sleep 1000 &")
            s.fork(2)[1].close()
            s.close()
        for i in fb.sandboxes():
            fb.connect(i.id).close()
        fb.close()  # the connections it kept
        emit(settled(json.loads({json.dumps(before_info)!r})))
    """), env=env)
    expired, after_info = out[0]["expired"], out[-1]
    assert expired and "ttl" in expired, out
    assert after_info.get("sessions") == 0 and after_info.get("live") == 0, after_info
    assert after_info.get("open_fds") == before_info.get("open_fds"), (before_info, after_info)


def test_rootless_warm_shell_keeps_the_limits(user):
    # A user's daemon limits processes and memory by rlimits: the warm shell, started before
    # the request, gets them from its init then (prlimit), as a shell started for it does.
    out = user.python("""
        import time
        fb = Forkbox()
        line = "ulimit -a; echo; tr '\\\\0' ' ' </proc/$$/cmdline"
        def settle():
            until = time.monotonic() + 10
            while time.monotonic() < until:
                pool = fb.info()["pool"]
                if pool["ready"] >= 1 and pool["building"] == 0:
                    return
                time.sleep(0.01)
        settle()
        emit(dump(fb.run(line, pids=40, memory_mb=300)))
        emit(dump(fb.run(argv=["/bin/sh", "-c", line], stdin=b"", pids=40, memory_mb=300)))
    """)
    warm, cold = (RunResult.from_reply(d["raw"], base64.b64decode(d["stdout"]), base64.b64decode(d["stderr"])) for d in out)
    assert warm.ok and cold.ok, (warm, cold)
    assert warm.stdout.splitlines()[-1].startswith("/bin/sh -c . /"), warm
    assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1], (warm, cold)
    assert "process              41" in warm.stdout and "vmemory(kbytes)      307200" in warm.stdout, warm


def test_rootless_line_usage_with_and_without_children(user):
    # Without cgroups (a user's daemon on a host that delegates none), a line of built-ins
    # ends at its shell's word and its usage is read from the shell while it waits (the CPU
    # clock, VmHWM); a line whose shell reaped a child ends at the shell's reaping, its
    # usage wait4's. Both report the command's figures, and what the line left running dies.
    info = user.python("emit(Forkbox().info())")[-1]
    if info.get("limits", {}).get("memory") == "cgroup":
        pytest.skip("this user's daemon counts usage in cgroups")
    usage_code = ("import time; b = bytearray(64 << 20); t = time.process_time()\\n"
                  "while time.process_time() - t < 0.05: pass")
    out = user.python(f"""
        fb = Forkbox()
        emit(dump(fb.run("i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; echo $i")))
        emit(dump(fb.run("python3 -c '{usage_code}'; echo done")))
        emit(dump(fb.run("sleep 9876543 & echo started")))
    """)
    builtins, child, background = (RunResult.from_reply(d["raw"], base64.b64decode(d["stdout"]),
                                                        base64.b64decode(d["stderr"])) for d in out)
    assert builtins.ok and builtins.stdout == "3000\n", builtins
    assert builtins.cpu_ms is not None and builtins.cpu_ms > 0, builtins
    assert builtins.peak_memory_bytes is not None and builtins.peak_memory_bytes > 0, builtins
    assert child.ok and child.stdout == "done\n", child
    assert child.cpu_ms is not None and child.cpu_ms >= 50, child
    assert child.peak_memory_bytes is not None and child.peak_memory_bytes >= 64 << 20, child
    assert background.ok and background.stdout == "started\n", background
    until = time.monotonic() + 10
    while time.monotonic() < until and procs_with("9876543"):
        time.sleep(0.05)
    assert not procs_with("9876543"), "the line's background job outlived its sandbox"


def test_rootless_a_line_cannot_say_its_end_for_its_shell(user):
    # Under a user's daemon the sandbox's root owns the warm shell's fds, but its fd 4 is a
    # socket, which /proc does not open again: the line's forged status reaches nothing.
    forge = ("n=$(ls -l /proc/$$/fd | awk '/socket:/ && $9 > 2 {print $9}'); "
             "test -n \"$n\" || echo no fd to forge on >&2; "
             "for n in $n; do printf 'S7\\n' > /proc/$$/fd/$n; done; ")
    r = user.result(f"""
        fb = Forkbox()
        time.sleep(0.3)  # a pooled sandbox, whose warm shell takes the line
        emit(dump(fb.run({("echo before; " + forge + "echo after; exit 3")!r})))
    """)
    assert (r.exit_code, r.stdout) == (3, "before\nafter\n"), r
    assert "No such device or address" in r.stderr and "no fd to forge on" not in r.stderr, r
