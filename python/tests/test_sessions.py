"""Sessions against a real ``forkbox daemon`` (as root): one sandbox kept for many runs,
its files, streaming, processes written to while they run, fork, pause, expiry, and what
closing gives back. The daemon is conftest's (a private copy of ``$FORKBOX_BIN``);
leak tests get one of their own."""

import asyncio
import errno
import hashlib
import json
import os
import random
import time
import uuid
from typing import Iterator, List

import pytest

from fbtest_helpers import (
    CLIENT_TIMEOUT_S,
    children_of,
    idle_snapshot,
    leak_differences,
    mount_points,
    pid_alive,
    procs_with,
    raw_info,
)
from forkbox import (
    AsyncForkbox,
    AsyncSandbox,
    Change,
    FileError,
    FileInfo,
    Forkbox,
    ForkboxError,
    InvalidRequest,
    OutputChunk,
    RunResult,
    Sandbox,
    SandboxClosed,
    SandboxError,
    WaitTimeout,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("hang_guard")]

MiB = 1 << 20


def unique() -> str:
    return f"fbmark-{uuid.uuid4().hex}"


def number() -> str:
    """A random fraction for ``sleep 1000.N``: a command line no other test has."""
    return str(random.randrange(10**8, 10**9))


@pytest.fixture
def sb(fb: Forkbox) -> Iterator[Sandbox]:
    s = fb.create(ttl_s=600)
    try:
        yield s
    finally:
        s.close()


def wait_for(pred, timeout: float = 10.0, step: float = 0.05) -> bool:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


# State ------------------------------------------------------------------------------------


def test_state_persists_between_runs(sb):
    r = sb.run("mkdir -p /work && echo 42 > /work/answer && echo 7 > /tmp/t && cd /tmp && export X=1")
    assert r.ok, r
    r = sb.run('cat /work/answer /tmp/t; pwd; echo "X=${X:-unset}"')
    # Files stay; each run is a new process (its cwd and environment are its own).
    assert r.stdout == "42\n7\n/\nX=unset\n", r


def test_create_on_the_class_and_with_closes(default_socket):
    with Forkbox.create(memory_mb=256, timeout_ms=30_000, ttl_s=600) as s:
        assert isinstance(s, Sandbox) and s.id.startswith("sb-") and not s.closed
        assert s.limits and s.limits.get("memory") in ("cgroup", "rlimit"), s.limits
        s.write_file("/work/main.py", b"print(6*7)")
        assert s.run("cd /work && python3 main.py").stdout == "42\n"
        assert s.id in {i.id for i in Forkbox.sandboxes()}
    assert s.closed
    assert s.id not in {i.id for i in Forkbox.sandboxes()}
    s.close()  # idempotent


def test_sandboxes_lists_the_callers_sessions(fb):
    a = fb.create(ttl_s=600, memory_mb=128)
    b = fb.create(idle_s=300, network=True)
    try:
        a.run("true")
        found = {i.id: i for i in fb.sandboxes()}
        ia, ib = found[a.id], found[b.id]
        assert (ia.ttl_s, ia.memory_mb, ia.parent, ia.paused, ia.running) == (600, 128, None, False, 0), ia
        assert ia.served >= 1 and ia.age_s >= 0, ia
        assert (ib.idle_timeout_s, ib.network) == (300, True), ib
    finally:
        a.close()
        b.close()
    assert not {a.id, b.id} & {i.id for i in fb.sandboxes()}


def test_connect_attaches_to_a_session_by_id(fb, sb):
    sb.write_file("/work/attached", b"from the first object")
    other = Forkbox(socket=fb.socket_path).connect(sb.id)
    assert other.id == sb.id and other.read_file("/work/attached") == b"from the first object"
    assert other.run("cat /work/attached").stdout == "from the first object"


def test_connect_sends_nothing_until_used(tmp_path):
    s = Forkbox(socket=str(tmp_path / "nobody.sock"), autostart=False).connect("sb-0123456789abcdef")
    assert s.id == "sb-0123456789abcdef" and not s.closed
    with pytest.raises(InvalidRequest):
        Forkbox.connect("")


def test_a_session_that_never_was(fb):
    s = fb.connect("sb-0000000000000000")
    with pytest.raises(SandboxClosed, match="no sandbox") as e:
        s.run("true")
    assert e.value.code == "no_such_sandbox" and s.closed


def test_every_call_on_a_closed_session_raises_sandbox_closed(fb):
    s = fb.create(ttl_s=600)
    s.close()
    calls = {
        "run": lambda: s.run("true"),
        "stream": lambda: s.stream("true"),
        "spawn": lambda: s.spawn("true"),
        "write_file": lambda: s.write_file("/x", b""),
        "read_file": lambda: s.read_file("/etc/hostname"),
        "list": lambda: s.list("/"),
        "remove": lambda: s.remove("/x"),
        "mkdir": lambda: s.mkdir("/x"),
        "diff": lambda: s.diff(),
        "fork": lambda: s.fork(),
        "pause": lambda: s.pause(),
        "resume": lambda: s.resume(),
    }
    for name, call in calls.items():
        with pytest.raises(SandboxClosed, match="closed by its client") as e:
            call()
        assert e.value.sandbox_id == s.id and e.value.reason == "closed by its client", name
    # The daemon says the same to another object that did not close it.
    with pytest.raises(SandboxClosed, match=f"{s.id} has ended: closed by its client"):
        fb.connect(s.id).run("true")
    s.close()


# Files ------------------------------------------------------------------------------------


def test_files_round_trip_binary_safe(sb):
    data = b"\x00\xff\x00" + bytes(range(256)) * 64 + b"\xff\x00"
    sb.write_file("/work/bin/blob", data)
    assert sb.read_file("/work/bin/blob") == data
    r = sb.run("od -An -tx1 -N3 /work/bin/blob; wc -c < /work/bin/blob")
    assert r.stdout.split() == ["00", "ff", "00", str(len(data))], r
    sb.write_file("/work/text", "héllo\n")  # str is UTF-8
    assert sb.read_file("/work/text") == "héllo\n".encode()
    sb.write_file("/work/empty", b"")
    assert sb.read_file("/work/empty") == b""
    # What a run writes, read_file reads.
    sb.run("printf '\\000\\377' > /tmp/from-run")
    assert sb.read_file("/tmp/from-run") == b"\x00\xff"


