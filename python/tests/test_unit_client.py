"""The clients against a test double of the daemon (tests/fakedaemon.py): message
exchange, streams, errors, stdin streaming, deadlines, busy retries, autostart."""

import asyncio
import os
import signal
import socket
import sys
import threading
import time

import pytest

from fakedaemon import Conn, FakeDaemon, echo_handler
from forkbox import (
    AsyncForkbox,
    DaemonNotRunning,
    Forkbox,
    ForkboxError,
    InvalidRequest,
    ProtocolError,
    SandboxBusy,
    SandboxError,
)
from forkbox import _daemon

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def serve(sockdir):
    daemons = []

    def start(handler):
        d = FakeDaemon(os.path.join(sockdir, "fake.sock"), handler)
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop()
    for d in daemons:
        assert not d.errors, d.errors


def client(d, cls=Forkbox, **kw):
    return cls(socket=d.path, **kw)


def test_run_round_trip(serve):
    seen = {}

    def h(c: Conn):
        seen["req"] = c.request()
        c.send(b"1hel")
        c.send(b"2warn")
        c.send(b"1lo\n")
        c.result(exit_code=0, stdout_bytes=6, stderr_bytes=4, cpu_ms=0.25, peak_memory_bytes=4096)

    d = serve(h)
    r = client(d).run("echo hello", timeout_ms=1000, env={"A": "b"})
    assert seen["req"] == ("sandbox/1 run", {"argv": ["/bin/sh", "-c", "echo hello"], "timeout_ms": 1000,
                                             "env": ["A=b"]})
    assert r.stdout == "hello\n" and r.stderr == "warn" and r.ok
    assert r.duration_ms == 1.5 and r.cpu_ms == 0.25 and r.peak_memory_bytes == 4096


def test_only_given_keys_reach_the_daemon(serve):
    seen = {}

    def h(c):
        seen["req"] = c.request()[1]
        c.result()

    d = serve(h)
    client(d).run(argv=["true"])
    assert seen["req"] == {"argv": ["true"]}


def test_info(serve):
    d = serve(echo_handler)
    info = client(d).info()
    assert info["protocol"] == 1 and info["version"] == "fake"


@pytest.mark.parametrize("code,cls", [("invalid_request", InvalidRequest), ("sandbox_error", SandboxError),
                                      ("busy", SandboxBusy)])
def test_error_replies(serve, code, cls):
    def h(c):
        c.request()
        c.error(code, f"{code}: words of the daemon")

    d = serve(h)
    with pytest.raises(cls) as e:
        client(d, busy_retry_s=0).run("true")
    assert str(e.value) == f"{code}: words of the daemon" and e.value.code == code


def test_failed_command_is_a_result(serve):
    def h(c):
        c.request()
        c.send(b"2sh: nope: not found\n")
        c.result(exit_code=127, exec_error=None)

    r = client(serve(h)).run("nope")
    assert r.exit_code == 127 and not r.ok and "not found" in r.stderr


def test_close_without_final_message(serve):
    def h(c):
        c.request()
        c.send(b"1partial")

    with pytest.raises(SandboxError, match="daemon closed the connection"):
        client(serve(h)).run("true")


def test_close_without_anything(serve):
    def h(c):
        pass

    with pytest.raises(SandboxError, match="daemon closed the connection"):
        client(serve(h)).run("true")


def test_unknown_tag_is_protocol_error(serve):
    def h(c):
        c.request()
        c.send(b"Qwhat")

    with pytest.raises(ProtocolError):
        client(serve(h)).run("true")


def test_oversized_message_is_detected(serve):
    def h(c):
        c.request()
        try:
            c.send(b"1" + b"x" * (150 * 1024))
        except OSError:
            pass

    with pytest.raises(ProtocolError, match="larger than"):
        client(serve(h)).run("true")


def test_stdin_is_streamed_in_chunks(serve):
    got = {}

    def h(c):
        got["req"] = c.request()[1]
        msgs = []
        while True:
            m = c.recv()
            msgs.append(m)
            if m in (b"E", b""):
                break
        got["msgs"] = msgs
        c.result()

    data = os.urandom(200_000)
    client(serve(h)).run(argv=["cat"], stdin=data)
    assert got["req"]["stdin"] is True
    msgs = got["msgs"]
    assert msgs[-1] == b"E" and all(len(m) <= 65537 and m[:1] == b"I" for m in msgs[:-1])
    assert b"".join(m[1:] for m in msgs[:-1]) == data


