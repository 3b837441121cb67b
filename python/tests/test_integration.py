"""The SDK against a real ``forkbox daemon`` (as root), started by the session fixture from
a private copy of ``$FORKBOX_BIN`` (default: this tree's build/forkbox).

Skipped, with the reason, when that daemon does not answer ``sandbox/1 info``.
"""

import asyncio
import glob
import json
import os
import random
import shutil
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from fbtest_helpers import (
    CLIENT_TIMEOUT_S,
    ESCAPE_SCRIPT,
    escape_mismatches,
    idle_snapshot,
    leak_differences,
    host_pids,
    make_tmp,
    net_interfaces,
    peer_pid,
    procs_with,
    raw_exchange,
    raw_info,
    wait_gone,
)
from forkbox import AsyncForkbox, DaemonNotRunning, Forkbox
import forkbox._daemon

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("hang_guard")]


def unique() -> str:
    return f"fbmark-{uuid.uuid4().hex}"


# The three examples, verbatim -------------------------------------------------------


def test_example_factorial(default_socket):
    r = Forkbox.run("python3 -c 'import math; print(math.factorial(20))'")
    assert r.stdout == "2432902008176640000\n", r
    assert r.exit_code == 0 and r.ok
    assert isinstance(r.duration_ms, float)


def test_example_timeout(default_socket):
    r = Forkbox.run("while true; do :; done", timeout_ms=500)
    assert r.timed_out is True, r
    assert r.exit_code == 124


def test_example_hosts_file(default_socket):
    before = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    r = Forkbox.run("echo payload >> /etc/hosts")
    after = (open("/etc/hosts", "rb").read(), os.stat("/etc/hosts").st_mtime_ns)
    assert after == before, f"host /etc/hosts changed by {r}"
    r2 = Forkbox.run("cat /etc/hosts")
    assert r2.ok, r2
    assert "payload" not in r2.stdout


# Data in and out --------------------------------------------------------------------------


def test_binary_round_trip(fb):
    data = bytes(range(256)) * 100
    r = fb.run(argv=["/bin/cat"], stdin=data)
    assert r.ok, r
    assert r.stdout_bytes == data


def test_large_stdin(fb):
    data = os.urandom(3 << 20)
    r = fb.run("sha256sum", stdin=data)
    import hashlib

    assert r.ok, r
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()


def test_stdin_str(fb):
    r = fb.run("tr a-z A-Z", stdin="héllo\n")
    assert r.stdout == "HéLLO\n", r


def test_no_stdin_is_dev_null(fb):
    r = fb.run("cat; echo done")
    assert r.stdout == "done\n", r