def test_file_of_5_mib(sb):
    data = os.urandom(5 * MiB)
    sb.write_file("/work/big", data)
    r = sb.run("sha256sum /work/big")
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest(), r
    assert sb.read_file("/work/big") == data


def test_write_file_mode_and_truncation(sb):
    sb.write_file("/work/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.run("/work/run.sh").stdout == "ran\n"
    sb.write_file("/work/run.sh", "short", mode=0o600)
    assert sb.read_file("/work/run.sh") == b"short"
    entry = {e.name: e for e in sb.list("/work")}["run.sh"]
    assert entry.mode & 0o777 == 0o600 and entry.size == 5, entry  # truncated; an existing file gets mode too
    with pytest.raises(InvalidRequest):
        sb.write_file("/work/x", b"", mode=0o10000)


def test_list_remove_mkdir(sb):
    sb.mkdir("/work/a/b/c")  # parents by default
    sb.mkdir("/work/a/b/c")  # and no error when it exists
    sb.write_file("/work/a/f", b"12345")
    sb.run("ln -s /etc/hostname /work/a/link")
    entries = sb.list("/work/a")
    assert [e.name for e in entries] == ["b", "f", "link"], entries
    by = {e.name: e for e in entries}
    assert by["b"].is_dir and by["b"].type == "dir" and by["b"].path == "/work/a/b"
    assert by["f"].is_file and by["f"].size == 5 and by["f"].mode == 0o644 and by["f"].mtime > 0
    assert by["link"].type == "symlink" and all(isinstance(e, FileInfo) for e in entries)
    sb.mkdir("/work/m", parents=False, mode=0o700)
    assert {e.name: e for e in sb.list("/work")}["m"].mode & 0o777 == 0o700
    with pytest.raises(OSError) as e:
        sb.remove("/work/a")
    assert e.value.errno == errno.ENOTEMPTY and isinstance(e.value, FileError)
    sb.remove("/work/a/f")
    sb.remove("/work/a", recursive=True)
    assert "a" not in {e.name for e in sb.list("/work")}
    assert sb.run("test -e /work/a || echo gone").stdout == "gone\n"


def test_stat_exists_rename(sb):
    sb.write_file("/work/a", b"12345", mode=0o600)
    info = sb.stat("/work/a")
    assert info == FileInfo("a", "/work/a", "file", 5, 0o600, info.mtime) and info.mtime > 0
    assert sb.stat("/").path == "/" and sb.stat("/").is_dir and sb.stat("/work/").path == "/work"
    sb.run("ln -s /nowhere /work/dangling")
    assert sb.stat("/work/dangling").type == "symlink"  # not followed
    assert sb.exists("/work/a") and sb.exists("/work/dangling") and sb.exists("/etc/passwd")
    assert not sb.exists("/work/nope") and not sb.exists("/nope/deeper")
    sb.rename("/work/a", "/work/b")
    assert not sb.exists("/work/a") and sb.read_file("/work/b") == b"12345"
    sb.mkdir("/work/d/e")
    sb.write_file("/work/d/e/f", b"x")
    sb.rename("/work/d", "/work/moved")  # a directory, with what is in it
    assert sb.read_file("/work/moved/e/f") == b"x"
    sb.write_file("/work/c", b"replaced")
    sb.rename("/work/b", "/work/c")  # replaces a file, as os.rename does
    assert sb.read_file("/work/c") == b"12345" and not sb.exists("/work/b")
    assert sb.run("cat /work/c /work/moved/e/f").stdout == "12345x"
    with pytest.raises(FileNotFoundError):
        sb.rename("/work/nope", "/work/x")
    with pytest.raises(FileNotFoundError):
        sb.rename("/work/c", "/nodir/x")
    with pytest.raises(OSError) as e:
        sb.rename("/work/c", "/work/moved")  # a file over a directory
    assert e.value.errno == errno.EISDIR and isinstance(e.value, FileError)
    assert not sb.exists("/work/c/under-a-file")  # as os.path.exists: a failed lookup is False
    with pytest.raises(InvalidRequest):
        sb.rename("/work/c", "/work/../etc/x")


def test_async_stat_exists_rename(daemon):
    async def main():
        c = AsyncForkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
        async with c.create(ttl_s=600) as s:
            await s.write_file("/x", "1")
            await s.rename("/x", "/y")
            return await s.exists("/x"), await s.exists("/y"), (await s.stat("/y")).size

    assert asyncio.run(main()) == (False, True, 1)


@pytest.mark.parametrize("case", ["read-missing", "list-missing", "remove-missing", "mkdir-exists",
                                  "mkdir-no-parent", "read-dir", "list-file", "write-under-file"])
def test_file_errors_are_oserrors(sb, case):
    sb.write_file("/work/file", b"x")
    call, path, builtin, number = {
        "read-missing": (lambda: sb.read_file("/work/nope"), "/work/nope", FileNotFoundError, errno.ENOENT),
        "list-missing": (lambda: sb.list("/work/nope"), "/work/nope", FileNotFoundError, errno.ENOENT),
        "remove-missing": (lambda: sb.remove("/work/nope"), "/work/nope", FileNotFoundError, errno.ENOENT),
        "mkdir-exists": (lambda: sb.mkdir("/work/file", parents=False), "/work/file", FileExistsError, errno.EEXIST),
        "mkdir-no-parent": (lambda: sb.mkdir("/work/x/y", parents=False), "/work/x/y", FileNotFoundError,
                            errno.ENOENT),
        "read-dir": (lambda: sb.read_file("/work"), "/work", IsADirectoryError, errno.EISDIR),
        "list-file": (lambda: sb.list("/work/file"), "/work/file", NotADirectoryError, errno.ENOTDIR),
        "write-under-file": (lambda: sb.write_file("/work/file/x", b""), "/work/file/x", NotADirectoryError,
                             errno.ENOTDIR),
    }[case]
    with pytest.raises(builtin) as e:
        call()
    err = e.value
    assert isinstance(err, FileError) and isinstance(err, ForkboxError) and isinstance(err, OSError)
    assert (err.errno, err.filename, err.code) == (number, path, "file_error"), (err, err.errno, err.filename)
    assert err.strerror == os.strerror(number) and path in str(err)
    assert sb.run("echo usable").stdout == "usable\n"  # a failed verb leaves the session as it was


def test_permission_denied_is_a_permission_error(fb):
    with fb.create(ttl_s=600, caps=[]) as s:
        s.run("mkdir /work/ro && echo x > /work/ro/f && chmod 0500 /work/ro && chmod 0400 /work/ro/f")
        # Without CAP_DAC_OVERRIDE, root in the sandbox is held to the mode bits.
        with pytest.raises(PermissionError) as e:
            s.write_file("/work/ro/f", b"y")
        assert e.value.errno == errno.EACCES and isinstance(e.value, FileError)


@pytest.mark.parametrize("path", ["/work/../etc/passwd", "/..", "/a/b/../../etc", "/work/..", "../etc"])
def test_dotdot_is_refused_before_sending(tmp_path, path):
    # No daemon answers on this socket: the refusal is the client's own.
    s = Forkbox(socket=str(tmp_path / "nobody.sock"), autostart=False).connect("sb-0123456789abcdef")
    for call in (lambda: s.read_file(path), lambda: s.write_file(path, b"x"), lambda: s.list(path),
                 lambda: s.remove(path), lambda: s.mkdir(path), lambda: s.stat(path), lambda: s.exists(path),
                 lambda: s.rename(path, "/ok"), lambda: s.rename("/ok", path)):
        with pytest.raises(InvalidRequest) as e:
            call()
        assert e.value.code is None, e.value  # not the daemon's


def test_dotdot_is_refused_by_the_daemon_too(daemon):
    msgs = []
    from fbtest_helpers import raw_exchange

    create = raw_exchange(daemon.sock, [b'sandbox/1 create\n{"ttl_s":60}'])
    sid = json.loads(create[-1][1:])["session"]
    try:
        msgs = raw_exchange(daemon.sock, [b"sandbox/1 file\n" + json.dumps(
            {"session": sid, "op": "read", "path": "/work/../etc/passwd"}).encode()])
    finally:
        raw_exchange(daemon.sock, [b"sandbox/1 close\n" + json.dumps({"session": sid}).encode()])
    err = json.loads(msgs[-1][1:])
    assert msgs[-1][:1] == b"!" and err["error"] == "invalid_request" and ".." in err["message"], msgs


def test_symlinks_pointing_out_resolve_inside_the_sandbox(sb):
    mark = unique()
    hosts_before = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    r = sb.run("mkdir -p /work && ln -s /../../../etc /work/esc && ln -s ../../../../../../etc /work/rel "
               "&& ln -s /etc/hosts /work/hosts-link")
    assert r.ok, r
    assert sb.read_file("/work/hosts-link") == sb.run("cat /etc/hosts").stdout_bytes
    # Reading through them gives the sandbox's files (the same as a run sees).
    inside = sb.run("cat /etc/hostname").stdout_bytes
    assert sb.read_file("/work/esc/hostname") == inside == sb.read_file("/work/rel/hostname")
    # Writing through them changes the sandbox's /etc, never the host's.
    sb.write_file(f"/work/esc/{mark}", b"new file through the symlink")
    sb.write_file("/work/rel/hosts", b"127.0.0.1 written-through-a-symlink\n")
    sb.write_file("/work/hosts-link", b"127.0.0.1 written-through-the-last-component\n")  # followed, inside
    assert not os.path.exists(f"/etc/{mark}"), "a file appeared in the host's /etc"
    assert (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns) == hosts_before
    r = sb.run(f"cat /etc/{mark}; echo; cat /etc/hosts; test -L /work/hosts-link && echo still-a-link")
    assert r.stdout == "new file through the symlink\n127.0.0.1 written-through-the-last-component\n" \
                       "still-a-link\n", r
    sb.mkdir(f"/work/esc/{mark}-dir")
    sb.remove(f"/work/esc/{mark}")
    assert not os.path.exists(f"/etc/{mark}-dir")
    changed = {c.path for c in sb.diff()}
    assert {"/etc/hosts", f"/etc/{mark}-dir"} <= changed, changed


def test_proc_magic_links_are_refused(sb):
    with pytest.raises(OSError) as e:
        sb.read_file("/proc/self/root/etc/hostname")
    assert isinstance(e.value, FileError), e.value


def test_mounts_of_a_session(fb, tmp_path):
    (tmp_path / "in").write_text("host data\n")
    with fb.create(ttl_s=600, mounts=[(str(tmp_path), "/data", "rw")]) as s:
        assert s.read_file("/data/in") == b"host data\n"
        s.write_file("/data/out", b"from the session\n")
        assert (tmp_path / "out").read_bytes() == b"from the session\n"
        # A bind mount is not the sandbox's state.
        assert not [c for c in s.diff() if c.path.startswith("/data")], s.diff()


def test_diff_since_the_session_began(sb):
    assert sb.diff() == []
    sb.write_file("/work/new", b"abc")
    sb.run("echo more >> /etc/hostname; rm /etc/issue")
    changes = {c.path: c for c in sb.diff()}
    assert changes["/work/new"] == Change("/work/new", "created", "file", 3)
    assert changes["/etc/hostname"].change == "modified"
    assert changes["/etc/issue"].change == "deleted"


def test_diff_of_a_directory_removed_and_made_again(sb):
    # overlayfs makes the new directory opaque: no whiteouts for what it hides.
    host = [os.path.join(d, n)[len("/etc/default"):] for d, dirs, files in os.walk("/etc/default") for n in dirs + files]
    assert host
    sb.run("rm -rf /etc/default && mkdir /etc/default && echo x > /etc/default/new")
    changes = {c.path: c.change for c in sb.diff()}
    assert changes.pop("/etc/default/new") == "created"
    assert changes == {"/etc/default" + p: "deleted" for p in host}


# Expiry -----------------------------------------------------------------------------------


def expect_ended(s: Sandbox, timeout: float = 15.0) -> SandboxClosed:
    """Wait (without a call on ``s``, which would make it busy) until the daemon no longer
    lists it; then a call must raise :class:`SandboxClosed`."""
    assert wait_for(lambda: s.id not in {i.id for i in s.client.sandboxes()}, timeout, 0.1), \
        f"{s.id} still listed {timeout} s later"
    with pytest.raises(SandboxClosed) as e:
        s.run("true")
    return e.value


def test_ttl_expiry(fb):
    s = fb.create(ttl_s=1)
    t0 = time.monotonic()
    assert s.run("echo alive").stdout == "alive\n"
    e = expect_ended(s)
    assert time.monotonic() - t0 >= 0.9
    assert "ttl" in str(e) and s.id in str(e) and "ttl" in (e.reason or ""), e
    assert s.closed
    with pytest.raises(SandboxClosed, match="ttl"):
        s.read_file("/etc/hostname")  # the reason stays
    s.close()  # no error: it is gone already
    assert s.id not in {i.id for i in fb.sandboxes()}


def test_idle_expiry(fb):
    s = fb.create(idle_s=2)
    # Calls keep it alive past its idle time...
    for _ in range(3):
        assert s.run("true").ok
        time.sleep(1.0)
    s.write_file("/tmp/x", b"x")
    t_last = time.monotonic()
    # ...and without them it ends.
    e = expect_ended(s, timeout=20)
    assert time.monotonic() - t_last >= 1.8
    assert "idle" in str(e) and "idle" in (e.reason or ""), e


# Releasing --------------------------------------------------------------------------------


def test_close_releases_everything(fresh_daemon):
    d = fresh_daemon
    fb = Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    fb.run("true")
    before = idle_snapshot(d.sock, d.pid)
    mounts_before = mount_points()
    n = number()
    s = fb.create(ttl_s=600)
    s.write_file("/work/data", os.urandom(MiB))
    assert s.run(f"sleep 1000.{n} & sleep 1000.{n} & (sleep 1000.{n}; :) & echo bg").stdout == "bg\n"
    p = s.spawn(f"exec sleep 1000.{n}")
    kids = s.fork(2)
    kids[0].run(f"sleep 1000.{n} &")
    assert wait_for(lambda: len(procs_with(f"1000.{n}")) >= 5), procs_with(f"1000.{n}")
    during = raw_info(d.sock) or {}
    assert during.get("sessions") == 3, during
    for k in kids:
        k.close()
    s.close()
    with pytest.raises(SandboxClosed):
        p.wait(30)
    assert wait_for(lambda: not procs_with(f"1000.{n}"), 10), f"left: {procs_with(f'1000.{n}')}"
    after = idle_snapshot(d.sock, d.pid, like=before)
    diff = leak_differences(before, after)
    assert after["info"].get("sessions") == 0 and after["info"].get("exiting") == 0, after["info"]
    assert not diff, f"{diff}\nbefore: {json.dumps(before['info'], sort_keys=True)}\n" \
                     f"after:  {json.dumps(after['info'], sort_keys=True)}"
    assert mount_points() - mounts_before == set()


def test_sessions_made_on_a_kept_connection_leave_the_daemon_no_warning(fresh_daemon):
    """A session's creation is answered on the client's kept connection, which then waits
    for the next request once: the daemon once put the moved-from connection (fd -1) in its
    epoll set a second time ("epoll add: Bad file descriptor", and an entry never freed)."""
    fb = Forkbox(socket=fresh_daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    for _ in range(3):
        with fb.create() as s:
            assert s.run("echo hi").stdout == "hi\n"
    assert fb.run("echo after").stdout == "after\n"
    log = fresh_daemon.log_tail(20000)
    assert "warning" not in log and "error" not in log, log


def test_500_sessions_with_a_fork_each_leave_nothing(fresh_daemon):
    """Create, run, fork, close both, 500 times: the daemon is back where it began (no
    session, its fds, children, cgroups; no host mount)."""
    d = fresh_daemon
    fb = Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    with fb.create() as warm:
        warm.fork()[0].close()
    before = idle_snapshot(d.sock, d.pid)
    mounts_before = mount_points()
    failures: List[RunResult] = []
    t0 = time.monotonic()
    for i in range(500):
        s = fb.create(ttl_s=600)
        s.write_file("/work/i", str(i))
        (child,) = s.fork()
        r = child.run("cat /work/i")
        if r.stdout != str(i):
            failures.append(r)
        child.close()
        s.close()
    elapsed = time.monotonic() - t0
    assert not failures, failures[:3]
    after = idle_snapshot(d.sock, d.pid, like=before, timeout=60)
    diff = leak_differences(before, after)
    assert not diff, f"{diff}\nbefore: {json.dumps(before['info'], sort_keys=True)}\n" \
                     f"after:  {json.dumps(after['info'], sort_keys=True)}"
    assert mount_points() - mounts_before == set()
    print(f"500 sessions with a fork each: {elapsed:.1f} s ({elapsed / 500 * 1000:.1f} ms each)")


# Commands in a session --------------------------------------------------------------------


def test_timeout_in_a_session_keeps_the_session(fb):
    with fb.create(ttl_s=600, timeout_ms=300) as s:
        s.write_file("/work/kept", b"still here")
        r = s.run("sleep 30")  # the session's default deadline
        assert r.timed_out and r.exit_code == 124, r
        r = s.run("sleep 30", timeout_ms=200)
        assert r.timed_out and r.exit_code == 124, r
        r = s.run("sleep 0.5; echo slow", timeout_ms=10_000)  # a run's own deadline wins
        assert r.ok and r.stdout == "slow\n", r
        assert s.run("cat /work/kept").stdout == "still here"


def test_a_run_leaving_a_background_process_returns_promptly(sb):
    n = number()
    t0 = time.monotonic()
    r = sb.run(f"sleep 1000.{n} & echo started")
    elapsed = time.monotonic() - t0
    assert r.ok and r.stdout == "started\n", r
    assert elapsed < 30, f"the run took {elapsed:.1f} s (its background sleep is 1000 s)"
    # The background process goes on in the session, and ends with it. (Looked for until
    # seen: the run returns when its shell exits, maybe while the background child is in
    # its execve of sleep, when /proc/PID/cmdline reads empty.)
    assert wait_for(lambda: procs_with(f"1000.{n}"), timeout=5), "the background process is gone"
    assert sb.run("pgrep -x sleep >/dev/null && echo running").stdout == "running\n"
    sb.close()
    assert wait_for(lambda: not procs_with(f"1000.{n}")), procs_with(f"1000.{n}")


def test_lines_end_before_their_shells_exit_and_leave_no_shell_behind(sb):
    # A session's line ends at its shell's word, with the usage read from the shell then;
    # the shell goes on to its exit after the reply. Twenty lines later the session holds
    # its init, the line's shell and what the line runs, and maybe the last line's shell
    # still exiting: none of the others.
    for i in range(20):
        r = sb.run(f"echo {i}")
        assert r.ok and r.stdout == f"{i}\n", r
        assert r.cpu_ms is not None and r.peak_memory_bytes, r
    r = sb.run("ls /proc | grep -c '^[0-9]'")
    assert r.ok and int(r.stdout) <= 6, r
    r = sb.run("exit 7")  # a line that exits: it ends at its shell's reaping, as before
    assert r.exit_code == 7, r
    r = sb.run("echo x > /tmp/w; echo done")  # what it wrote, read from the session's stage
    assert r.ok and r.stdout == "done\n" and r.written_bytes == os.sysconf("SC_PAGE_SIZE"), r  # one page of its tmpfs


def test_stdin_bytes_in_a_session(sb):
    data = bytes(range(256)) * 4096
    r = sb.run(argv=["/bin/cat"], stdin=data)
    assert r.stdout_bytes == data, r


def test_concurrent_runs_in_one_session(fb, sb):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: sb.run(f"sleep 0.3; echo {i} > /tmp/r{i}; echo {i}"), range(8)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
    assert sorted(e.name for e in sb.list("/tmp") if e.name.startswith("r")) == [f"r{i}" for i in range(8)]


# Streaming --------------------------------------------------------------------------------


def test_stream_yields_chunks_before_the_command_ends(sb):
    seen = []
    for ev in sb.stream("echo a; sleep 1; echo b >&2; echo c"):
        seen.append((time.monotonic(), ev))
    (t_first, first), (t_last, last) = seen[0], seen[-1]
    assert first == OutputChunk("stdout", b"a\n"), seen
    assert isinstance(last, RunResult) and last.ok, seen
    assert all(isinstance(ev, OutputChunk) for _, ev in seen[:-1]), seen
    # The first chunk came while the command slept: well before its result.
    assert t_last - t_first >= 0.5, f"first chunk {t_last - t_first:.3f} s before the result"
    out = b"".join(ev.data for _, ev in seen[:-1] if ev.stream == "stdout")
    err = b"".join(ev.data for _, ev in seen[:-1] if ev.stream == "stderr")
    assert (out, err) == (b"a\nc\n", b"b\n") and (last.stdout, last.stderr) == ("a\nc\n", "b\n")


def test_run_callbacks_get_chunks_as_they_arrive(sb):
    calls = []
    r = sb.run("echo a; sleep 1; echo b >&2", on_stdout=lambda b: calls.append((time.monotonic(), "out", b)),
               on_stderr=lambda b: calls.append((time.monotonic(), "err", b)))
    t_end = time.monotonic()
    assert [(k, b) for _, k, b in calls] == [("out", b"a\n"), ("err", b"b\n")], calls
    assert t_end - calls[0][0] >= 0.5, calls
    assert r.stdout == "a\n" and r.stderr == "b\n"


def test_leaving_a_stream_early_kills_the_run(sb):
    n = number()
    for ev in sb.stream(f"echo go; exec sleep 1000.{n}"):
        assert ev == OutputChunk("stdout", b"go\n")
        assert wait_for(lambda: procs_with(f"1000.{n}"))
        break
    assert wait_for(lambda: not procs_with(f"1000.{n}")), "the run outlived its stream"
    assert sb.run("echo usable").stdout == "usable\n"


def test_stream_of_a_closed_session_raises_at_the_call(fb):
    s = fb.create()
    s.close()
    with pytest.raises(SandboxClosed):
        s.stream("true")  # not at the first next()


def test_back_pressure_a_slow_reader_does_not_grow_the_daemon(fb, daemon):
    """50 MiB of output read slowly: with the default max_output the daemon drops the
    middle and keeps at most max_output, whatever the reader does."""
    service = int((raw_info(daemon.sock) or {})["service_pid"])
    with fb.create(ttl_s=600) as s:
        s.run("true")
        rss0, peak, received = vm_rss_kib(service), 0, 0
        for i, ev in enumerate(s.stream("head -c 52428800 /dev/zero")):
            if isinstance(ev, OutputChunk):
                received += len(ev.data)
                time.sleep(0.02)
                peak = max(peak, vm_rss_kib(service))
            else:
                result = ev
        assert result.ok and result.stdout_written == 50 * MiB, result
        assert received == len(result.stdout_bytes) <= MiB
        assert (peak - rss0) * 1024 < 8 * MiB, f"the daemon grew by {(peak - rss0) // 1024} MiB"


def test_back_pressure_a_slow_reader_slows_the_producer(fb, daemon):
    """With max_output 64 MiB every byte is sent: while the reader takes the first 8 MiB
    slowly, the command (which notes each MiB it wrote) stays close behind it, and the
    daemon holds no more than its buffers."""
    service = int((raw_info(daemon.sock) or {})["service_pid"])
    cmd = "for i in $(seq 50); do head -c 1048576 /dev/zero; echo $i > /tmp/progress; done"
    with fb.create(ttl_s=600) as s:
        s.run("true")
        rss0 = vm_rss_kib(service)
        gen = s.stream(cmd, max_output=64 * MiB)
        received, peak = 0, 0
        for ev in gen:
            assert isinstance(ev, OutputChunk), ev
            received += len(ev.data)
            time.sleep(0.01)
            peak = max(peak, vm_rss_kib(service))
            if received >= 8 * MiB:
                break
        written = int(s.read_file("/tmp/progress") or b"0")
        # Kernel pipe and socket buffers hold a few hundred KiB; allow 4 MiB.
        assert written <= 8 + 4, f"the command wrote {written} MiB while the reader took 8"
        assert (peak - rss0) * 1024 < 8 * MiB, f"the daemon grew by {(peak - rss0) // 1024} MiB"
        for ev in gen:
            if isinstance(ev, OutputChunk):
                received += len(ev.data)
            else:
                result = ev
        assert result.ok and received == 50 * MiB and result.stdout_dropped == 0, result


# Processes --------------------------------------------------------------------------------


def test_spawn_write_and_close_stdin(sb):
    out: List[bytes] = []
    p = sb.spawn("cat; echo eof-seen", on_stdout=out.append)
    assert p.running and p.poll() is None
    p.write(b"first\n")
    p.write("second\n")
    p.write(bytes(range(256)) * 1024)  # more than one message
    p.close_stdin()
    p.close_stdin()  # idempotent
    with pytest.raises(InvalidRequest):
        p.write(b"late")
    r = p.wait(60)
    assert r.ok and r.stdout_bytes == b"first\nsecond\n" + bytes(range(256)) * 1024 + b"eof-seen\n", r
    assert b"".join(out) == r.stdout_bytes and not p.running
    assert p.poll() == r and p.wait() == r


def poll_until(p, pred, timeout: float = 10.0) -> bool:
    """Call ``p.poll()`` (which receives its output) until ``pred()`` holds."""
    until = time.monotonic() + timeout
    while not pred() and time.monotonic() < until:
        p.poll()
        time.sleep(0.02)
    return bool(pred())


def test_spawn_output_arrives_while_it_runs(sb):
    got: List[bytes] = []
    p = sb.spawn("while read line; do echo got:$line; done", on_stdout=got.append)
    p.write("one\n")
    # The echo comes back while stdin is still open.
    assert poll_until(p, lambda: got == [b"got:one\n"]), got
    assert p.running
    p.write("two\n")
    assert poll_until(p, lambda: len(got) == 2), got
    p.close_stdin()
    assert p.wait(30).stdout == "got:one\ngot:two\n"


def test_spawn_kill(sb):
    n = number()
    p = sb.spawn(f"exec sleep 1000.{n}")
    assert wait_for(lambda: procs_with(f"1000.{n}")), "the command did not start"
    with pytest.raises(WaitTimeout) as e:
        p.wait(timeout=0.2)
    assert isinstance(e.value, TimeoutError) and p.running
    p.kill()
    r = p.wait(30)
    assert (r.signal, r.exit_code, r.timed_out) == (9, 137, False), r
    assert wait_for(lambda: not procs_with(f"1000.{n}"))
    p.kill()  # nothing to do
    got: List[bytes] = []
    q = sb.spawn("trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done", on_stdout=got.append)
    assert poll_until(q, lambda: b"ready" in b"".join(got)), got
    q.kill(15)
    r = q.wait(30)
    assert r.exit_code == 3 and r.stdout == "ready\nterm\n", r
    assert sb.run("echo usable").stdout == "usable\n"


def test_spawn_timeout(sb):
    p = sb.spawn("sleep 30", timeout_ms=300)
    r = p.wait(30)
    assert r.timed_out and r.exit_code == 124, r


def test_process_context_manager_kills(sb):
    n = number()
    with sb.spawn(f"exec sleep 1000.{n}") as p:
        assert wait_for(lambda: procs_with(f"1000.{n}"))
    assert not p.running
    assert wait_for(lambda: not procs_with(f"1000.{n}")), "the command outlived its with block"
    with pytest.raises(ForkboxError, match="closed before it ended"):
        p.wait()


# Fork -------------------------------------------------------------------------------------


def test_fork_children_diverge_and_the_parent_is_unchanged(sb):
    sb.write_file("/work/state", b"parent")
    sb.run("echo base > /tmp/base")
    kids = sb.fork(3)
    try:
        assert len({k.id for k in kids} | {sb.id}) == 4
        assert all(k.parent == sb.id and k.limits == sb.limits for k in kids)
        for i, k in enumerate(kids):
            assert k.read_file("/work/state") == b"parent" and k.run("cat /tmp/base").stdout == "base\n"
            k.write_file("/work/state", f"child {i}")
            k.run(f"echo {i} > /tmp/only-{i}")
        for i, k in enumerate(kids):
            assert k.read_file("/work/state") == f"child {i}".encode()
            others = sorted(e.name for e in k.list("/tmp") if e.name.startswith("only-"))
            assert others == [f"only-{i}"], others
            # The child's diff is against its fork point.
            changes = {c.path: c.change for c in k.diff()}
            assert changes == {"/work/state": "modified", f"/tmp/only-{i}": "created"}, changes
        assert sb.read_file("/work/state") == b"parent"
        assert not [e for e in sb.list("/tmp") if e.name.startswith("only-")]
        parent_changes = {c.path: c.change for c in sb.diff()}
        assert parent_changes["/work/state"] == "created" and "/tmp/only-0" not in parent_changes
        listed = {i.id: i for i in sb.client.sandboxes()}
        assert all(listed[k.id].parent == sb.id for k in kids)
    finally:
        for k in kids:
            k.close()
    assert sb.run("echo parent-alive").stdout == "parent-alive\n"


def test_nested_forks_to_depth_8(sb):
    sb.run("echo 0 > /tmp/level")
    chain = [sb]
    try:
        for depth in range(1, 9):
            (child,) = chain[-1].fork()
            chain.append(child)
            child.run(f"echo {depth} > /tmp/level; echo {depth} > /tmp/f{depth}")
        last = chain[-1]
        r = last.run("cat /tmp/level; ls /tmp | grep '^f' | tr '\\n' ' '")
        assert r.stdout == "8\nf1 f2 f3 f4 f5 f6 f7 f8 ", r
        changes = {c.path: c.change for c in last.diff()}
        assert changes == {"/tmp/f8": "created", "/tmp/level": "modified"}, changes
        # Each level kept its own state.
        for depth, s in enumerate(chain):
            assert s.read_file("/tmp/level") == f"{depth}\n".encode(), depth
    finally:
        for s in chain[1:]:
            s.close()


def test_a_forked_child_has_none_of_the_parents_processes(sb):
    n = number()
    sb.run(f"sleep 1000.{n} &")
    assert wait_for(lambda: len(procs_with(f"1000.{n}")) == 1)
    (child,) = sb.fork()
    try:
        r = child.run("pgrep -x sleep || echo none; ls /proc | grep -c '^[0-9]'")
        lines = r.stdout.split()
        assert lines[0] == "none", r
        assert int(lines[1]) <= 4, r  # its init, the shell, ls, grep
        assert sb.run("pgrep -x sleep >/dev/null && echo kept").stdout == "kept\n"
        assert len(procs_with(f"1000.{n}")) == 1
    finally:
        child.close()


def test_fork_keeps_the_parents_connections_open(sb):
    p = sb.spawn("while read line; do echo got:$line; done")
    p.write("before\n")
    kids = sb.fork(2)
    p.write("after\n")
    p.close_stdin()
    r = p.wait(30)
    assert r.stdout == "got:before\ngot:after\n", r
    for k in kids:
        k.close()


def held_sandboxes(sock: str) -> int:
    return ((raw_info(sock) or {}).get("pool") or {}).get("held", 0)


def test_forks_take_held_sandboxes_which_go_with_the_kinds_last_session(fresh_daemon):
    """After a fork the daemon holds half-made sandboxes of the kind (namespaces, no root
    yet) for the next one: their children copy the parent's state like any, and they go
    once no session of the kind is left, leaving nothing behind."""
    d = fresh_daemon
    fb = Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    fb.run("true")
    before = idle_snapshot(d.sock, d.pid)
    mounts_before = mount_points()
    assert held_sandboxes(d.sock) == 0
    s = fb.create(ttl_s=600)
    try:
        s.write_file("/work/data", b"v1")
        for k in s.fork(3):
            k.close()
        assert wait_for(lambda: held_sandboxes(d.sock) == 3), raw_info(d.sock)
        s.write_file("/work/data", b"v2")
        kids = s.fork(3)
        try:
            for i, k in enumerate(kids):
                assert k.read_file("/work/data") == b"v2" and k.parent == s.id
                k.write_file("/work/data", f"kid {i}".encode())
            assert [k.read_file("/work/data") for k in kids] == [b"kid 0", b"kid 1", b"kid 2"]
            assert kids[0].run("id -u; hostname; ip -o link | wc -l").stdout == "0\nsandbox\n1\n"
            assert s.read_file("/work/data") == b"v2"
        finally:
            for k in kids:
                k.close()
        # Refilled while a session of the kind lives.
        assert wait_for(lambda: held_sandboxes(d.sock) == 3), raw_info(d.sock)
    finally:
        s.close()
    assert wait_for(lambda: held_sandboxes(d.sock) == 0, timeout=20), raw_info(d.sock)
    after = idle_snapshot(d.sock, d.pid, like=before)
    diff = leak_differences(before, after)
    assert not diff, f"{diff}\nbefore: {json.dumps(before['info'], sort_keys=True)}\n" \
                     f"after:  {json.dumps(after['info'], sort_keys=True)}"
    assert mount_points() - mounts_before == set()


def test_commands_run_with_the_ordinary_scheduling_policy(fb, sb):
    """Sandboxes are built as SCHED_BATCH (a build never preempts a command): nothing that
    runs in one keeps it, one-shot, in a session, in a fork's child, or in a warm Python."""
    policy = "python3 -c 'import os; print(os.sched_getscheduler(0))'"
    assert fb.run(policy).stdout == f"{os.SCHED_OTHER}\n"
    assert sb.run(policy).stdout == f"{os.SCHED_OTHER}\n"
    (child,) = sb.fork()
    try:
        assert child.run(policy).stdout == f"{os.SCHED_OTHER}\n"
    finally:
        child.close()
    assert fb.run_python("import os; print(os.sched_getscheduler(0))").stdout == f"{os.SCHED_OTHER}\n"
    assert sb.run_python("import os; print(os.sched_getscheduler(0))").stdout == f"{os.SCHED_OTHER}\n"


def test_fork_count_is_checked(sb):
    for bad in (0, 17, -1, True, 1.0):
        with pytest.raises(InvalidRequest):
            sb.fork(bad)


# Pause and resume -------------------------------------------------------------------------


def freezer_state(pid):
    """The v1 freezer.state of the process's cgroup, or None (no v1 freezer)."""
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "freezer":
                with open("/sys/fs/cgroup/freezer%s/freezer.state" % path) as g:
                    return g.read().strip()
    return None


def test_pause_stops_every_process_and_resume_continues(sb):
    mark = unique()
    sb.run(f"sh -c 'while :; do echo x >> /tmp/ticks; sleep 0.05; done' {mark} >/dev/null 2>&1 &")
    # The loop's shell is the one whose parent is not marked: a child it forks for `sleep`
    # carries the same command line until it execs.
    def loop_shell():
        marked = procs_with(mark)
        shells = [p for p in marked if not any(p in children_of(q) for q in marked)]
        return shells[0] if len(shells) == 1 else None

    assert wait_for(lambda: loop_shell() is not None)
    pid = loop_shell()
    assert pid is not None
    by_cgroup = sb.client.info()["freezer"] == "cgroup"
    # The shell shows in /proc before its first echo has made the file.
    assert wait_for(lambda: sb.run("test -s /tmp/ticks").exit_code == 0)
    ticks = sb.read_file("/tmp/ticks")
    sb.pause()
    if by_cgroup:
        # A root daemon freezes the session's cgroup: its init too, so file verbs wait.
        assert freezer_state(pid) in ("FROZEN", None)
        with pytest.raises(SandboxError, match="paused"):
            sb.read_file("/tmp/ticks")
    else:
        assert wait_for(lambda: proc_state(pid) == "T"), proc_state(pid)
    with pytest.raises(SandboxError, match="paused") as e:
        sb.run("true")
    assert not isinstance(e.value, SandboxClosed)
    assert [i.paused for i in sb.client.sandboxes() if i.id == sb.id] == [True]
    if not by_cgroup:
        # Stopped by signals: its files stay readable, and nothing writes them meanwhile.
        ticks = sb.read_file("/tmp/ticks")
        time.sleep(0.5)
        assert sb.read_file("/tmp/ticks") == ticks
    sb.resume()
    if by_cgroup:
        assert freezer_state(pid) in ("THAWED", None)
    assert wait_for(lambda: proc_state(pid) not in ("T", "D")), proc_state(pid)
    assert sb.run("echo resumed").stdout == "resumed\n"
    assert pid_alive(pid)
    assert len(sb.read_file("/tmp/ticks")) >= len(ticks)


# asyncio ----------------------------------------------------------------------------------


def test_async_session(daemon):
    async def main():
        c = AsyncForkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
        async with c.create(ttl_s=600) as s:
            assert isinstance(s, AsyncSandbox)
            await s.write_file("/work/x", b"\x00async\xff")
            assert await s.read_file("/work/x") == b"\x00async\xff"
            assert [e.name for e in await s.list("/work") if e.name == "x"] == ["x"]
            r = await s.run("cat /work/x | wc -c")
            assert r.stdout == "7\n", r
            events = []
            async for ev in s.stream("echo a; sleep 1; echo b"):
                events.append((time.monotonic(), ev))
            assert events[0][1] == OutputChunk("stdout", b"a\n") and isinstance(events[-1][1], RunResult)
            assert events[-1][0] - events[0][0] >= 0.5
            p = await s.spawn("cat")
            await p.write(b"to stdin")
            await p.close_stdin()
            assert (await p.wait(30)).stdout == "to stdin"
            q = await s.spawn("sleep 30")
            with pytest.raises(WaitTimeout):
                await q.wait(0.1)
            await q.kill()
            assert (await q.wait(30)).signal == 9
            await s.mkdir("/work/d/e")
            await s.remove("/work/d", recursive=True)
            with pytest.raises(FileNotFoundError):
                await s.read_file("/work/d/e")
            assert {c.path for c in await s.diff()} == {"/work/x"}
            kids = await s.fork(3)
            results = await asyncio.gather(*(k.run(f"echo {i} >> /work/x; cat /work/x") for i, k in enumerate(kids)))
            assert [r.stdout_bytes for r in results] == [b"\x00async\xff" + f"{i}\n".encode() for i in range(3)]
            await asyncio.gather(*(k.close() for k in kids))
            await s.pause()
            await s.resume()
            assert s.id in {i.id for i in await c.sandboxes()}
        assert s.closed
        with pytest.raises(SandboxClosed):
            await s.run("true")
        s2 = await c.create()  # awaited rather than entered
        try:
            assert (await c.connect(s2.id).run("echo attached")).stdout == "attached\n"
        finally:
            await s2.close()

    asyncio.run(main())


def test_async_stream_closed_early_kills_the_run(daemon):
    n = number()

    async def main():
        c = AsyncForkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
        async with c.create(ttl_s=600) as s:
            gen = s.stream(f"echo go; exec sleep 1000.{n}")
            async for ev in gen:
                assert ev == OutputChunk("stdout", b"go\n")
                break
            assert wait_for(lambda: procs_with(f"1000.{n}"))
            await gen.aclose()
            assert wait_for(lambda: not procs_with(f"1000.{n}")), "the run outlived its closed stream"
            return (await s.run("echo usable")).stdout

    assert asyncio.run(main()) == "usable\n"


def test_async_class_level_create(default_socket):
    async def main():
        async with AsyncForkbox.create(ttl_s=600) as s:
            return (await s.run("echo class-level")).stdout

    assert asyncio.run(main()) == "class-level\n"


def readme_block(heading: str) -> str:
    """The first ```python block after ``heading`` in python/README.md."""
    from fbtest_helpers import PYTHON_DIR

    text = open(os.path.join(PYTHON_DIR, "README.md"), encoding="utf-8").read()
    after = text[text.index(heading):]
    start = after.index("```python\n") + len("```python\n")
    return after[start:after.index("```", start)]


def test_readme_agent_loop(default_socket):
    """The README's agent-loop example, read from the README."""
    ns: dict = {}
    exec(compile(readme_block("### An agent loop"), "README agent loop", "exec"), ns)
    assert ns["best"] == "echo a much longer answer >> state; cat state"
    assert ns["state"] == b"setup done\na much longer answer\n"


def test_readme_sessions_example(default_socket):
    ns: dict = {}
    exec(compile(readme_block("## Sessions"), "README sessions", "exec"), ns)
    assert ns["r"].stdout == "42\n" and ns["sb"].closed