def test_stdin_str_is_utf8(serve):
    got = {}

    def h(c):
        c.request()
        got["data"] = c.read_stdin()
        c.result()

    client(serve(h)).run("cat", stdin="héllo")
    assert got["data"] == "héllo".encode()


def echo_stdin_handler(c):
    """Echoes each I chunk as a 1 message before reading the next: a client that sends all
    its stdin before reading would deadlock against it (both sides' buffers fill)."""
    c.request()
    while True:
        m = c.recv(30)
        if not m or m == b"E":
            break
        c.send(b"1" + m[1:])
    c.result()


def test_large_stdin_with_concurrent_output_does_not_deadlock(serve):
    data = os.urandom(8 << 20)
    r = client(serve(echo_stdin_handler), request_timeout_s=60).run(argv=["cat"], stdin=data)
    assert r.stdout_bytes == data


def test_async_large_stdin_with_concurrent_output(serve):
    d = serve(echo_stdin_handler)
    data = os.urandom(8 << 20)
    r = asyncio.run(client(d, AsyncForkbox, request_timeout_s=60).run(argv=["cat"], stdin=data))
    assert r.stdout_bytes == data


def test_error_while_client_still_sends_stdin(serve):
    def h(c):
        c.request()
        c.recv()  # one chunk, then refuse and close with the rest unread
        c.error("invalid_request", "run: stdin refused")

    with pytest.raises(InvalidRequest, match="stdin refused"):
        client(serve(h)).run("cat", stdin=b"x" * (4 << 20))


def test_async_error_while_client_still_sends_stdin(serve):
    def h(c):
        c.request()
        c.recv()
        c.error("invalid_request", "run: stdin refused")

    with pytest.raises(InvalidRequest, match="stdin refused"):
        asyncio.run(client(serve(h), AsyncForkbox).run("cat", stdin=b"x" * (4 << 20)))


def silent_handler(closed):
    def h(c):
        c.request()
        # Wait for the client's close (recv gives b"").
        while c.recv(30):
            pass
        closed.set()

    return h


def test_client_deadline_closes_the_connection(serve):
    closed = threading.Event()
    d = serve(silent_handler(closed))
    with pytest.raises(SandboxError, match="no final message"):
        client(d, timeout_grace_s=0.2).run("sleep 100", timeout_ms=100)
    assert closed.wait(10)


def test_async_client_deadline_closes_the_connection(serve):
    closed = threading.Event()
    d = serve(silent_handler(closed))
    with pytest.raises(SandboxError, match="no final message"):
        asyncio.run(client(d, AsyncForkbox, timeout_grace_s=0.2).run("sleep 100", timeout_ms=100))
    assert closed.wait(10)


def test_request_timeout_caps_everything(serve):
    closed = threading.Event()
    d = serve(silent_handler(closed))
    with pytest.raises(SandboxError, match="no final message"):
        client(d, request_timeout_s=0.3).run("sleep 100")
    with pytest.raises(SandboxError):
        client(d, request_timeout_s=0.3).info()


def busy_then_ok(n_busy):
    count = {"n": 0}
    lock = threading.Lock()

    def h(c):
        c.request()
        with lock:
            count["n"] += 1
            n = count["n"]
        if n <= n_busy:
            c.error("busy", "too many sandboxes")
        else:
            c.send(b"1ok")
            c.result()

    return h, count


def test_busy_is_retried(serve):
    h, count = busy_then_ok(3)
    r = client(serve(h)).run("true")
    assert r.stdout == "ok" and count["n"] == 4


def test_busy_retry_resends_stdin(serve):
    count = {"n": 0}

    def h(c):
        c.request()
        count["n"] += 1
        if count["n"] == 1:
            c.error("busy", "later")
            return
        c.send(b"1" + c.read_stdin())
        c.result()

    r = client(serve(h)).run("cat", stdin=b"abc")
    assert r.stdout == "abc"


def test_async_busy_is_retried(serve):
    h, count = busy_then_ok(2)
    r = asyncio.run(client(serve(h), AsyncForkbox).run("true"))
    assert r.stdout == "ok" and count["n"] == 3


def test_busy_gives_up(serve):
    h, _ = busy_then_ok(10**9)
    with pytest.raises(SandboxBusy):
        client(serve(h), busy_retry_s=0.2).run("true")