def test_stderr_and_exit_code(fb):
    r = fb.run("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 3, False), r


def test_signal_exit(fb):
    # The command is not the sandbox's init: a fault, and a signal it sends itself, kill it
    # as they would anywhere.
    r = fb.run(argv=["python3", "-c", "import ctypes; ctypes.string_at(0)"])
    assert r.signal == 11 and r.exit_code == 128 + 11, r
    r = fb.run("sh -c 'kill -TERM $$'; echo $?")
    assert r.stdout == "143\n" and r.ok, r
    r = fb.run(argv=["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert r.signal == 15 and r.exit_code == 143, r


USAGE_CODE = ("import time; b = bytearray(64 << 20); t = time.process_time()\n"
              "while time.process_time() - t < 0.05: pass")


@pytest.mark.parametrize("how", ["line", "argv"])
def test_cpu_and_peak_memory_are_the_command_s(fb, how):
    # A line may be reported before its shell's exit (the warm shell): its usage is then the
    # sandbox cgroup's, not the reaped shell's rusage; the figures must still be there.
    if how == "line":
        r = fb.run(f"python3 -c '{USAGE_CODE}'")
    else:
        r = fb.run(argv=["python3", "-c", USAGE_CODE])
    assert r.ok, r
    assert r.cpu_ms is not None and r.cpu_ms >= 50, r
    assert r.peak_memory_bytes is not None and r.peak_memory_bytes >= 64 << 20, r


def test_env(fb):
    r = fb.run('echo "$FOO|$HOME|${PATH:+path}"', env={"FOO": "bar baz"})
    assert r.stdout == "bar baz||path\n", r
    d = fb.run('echo "$HOME|$LANG"')
    assert d.stdout == "/root|C.UTF-8\n", d


def test_cwd(fb):
    assert fb.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert fb.run("pwd").stdout == "/\n"


def test_cwd_missing_is_exec_error(fb):
    r = fb.run(argv=["/bin/true"], cwd="/no/such/dir")
    assert r.exit_code in (126, 127) and r.exec_error, r


def test_argv(fb):
    r = fb.run(argv=["echo", "a  b", "$HOME", "c"])
    assert r.stdout == "a  b $HOME c\n", r


def test_argv_missing_program(fb):
    r = fb.run(argv=["fb-no-such-program"])
    assert r.exit_code == 127 and r.exec_error, r


def test_mount_ro(fb, tmp_path):
    (tmp_path / "f").write_text("host data\n")
    r = fb.run("cat /data/f; echo x > /data/g", mounts=[(str(tmp_path), "/data")])
    assert r.stdout == "host data\n", r
    assert r.exit_code != 0, r
    assert not (tmp_path / "g").exists()


def test_mount_rw(fb, tmp_path):
    r = fb.run("echo from sandbox > /data/g", mounts=[(str(tmp_path), "/data", "rw")])
    assert r.ok, r
    assert (tmp_path / "g").read_text() == "from sandbox\n"


def test_rootfs_replaces_the_hosts_root(fb, daemon, tmp_path):
    """rootfs=: an image's tree, not the host's, is the read-only root; the SDK's sync and
    async calls and sessions pass it."""
    root = tmp_path / "img"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy(shutil.which("busybox") or "/bin/busybox", root / "bin" / "busybox")
    for tool in ("sh", "cat", "test", "echo"):
        (root / "bin" / tool).symlink_to("busybox")
    (root / "etc" / "marker").write_text("from the image\n")
    os.chmod(tmp_path, 0o755)
    r = fb.run("cat /etc/marker; test -e /usr/bin/python3 || echo no-host", rootfs=root)
    assert r.ok and r.stdout == "from the image\nno-host\n", r
    r = asyncio.run(AsyncForkbox(socket=daemon.sock).run("cat /etc/marker", rootfs=str(root)))
    assert r.stdout == "from the image\n", r
    with fb.create(rootfs=root) as sb:
        assert sb.run("cat /etc/marker").stdout == "from the image\n"


# Containment ------------------------------------------------------------------------------


def test_escape_syscalls(fb):
    r = fb.run(argv=["python3", "-c", ESCAPE_SCRIPT])
    assert r.ok, r
    bad = escape_mismatches(r.stdout)
    assert not bad, bad


def test_no_host_processes(fb):
    r = fb.run("echo $$; ls /proc | grep -c '^[0-9][0-9]*$'")
    assert r.ok, r
    shell_pid, count = (int(x) for x in r.stdout.split())
    assert shell_pid <= 5, r
    assert count <= 10 < host_pids(), r


def test_no_network_by_default(fb):
    r = fb.run("cat /proc/net/dev")
    assert r.ok, r
    assert net_interfaces(r.stdout) == ["lo"], r.stdout


def test_network_true_shares_the_host(fb):
    host = net_interfaces(open("/proc/net/dev").read())
    if host == ["lo"]:
        pytest.skip("the host has no interface but lo")
    r = fb.run("cat /proc/net/dev", network=True)
    assert r.ok, r
    assert sorted(net_interfaces(r.stdout)) == sorted(host), r.stdout


FORK_BOMB = r"""
import os, time, errno
n = 0
try:
    while True:
        pid = os.fork()
        if pid == 0:
            os.close(1); os.close(2)
            time.sleep(20)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed", errno.errorcode.get(e.errno, e.errno), n, flush=True)
"""


def test_fork_bomb_contained(fb):
    r = fb.run(argv=["python3", "-c", FORK_BOMB], pids=64, timeout_ms=60_000)
    assert not r.timed_out, r
    assert r.stdout.startswith("fork failed"), r
    n = int(r.stdout.split()[3])
    assert n < 64, r
    assert r.limits.get("pids") in ("cgroup", "rlimit"), r.limits
    # The host is fine: it forks, and the daemon serves the next run.
    assert os.waitpid(os.spawnv(os.P_NOWAIT, "/bin/true", ["true"]), 0)[1] == 0
    assert fb.run("echo fine").stdout == "fine\n"


MEMORY_HOG = "l = [bytes([1]) * (1 << 20) for _ in range(256)]; print('allocated', len(l))"


def test_memory_hog_contained(fb):
    r = fb.run(argv=["python3", "-c", MEMORY_HOG], memory_mb=64, timeout_ms=60_000)
    assert "allocated" not in r.stdout, r
    assert r.oom_killed or r.exit_code != 0, r
    assert r.limits.get("memory") in ("cgroup", "rlimit"), r.limits
    assert fb.run("echo fine").stdout == "fine\n"


def test_output_flood_capped(fb):
    r = fb.run("yes | head -c 50000000", max_output=1 << 20, timeout_ms=120_000)
    assert r.ok, r
    assert len(r.stdout_bytes) == 1 << 20, r
    assert r.stdout_dropped == 50_000_000 - (1 << 20), r
    assert r.stdout_truncated
    half = 1 << 19
    assert r.stdout_bytes[:half] == b"y\n" * (half // 2)  # head: the stream's start
    assert r.stdout_bytes[half:] == b"y\n" * (half // 2)  # tail: its end (even offset)
    assert r.stdout_written == 50_000_000


def test_output_flood_default_cap(fb, daemon):
    r = fb.run("head -c 5000000 /dev/zero", timeout_ms=120_000)
    cap = (raw_info(daemon.sock) or {}).get("defaults", {}).get("max_output", 1 << 20)
    assert len(r.stdout_bytes) == cap and r.stdout_dropped == 5_000_000 - cap, r


def watchdog_command(marker: str, number: str) -> str:
    return (f"sleep 1000.{number} & sleep 1000.{number} & "
            f"sh -c 'while :; do sleep 1; done' {marker} & "
            f"sh -c 'while :; do :; done' {marker}")


def test_watchdog_kills_every_process(fb):
    marker, number = unique(), str(random.randrange(10**8, 10**9))
    r = fb.run(watchdog_command(marker, number), timeout_ms=300)
    assert r.timed_out and r.exit_code == 124, r
    left = procs_with(marker) + procs_with(f"1000.{number}")
    assert not left, f"processes left after the result: {left}"


def test_watchdog_is_never_early(fb):
    # The daemon wakes a little before each deadline and waits for it awake: the kill comes
    # at the deadline, never before it, and a command that ends first is not touched.
    for timeout_ms in (1, 20, 150):
        r = fb.run("while :; do :; done", timeout_ms=timeout_ms)
        assert r.timed_out and r.exit_code == 124, r
        assert r.duration_ms >= timeout_ms, r
    r = fb.run("sleep 0.05", timeout_ms=200)
    assert r.ok and not r.timed_out, r
    with fb.create(timeout_ms=60_000) as sb:
        r = sb.run("while :; do :; done", timeout_ms=100)
        assert r.timed_out and r.exit_code == 124 and r.duration_ms >= 100, r
        assert sb.run("echo alive").stdout == "alive\n"


def test_client_disconnect_kills_the_sandbox(daemon):
    marker, number = unique(), str(random.randrange(10**8, 10**9))
    # The marker is in a shell the line starts: the line's own shell is a warm one, whose
    # command line is not the line.
    req = {"argv": ["/bin/sh", "-c", f"echo started; sh -c 'sleep 1000.{number}; : {marker}'"]}
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(60)
    try:
        s.connect(daemon.sock)
        s.send(b"sandbox/1 run\n" + json.dumps(req).encode())
        first = s.recv(1 << 17)
        assert first == b"1started\n", first
        time.sleep(0.2)
        until = time.monotonic() + 10
        while not procs_with(f"1000.{number}") and time.monotonic() < until:
            time.sleep(0.05)
        assert procs_with(marker), "the sandbox's shell is not visible on the host"
    finally:
        s.close()
    until = time.monotonic() + 5
    while time.monotonic() < until and (procs_with(marker) or procs_with(f"1000.{number}")):
        time.sleep(0.05)
    left = procs_with(marker) + procs_with(f"1000.{number}")
    assert not left, f"processes left 5 s after the client closed: {left}"


def wait_no_procs(needles, timeout=5.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until and any(procs_with(n) for n in needles):
        time.sleep(0.05)
    return [p for n in needles for p in procs_with(n)]


def test_sdk_client_deadline_kills_the_sandbox(daemon):
    """The SDK's own deadline (request_timeout_s) closes the connection: the daemon kills
    the sandbox."""
    from forkbox import SandboxError

    marker, number = unique(), str(random.randrange(10**8, 10**9))
    c = Forkbox(socket=daemon.sock, request_timeout_s=1.0)
    with pytest.raises(SandboxError, match="no final message"):
        c.run(f"sleep 1000.{number}; : {marker}")
    left = wait_no_procs([marker, f"1000.{number}"])
    assert not left, f"processes left 5 s after the SDK gave up: {left}"


def test_async_cancel_kills_the_sandbox(daemon):
    marker, number = unique(), str(random.randrange(10**8, 10**9))

    async def main():
        c = AsyncForkbox(socket=daemon.sock)
        task = asyncio.ensure_future(c.run(f"sleep 1000.{number}; : {marker}"))
        until = time.monotonic() + 20
        while not procs_with(f"1000.{number}") and time.monotonic() < until:
            await asyncio.sleep(0.05)
        assert procs_with(f"1000.{number}"), "the sandbox did not start"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    left = wait_no_procs([marker, f"1000.{number}"])
    assert not left, f"processes left 5 s after the task was cancelled: {left}"


# The daemon as a server -------------------------------------------------------------------


BAD_REQUESTS = {
    "garbage": [b"\x00\xffhello garbage"],
    "unknown verb": [b"sandbox/1 frobnicate\n{}"],
    "wrong version": [b'sandbox/2 run\n{"argv":["true"]}'],
    "oversized 200 KiB": [b'sandbox/1 run\n{"argv":["true"],"env":["X=' + b"x" * (200 * 1024) + b'"]}'],
    "unknown key": [b'sandbox/1 run\n{"argv":["true"],"bogus":1}'],
    "argv not a list": [b'sandbox/1 run\n{"argv":"true"}'],
    "argv empty": [b'sandbox/1 run\n{"argv":[]}'],
    "not json": [b"sandbox/1 run\n{argv"],
    "stdin message first": [b"Ihello"],
}


@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_bad_request_gets_an_error_and_daemon_keeps_serving(daemon, name):
    msgs = raw_exchange(daemon.sock, BAD_REQUESTS[name])
    assert msgs and msgs[-1][:1] == b"!", f"{name}: got {msgs!r}"
    err = json.loads(msgs[-1][1:])
    assert err.get("error") == "invalid_request" and err.get("message"), err
    if name == "wrong version":
        assert "1" in err["message"], err
    assert raw_info(daemon.sock) is not None, "the daemon stopped answering"


def test_a_kept_connection_carries_requests_in_a_row(daemon):
    """The keep verb (docs/sandbox-protocol.md): a request sent at once after it, errors
    that leave the connection kept, a late request's stdin dropped, a zygote request handed
    on, the close at the end."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(60)

    def request(verb, obj):
        return f"sandbox/1 {verb}\n".encode() + json.dumps(obj).encode()

    def answer():
        out = []
        while True:
            m = s.recv(1 << 17)
            out.append(m)
            if m[:1] in (b"", b"X", b"!"):
                return out

    def run(argv, **kw):
        s.send(request("run", {"argv": argv, **kw}))
        msgs = answer()
        return b"".join(m[1:] for m in msgs if m[:1] == b"1"), json.loads(msgs[-1][1:])

    try:
        s.connect(daemon.sock)
        s.send(request("keep", {}))
        s.send(request("run", {"argv": ["echo", "one"]}))  # without waiting for keep's answer
        assert answer() == [b'X{"keep":true}']
        assert answer()[0] == b"1one\n"
        assert run(["echo", "two"])[0] == b"two\n"
        s.send(request("info", {}))
        assert json.loads(answer()[-1][1:])["protocol"] == 1
        # Standard input the last run had no use for, then a kill: that run's, dropped.
        for m in (b"Ilate", b"E", b"K9"):
            s.send(m)
        assert run(["echo", "three"])[0] == b"three\n"
        s.send(request("run", {"argv": ["cat"], "stdin": True}))
        s.send(b"Ipiped")
        s.send(b"E")
        msgs = answer()
        assert msgs[0] == b"1piped" and json.loads(msgs[-1][1:])["exit_code"] == 0, msgs
        s.send(request("run", {"argv": []}))
        assert json.loads(answer()[-1][1:])["error"] == "invalid_request"
        out, res = run(["sh", "-c", "sleep 5"], timeout_ms=100)
        assert res["timed_out"] and res["exit_code"] == 124, res
        s.send(request("keep", {"again": 1}))
        assert "again" in json.loads(answer()[-1][1:])["message"]
        assert run(["echo", "still"])[0] == b"still\n"
        s.send(b"not a sandbox request")  # the zygote loop's, which answers and closes
        assert answer()[-1][:1] == b"!"
        assert s.recv(16) == b""
    finally:
        s.close()
    assert raw_info(daemon.sock) is not None, "the daemon stopped answering"


def test_unknown_key_through_the_sdk_is_invalid_request(daemon):
    # The SDK only sends keys it knows; a raw one shows the daemon's message reaches users.
    from forkbox import InvalidRequest
    from forkbox._protocol import Exchange

    msgs = raw_exchange(daemon.sock, [b'sandbox/1 run\n{"argv":["true"],"tiemout_ms":5}'])
    ex = Exchange("run")
    for m in msgs:
        ex.feed(m)
    with pytest.raises(InvalidRequest, match="tiemout_ms"):
        ex.result()


def test_info(fb):
    info = fb.info()
    assert info["protocol"] == 1
    for key in ("version", "uid", "mode", "limits", "defaults", "live", "served", "open_fds"):
        assert key in info, info
    assert info["uid"] == 0


def test_concurrent_runs_threads(fb):
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda i: fb.run(f"echo {i}", timeout_ms=60_000), range(50)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(50)]
    assert all(r.ok for r in results)


def test_concurrent_runs_asyncio(daemon):
    async def main():
        c = AsyncForkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
        return await asyncio.gather(*(c.run(f"echo {i}", timeout_ms=60_000) for i in range(50)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(50)]


def test_async_stdin_and_streams(daemon):
    async def main():
        c = AsyncForkbox(socket=daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
        return await c.run(argv=["/bin/cat"], stdin=bytes(range(256)) * 1000)

    assert asyncio.run(main()).stdout_bytes == bytes(range(256)) * 1000


# With the default pool and without one: a pool never holds more than --sandbox-pool.
POOLS = pytest.mark.parametrize(
    "fresh_daemon",
    [(), ("--sandbox-pool", "0")],
    indirect=True,
    ids=["default-pool", "no-pool"],
)


@POOLS
def test_no_leak_after_1000_runs(fresh_daemon):
    """Everything the daemon holds once idle is what it held before 1000 runs: its fds,
    children, host mounts and cgroups. With the default pool, that includes the pool's size
    (ready embryos hold fds, a process and cgroups each); without a pool, nothing is ready."""
    d = fresh_daemon
    fb = Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    fb.run("true")  # the pool of this kind exists
    before = idle_snapshot(d.sock, d.pid)
    failures = [r for r in (fb.run("true") for _ in range(1000)) if not r.ok]
    assert not failures, failures[:3]
    after = idle_snapshot(d.sock, d.pid, like=before)
    diff = leak_differences(before, after)
    assert not diff, f"{diff}\nbefore: {json.dumps(before['info'], sort_keys=True)}\n" \
                     f"after:  {json.dumps(after['info'], sort_keys=True)}"


def test_daemon_restart(daemon, fb):
    assert fb.run("echo before").stdout == "before\n"
    info = daemon.restart()
    assert info is not None, daemon.log_tail()
    assert fb.run("echo after").stdout == "after\n"
    assert Forkbox(socket=daemon.sock).run("echo again").stdout == "again\n"


def test_kept_connections_outlive_a_sandbox_service_killed_between_calls(fresh_daemon):
    """The service that held the client's kept connection dies (SIGKILL) between two calls:
    the next call sees the close, connects again, and the daemon's new service serves it."""
    fb = Forkbox(socket=fresh_daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    assert fb.run("echo one").stdout == "one\n"
    service = fb.info()["service_pid"]
    os.kill(service, signal.SIGKILL)
    assert wait_gone(service, 10)
    until = time.monotonic() + 20
    while True:  # the first requests after the death may meet the restart (a clear error)
        try:
            assert fb.run("echo two").stdout == "two\n"
            break
        except forkbox.SandboxError:
            if time.monotonic() > until:
                raise
            time.sleep(0.2)
    assert fb.info()["service_pid"] != service
    fb.close()


def test_daemon_not_running(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(DaemonNotRunning) as e:
        Forkbox(socket=path, autostart=False).run("true")
    assert path in str(e.value) and "forkbox daemon" in str(e.value)


def test_autostart_real_daemon(daemon, monkeypatch):
    """As root, autostart is for the default socket only, which is the machine's
    /run/forkbox/forkbox.sock: it is asked for here with autostart=True on a socket in a
    temporary XDG_RUNTIME_DIR (the default-socket case runs as a user, in test_rootless)."""
    tmp = make_tmp("fbas-")  # 0700, as a user's XDG_RUNTIME_DIR
    path = os.path.join(tmp, "forkbox", "forkbox.sock")
    monkeypatch.setenv("FORKBOX_BIN", daemon.binary)
    monkeypatch.setenv("XDG_RUNTIME_DIR", tmp)
    monkeypatch.delenv("FORKBOX_NO_AUTOSTART", raising=False)
    pid = None
    try:
        r = Forkbox(socket=path, autostart=True, request_timeout_s=CLIENT_TIMEOUT_S).run("echo started")
        assert r.stdout == "started\n", r
        pid = peer_pid(path)
        assert pid != daemon.pid
        assert Forkbox(socket=path, autostart=True).run("echo again").stdout == "again\n"
        assert peer_pid(path) == pid  # no second daemon
    finally:
        if pid is None and os.path.exists(path):
            try:
                pid = peer_pid(path)
            except OSError:
                pid = None
        forks = procs_with(path)  # the daemon and its forks (same command line)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid, 15):
                os.kill(pid, signal.SIGKILL)
        for p in list(forkbox._daemon._started):
            if pid is not None and p.pid == pid:
                p.wait(10)
                forkbox._daemon._started.remove(p)
        left = [p for p in forks if not wait_gone(p, 10)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"processes of the autostarted daemon left after its SIGTERM: {left}"


@pytest.mark.parametrize("fresh_daemon", [("--max-sandboxes", "2")], indirect=True, ids=["max-2"])
def test_busy_is_retried_by_the_sdk(fresh_daemon):
    """A daemon that runs 2 sandboxes at once answers `busy` to the others: with its
    retries the SDK gets them all done; without (busy_retry_s=0) some raise SandboxBusy."""
    from forkbox import SandboxBusy

    patient = Forkbox(socket=fresh_daemon.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda i: patient.run(f"sleep 0.2; echo {i}"), range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]

    impatient = Forkbox(socket=fresh_daemon.sock, busy_retry_s=0, request_timeout_s=CLIENT_TIMEOUT_S)

    def attempt(i):
        try:
            return impatient.run("sleep 2").ok
        except SandboxBusy as e:
            return e.code

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    assert "busy" in outcomes and True in outcomes, outcomes


def test_daemon_sigkilled_with_runs_and_sessions_in_flight(fresh_daemon):
    """SIGKILL of the daemon (its sandbox service follows it: PDEATHSIG) with a run in flight
    and a session open: the SDK raises a ForkboxError saying what happened, promptly; no
    sandbox process is left; a new daemon on the same socket serves, and nothing of the
    dead service is left (its cgroups go with the next service)."""
    from forkbox import ForkboxError

    d = fresh_daemon
    number = str(random.randrange(10**8, 10**9))
    fb = Forkbox(socket=d.sock, request_timeout_s=CLIENT_TIMEOUT_S)
    service = fb.info()["service_pid"]
    sb = fb.create()
    sb.run(f"(sleep 1001.{number} &); true")
    with ThreadPoolExecutor(2) as pool:
        in_flight = [pool.submit(fb.run, f"sleep 1002.{number}"),
                     pool.submit(sb.run, f"sleep 1003.{number}")]
        until = time.monotonic() + 10
        while len(procs_with(f".{number}")) < 3 and time.monotonic() < until:
            time.sleep(0.05)
        os.kill(d.pid, signal.SIGKILL)
        started = time.monotonic()
        for f in in_flight:
            with pytest.raises(ForkboxError) as e:
                f.result(timeout=30)
            assert str(e.value), "an error without a message"
        assert time.monotonic() - started < 10, "the clients took long to hear of the daemon's death"
    d.proc.wait(10)
    left = wait_no_procs([f"1001.{number}", f"1002.{number}", f"1003.{number}"])
    assert not left, f"sandbox processes left after the daemon's SIGKILL: {left}"
    assert wait_gone(service, 10), "the sandbox service outlived its daemon"
    d.start()
    assert d.wait_ready() is not None, d.log_tail()
    assert Forkbox(socket=d.sock).run("echo again").stdout == "again\n"
    until = time.monotonic() + 5
    while time.monotonic() < until and glob.glob(f"/sys/fs/cgroup/*/forkbox-sandbox/{service}-*"):
        time.sleep(0.1)
    assert not glob.glob(f"/sys/fs/cgroup/*/forkbox-sandbox/{service}-*"), "the dead service's cgroups are left"