def test_async_many_concurrent_runs(serve):
    d = serve(echo_handler)

    async def main():
        c = AsyncForkbox(socket=d.path)
        return await asyncio.gather(*(c.run(argv=["echo", str(i)]) for i in range(100)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == [f"echo {i}" for i in range(100)]


def test_threads_share_a_client(serve):
    d = serve(echo_handler)
    c = Forkbox(socket=d.path)
    out = [None] * 50

    def work(i):
        out[i] = c.run(argv=["echo", str(i)]).stdout

    ts = [threading.Thread(target=work, args=(i,)) for i in range(50)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert out == [f"echo {i}" for i in range(50)]


def test_async_class_level_call(serve, clean_env):
    d = serve(echo_handler)
    clean_env.setenv("FORKBOX_SOCKET", d.path)
    r = asyncio.run(AsyncForkbox.run(argv=["x"]))
    assert r.stdout == "x"
    assert asyncio.run(AsyncForkbox.info())["version"] == "fake"
    assert Forkbox.run(argv=["y"]).stdout == "y"
    assert Forkbox.info()["version"] == "fake"


def test_async_info_and_errors(serve):
    def h(c):
        verb, _ = c.request()
        if verb.endswith("info"):
            c.send(b'X{"protocol":1}')
        else:
            c.error("sandbox_error", "no cgroup")

    d = serve(h)
    c = AsyncForkbox(socket=d.path)
    assert asyncio.run(c.info()) == {"protocol": 1}
    with pytest.raises(SandboxError, match="no cgroup"):
        asyncio.run(c.run("true"))


def test_async_close_without_final_message(serve):
    def h(c):
        c.request()

    with pytest.raises(SandboxError, match="daemon closed the connection"):
        asyncio.run(client(serve(h), AsyncForkbox).run("true"))


# Kept connections (the keep verb) ---------------------------------------------------------

def test_calls_share_one_kept_connection(serve):
    d = serve(echo_handler)
    c = client(d)
    assert [c.run(argv=["echo", str(i)]).stdout for i in range(5)] == [f"echo {i}" for i in range(5)]
    assert c.info()["version"] == "fake"
    assert len(d.conns) == 1 and d.keeps == 1


def test_async_calls_share_kept_connections(serve):
    d = serve(echo_handler)

    async def main():
        c = client(d, AsyncForkbox)
        first = [(await c.run(argv=["echo", str(i)])).stdout for i in range(3)]
        assert len(d.conns) == 1 and d.keeps == 1
        together = await asyncio.gather(*(c.run(argv=["echo", str(i)]) for i in range(3)))
        return first + [r.stdout for r in together]

    assert asyncio.run(main()) == [f"echo {i}" for i in (0, 1, 2, 0, 1, 2)]
    # Calls at once take a connection each (as many as overlapped).
    assert len(d.conns) <= 3 and d.keeps == len(d.conns)


def test_a_daemon_without_keep_serves_every_request_once(serve):
    requests = []

    def h(c):
        verb, req = c.request()
        requests.append(req["argv"])
        c.send(b"1" + req["argv"][0].encode())
        c.result()

    d = serve(h)
    d.keep = False
    c = client(d)
    assert [c.run(argv=[str(i)]).stdout for i in range(3)] == ["0", "1", "2"]
    assert requests == [["0"], ["1"], ["2"]]
    # The refused keep cost the first call one connection; the client stopped asking.
    assert len(d.conns) == 4 and d.keeps == 0


def test_a_keep_refused_for_a_moment_is_asked_again(serve):
    # A daemon whose sandbox service is down answers every sandbox request, keep included,
    # with a sandbox_error and closes: the call gets that error; a later call asks again.
    down = [True]

    def h(c):
        first = c.recv()
        if down[0]:
            c.error("sandbox_error", "the daemon's sandbox service is not running (see its log)")
            c.close()
            return
        c.unread(first)
        echo_handler(c)

    d = serve(h)
    d.keep = None  # the handler sees keep itself
    c = client(d)
    with pytest.raises(SandboxError, match="service is not running"):
        c.run(argv=["a"])
    assert not c._keep_refused
    down[0] = False
    d.keep = True
    assert c.run(argv=["b"]).stdout == "b"
    assert c.run(argv=["c"]).stdout == "c"
    assert d.keeps == 1
    down[0], d.keep = True, None
    with pytest.raises(SandboxError, match="service is not running"):
        asyncio.run(client(d, AsyncForkbox).run(argv=["d"]))


def test_keep_connections_false_connects_per_call(serve):
    d = serve(echo_handler)
    c = client(d, keep_connections=False)
    for _ in range(3):
        c.run("true")
    assert len(d.conns) == 3 and d.keeps == 0
    with pytest.raises(InvalidRequest, match="keep_connections"):
        Forkbox(socket=d.path, keep_connections=1)


def test_a_kept_connection_the_daemon_closed_is_not_used(serve):
    def h(c):
        echo_handler(c)
        c.close()  # as a daemon that restarts between two calls

    d = serve(h)
    c = client(d)
    assert c.run(argv=["a"]).stdout == "a"
    time.sleep(0.1)
    assert c.run(argv=["b"]).stdout == "b"
    assert len(d.conns) == 2


def test_kept_connections_beyond_fd_1024_are_used(serve):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip("RLIMIT_NOFILE below 1100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    fillers = []
    try:
        while True:
            fd = os.open("/dev/null", os.O_RDONLY)
            fillers.append(fd)
            if fd >= 1030:
                break
        d = serve(echo_handler)
        c = client(d)
        for i in range(3):
            assert c.run(argv=[str(i)]).stdout == str(i)
        assert len(d.conns) == 1
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_call_that_failed_does_not_give_its_connection_back(serve):
    def h(c):
        try:
            echo_handler(c)
        except BrokenPipeError:  # the client closed at its callback's error
            c.close()

    d = serve(h)
    c = client(d)

    def boom(data):
        raise RuntimeError("callback")

    s = c.connect("sb-00112233445566778899aabbccddeeff")
    with pytest.raises(RuntimeError, match="callback"):
        s.run(argv=["x"], on_stdout=boom)
    assert c.run(argv=["y"]).stdout == "y"
    assert len(d.conns) == 2


def test_stdin_left_unsent_at_the_end_does_not_reach_the_next_request(serve):
    def h(c):
        verb, req = c.request()
        if req.get("stdin"):
            c.recv()  # one chunk, then the end before the rest was read
            c.error("sandbox_error", "stopped reading")
            return
        echo_handler_run(c, req)

    d = serve(h)
    c = client(d)
    with pytest.raises(SandboxError, match="stopped reading"):
        c.run("cat", stdin=b"x" * (1 << 20))
    assert c.run(argv=["next"]).stdout == "next"


def echo_handler_run(c, req):
    c.send(b"1" + " ".join(req["argv"]).encode())
    c.result(exit_code=0)


def test_a_forked_child_does_not_use_its_parents_connection(serve):
    d = serve(echo_handler)
    c = client(d)
    assert c.run(argv=["parent"]).stdout == "parent"
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = c.run(argv=["child"]).stdout == "child"
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert c.run(argv=["parent again"]).stdout == "parent again"
    assert len(d.conns) == 2


def test_class_level_calls_share_the_default_client(serve, clean_env):
    d = serve(echo_handler)
    clean_env.setenv("FORKBOX_SOCKET", d.path)
    assert Forkbox.run(argv=["x"]).stdout == "x"
    assert Forkbox.run(argv=["y"]).stdout == "y"
    assert len(d.conns) == 1


def test_default_clients_are_few(sockdir, clean_env):
    from forkbox import client as client_module

    made = []
    for i in range(client_module._MAX_DEFAULT_CLIENTS + 1):
        clean_env.setenv("FORKBOX_SOCKET", os.path.join(sockdir, f"{i}.sock"))
        made.append(client_module._default_client(Forkbox))
        assert client_module._default_client(Forkbox) is made[-1]
    assert len(client_module._DEFAULT_CLIENTS) <= client_module._MAX_DEFAULT_CLIENTS
    assert made[0] not in client_module._DEFAULT_CLIENTS.values()  # the oldest went


def test_close_closes_the_idle_connections(serve):
    d = serve(echo_handler)
    c = client(d)
    c.run("true")
    c.close()
    deadline = time.monotonic() + 5
    while not d.conns[0].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert d.conns[0].closed  # the fake daemon saw the client's close
    c.run("true")
    assert len(d.conns) == 2
    with client(d) as c2:
        c2.run("true")
    assert c2._idle.take() is None

    async def main():
        async with client(d, AsyncForkbox) as c3:
            await c3.run("true")
        return c3

    assert asyncio.run(main())._idle.take() is None


def test_invalid_arguments_never_connect(serve):
    d = serve(echo_handler)
    with pytest.raises(InvalidRequest):
        client(d).run("true", argv=["true"])
    with pytest.raises(InvalidRequest):
        client(d).run()
    with pytest.raises(InvalidRequest):
        asyncio.run(client(d, AsyncForkbox).run(argv="true"))
    time.sleep(0.1)
    assert d.conns == []


# DaemonNotRunning --------------------------------------------------------------------------


def test_daemon_not_running_missing_socket(sockdir):
    path = os.path.join(sockdir, "missing.sock")
    for call in (lambda: Forkbox(socket=path, autostart=False).run("true"),
                 lambda: asyncio.run(AsyncForkbox(socket=path, autostart=False).run("true")),
                 lambda: Forkbox(socket=path).info()):
        with pytest.raises(DaemonNotRunning) as e:
            call()
        msg = str(e.value)
        assert path in msg and "forkbox daemon" in msg and e.value.socket_path == path
        assert isinstance(e.value, ForkboxError)


def test_daemon_not_running_stale_socket(sockdir):
    path = os.path.join(sockdir, "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path)
    s.close()  # the file stays, nobody listens: ECONNREFUSED
    with pytest.raises(DaemonNotRunning, match="refused"):
        Forkbox(socket=path, autostart=False).run("true")


def test_autostart_without_binary(sockdir, clean_env):
    clean_env.setenv("FORKBOX_BIN", os.path.join(sockdir, "no-such-binary"))
    path = os.path.join(sockdir, "a.sock")
    with pytest.raises(DaemonNotRunning, match="no forkbox binary"):
        Forkbox(socket=path, autostart=True).run("true")


# Autostart with the test double as the binary ---------------------------------------------


@pytest.fixture
def fake_binary(sockdir, clean_env):
    exe = os.path.join(sockdir, "forkbox")
    with open(exe, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.join(TESTS, 'fakedaemon.py')} \"$@\"\n")
    os.chmod(exe, 0o755)
    clean_env.setenv("FORKBOX_BIN", exe)
    started = []
    yield exe, started
    for path in started:
        try:
            with open(path + ".starts") as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def pids_started(path):
    with open(path + ".starts") as f:
        return [int(x) for x in f.read().split()]


def test_autostart_starts_one_daemon(sockdir, fake_binary):
    _, started = fake_binary
    path = os.path.join(sockdir, "run", "forkbox", "forkbox.sock")  # directory made by autostart
    started.append(path)
    r = Forkbox(socket=path, autostart=True).run(argv=["hello"])
    assert r.stdout == "hello"
    assert len(pids_started(path)) == 1
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    assert os.path.exists(os.path.join(os.path.dirname(path), "forkbox-daemon.log"))
    # A second call finds it running.
    assert Forkbox(socket=path, autostart=True).run(argv=["again"]).stdout == "again"
    assert len(pids_started(path)) == 1


def test_autostart_for_the_default_socket(sockdir, fake_binary, monkeypatch):
    _, started = fake_binary
    path = os.path.join(sockdir, "d", "forkbox.sock")
    started.append(path)
    monkeypatch.setattr("forkbox._daemon.default_socket_path", lambda env=None: path)
    c = Forkbox()
    assert c.socket_is_default and c.autostart
    assert c.info()["version"] == "fake"


def test_autostart_concurrent_callers_start_one_daemon(sockdir, fake_binary):
    _, started = fake_binary
    path = os.path.join(sockdir, "c.sock")
    started.append(path)
    c = Forkbox(socket=path, autostart=True)
    out = []

    def work(i):
        out.append(c.run(argv=[str(i)]).stdout)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sorted(out) == sorted(str(i) for i in range(8))
    assert len(pids_started(path)) == 1


def test_async_autostart(sockdir, fake_binary):
    _, started = fake_binary
    path = os.path.join(sockdir, "as.sock")
    started.append(path)
    r = asyncio.run(AsyncForkbox(socket=path, autostart=True).run(argv=["hi"]))
    assert r.stdout == "hi"


def test_autostart_daemon_that_dies(sockdir, clean_env):
    exe = os.path.join(sockdir, "forkbox")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\necho 'cannot start: test' >&2\nexit 3\n")
    os.chmod(exe, 0o755)
    clean_env.setenv("FORKBOX_BIN", exe)
    with pytest.raises(DaemonNotRunning) as e:
        Forkbox(socket=os.path.join(sockdir, "x.sock"), autostart=True).run("true")
    assert "status 3" in str(e.value) and "cannot start: test" in str(e.value)


def test_env_opt_out(sockdir, fake_binary, clean_env):
    clean_env.setenv("FORKBOX_NO_AUTOSTART", "1")
    path = os.path.join(sockdir, "o.sock")
    with pytest.raises(DaemonNotRunning, match="autostart is off"):
        Forkbox(socket=path, autostart=True).run("true")
    assert not os.path.exists(path + ".starts")


# Autostart in a systemd scope ---------------------------------------------------------------


def user_manager_env(sockdir, clean_env, systemd_run_body=None):
    """An environment whose XDG_RUNTIME_DIR has a user manager's private socket file, and
    a fake ``systemd-run`` on PATH (``systemd_run_body``: its shell script) when given."""
    runtime = os.path.join(sockdir, "xdg")
    os.makedirs(os.path.join(runtime, "systemd"))
    open(os.path.join(runtime, "systemd", "private"), "w").close()
    bindir = os.path.join(sockdir, "bin")
    os.makedirs(bindir)
    if systemd_run_body is not None:
        tool = os.path.join(bindir, "systemd-run")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\n" + systemd_run_body)
        os.chmod(tool, 0o755)
    clean_env.setenv("XDG_RUNTIME_DIR", runtime)
    clean_env.setenv("PATH", bindir + ":/usr/bin:/bin")
    clean_env.delenv("FORKBOX_NO_SCOPE", raising=False)
    return bindir


def test_scope_launcher_only_for_a_user_whose_systemd_runs(sockdir, clean_env):
    bindir = user_manager_env(sockdir, clean_env, "exit 0\n")
    tool = os.path.join(bindir, "systemd-run")
    assert _daemon.scope_launcher(euid=1000) == [
        tool, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]
    assert _daemon.scope_launcher(euid=0) == []  # root's daemon: cgroups of its own already
    env = dict(os.environ)
    assert _daemon.scope_launcher({**env, "FORKBOX_NO_SCOPE": "1"}, euid=1000) == []
    assert _daemon.scope_launcher({**env, "FORKBOX_NO_SCOPE": "0"}, euid=1000) != []
    assert _daemon.scope_launcher({**env, "XDG_RUNTIME_DIR": sockdir}, euid=1000) == []  # no manager
    assert _daemon.scope_launcher({k: v for k, v in env.items() if k != "XDG_RUNTIME_DIR"}, euid=1000) == []
    assert _daemon.scope_launcher({**env, "PATH": "/nonexistent"}, euid=1000) == []  # no systemd-run


def as_a_user(monkeypatch):
    real = _daemon.scope_launcher
    monkeypatch.setattr(_daemon, "scope_launcher", lambda environ=None, euid=None: real(environ, 1000))


def test_autostart_runs_a_users_daemon_in_a_delegated_scope(sockdir, fake_binary, clean_env, monkeypatch):
    _, started = fake_binary
    # systemd-run with --scope runs the command itself once the scope holds it.
    user_manager_env(sockdir, clean_env, f'echo "$@" > {sockdir}/systemd-run.args\n'
                                         'while [ "$1" != "--" ]; do shift; done; shift\nexec "$@"\n')
    as_a_user(monkeypatch)
    path = os.path.join(sockdir, "scoped.sock")
    started.append(path)
    assert Forkbox(socket=path, autostart=True).run(argv=["scoped"]).stdout == "scoped"
    with open(os.path.join(sockdir, "systemd-run.args")) as f:
        args = f.read().split()
    assert args[:7] == ["--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"], args
    assert args[8:] == ["daemon", "--socket", path], args
    assert len(pids_started(path)) == 1


def test_autostart_without_a_scope_when_systemd_cannot_make_one(sockdir, fake_binary, clean_env, monkeypatch):
    _, started = fake_binary
    user_manager_env(sockdir, clean_env, 'echo "Failed to connect to bus: No medium found" >&2\nexit 1\n')
    as_a_user(monkeypatch)
    path = os.path.join(sockdir, "plain.sock")
    started.append(path)
    assert Forkbox(socket=path, autostart=True).run(argv=["plain"]).stdout == "plain"
    assert len(pids_started(path)) == 1
    with open(os.path.join(sockdir, "forkbox-daemon.log")) as f:
        assert "Failed to connect to bus" in f.read()
