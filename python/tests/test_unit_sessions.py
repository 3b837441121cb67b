"""The session API against a test double of the daemon (tests/fakedaemon.py): what each
call sends, how answers and errors are decoded, what is refused before sending."""

import asyncio
import errno
import inspect
import json
import os

import pytest

from fakedaemon import Conn, FakeDaemon
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
    ProtocolError,
    RunResult,
    Sandbox,
    SandboxBusy,
    SandboxClosed,
    SandboxError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxFileTimeoutError,
    SandboxInfo,
    SandboxIsADirectoryError,
    SandboxNotADirectoryError,
    SandboxPermissionError,
)
from forkbox._protocol import build_create_request, sandbox_path
from forkbox.errors import error_from_reply

SID = "sb-0123456789abcdef"


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


def recording(answer):
    """A handler that records (verb, request, later messages) and answers with
    ``answer(conn, verb, request)``."""
    seen = []

    def h(c: Conn):
        verb, req = c.request()
        entry = {"verb": verb, "req": req, "more": []}
        seen.append(entry)
        answer(c, verb, req, entry)

    return h, seen


def ok(c, verb, req, entry):
    if verb == "sandbox/1 create":
        c.send(b"X" + json.dumps({"session": SID, "limits": {"memory": "cgroup"}, "ms": 0.4}).encode())
    elif verb == "sandbox/1 file" and req.get("op") == "write":
        entry["more"] = _read_until_e(c)
        c.send(b'X{"ok":true,"bytes":0}')
    elif verb == "sandbox/1 fork":
        c.send(b"X" + json.dumps({"sessions": [f"sb-child{i}" for i in range(req["count"])], "ms": 1}).encode())
    elif verb == "sandbox/1 run":
        c.result(exit_code=0)
    else:
        c.send(b'X{"ok":true}')


def _read_until_e(c):
    out = []
    while True:
        m = c.recv()
        out.append(m)
        if not m or m == b"E":
            return out


# Requests ---------------------------------------------------------------------------------


def test_create_sends_only_the_keys_given(serve):
    h, seen = recording(ok)
    d = serve(h)
    s = Forkbox(socket=d.path).create()
    assert seen[0]["verb"] == "sandbox/1 create" and seen[0]["req"] == {}
    assert isinstance(s, Sandbox) and s.id == SID and s.limits == {"memory": "cgroup"} and not s.closed
    Forkbox(socket=d.path).create(memory_mb=64, pids=8, cpus=0.5, network=True, mounts=[("/srv", "/data", "rw")],
                                  caps=[], timeout_ms=100, ttl_s=60, idle_s=30)
    assert seen[1]["req"] == {"memory_mb": 64, "pids": 8, "cpus": 0.5, "network": True,
                              "mounts": [{"source": "/srv", "destination": "/data", "mode": "rw"}], "caps": [],
                              "timeout_ms": 100, "ttl_s": 60, "idle_s": 30}


@pytest.mark.parametrize("kwargs", [{"ttl_s": 0}, {"ttl_s": 1.5}, {"idle_s": True}, {"idle_s": -1},
                                    {"ttl_s": 2_592_001}, {"timeout_ms": 0}, {"memory_mb": "1"},
                                    {"mounts": "/x"}, {"network": 1}])
def test_create_arguments_are_checked_before_connecting(kwargs):
    with pytest.raises(InvalidRequest):
        build_create_request(**kwargs)
    with pytest.raises(InvalidRequest):
        Forkbox(socket="/nonexistent/x.sock", autostart=False).create(**kwargs)


def test_class_level_session_calls_have_no_self():
    for m in (Forkbox.create, Forkbox.connect, Forkbox.sandboxes, AsyncForkbox.create, AsyncForkbox.connect,
              AsyncForkbox.sandboxes):
        assert "self" not in inspect.signature(m).parameters, m
    assert inspect.iscoroutinefunction(AsyncForkbox.sandboxes)


def test_run_in_a_session_sends_the_session_and_the_command_keys(serve):
    h, seen = recording(ok)
    d = serve(h)
    s = Forkbox(socket=d.path).connect(SID)
    s.run("echo hi", timeout_ms=50, env={"A": "b"}, cwd="/tmp", max_output=10, stdin=b"in")
    assert seen[0]["verb"] == "sandbox/1 run"
    assert seen[0]["req"] == {"session": SID, "argv": ["/bin/sh", "-c", "echo hi"], "timeout_ms": 50,
                              "env": ["A=b"], "cwd": "/tmp", "max_output": 10, "stdin": True}
    with pytest.raises(TypeError):
        s.run("true", memory_mb=5)  # the session's, not a run's


def test_file_verbs_requests(serve):
    h, seen = recording(ok)
    d = serve(h)
    s = Forkbox(socket=d.path).connect(SID)
    s.write_file("/work/a", b"\x00" * 70_000 + b"\xff", mode=0o600)
    s.remove("/work/a", recursive=True)
    s.mkdir("/work/d", parents=False, mode=0o700)
    s.pause()
    s.resume()
    reqs = [(e["verb"], e["req"]) for e in seen]
    assert reqs == [
        ("sandbox/1 file", {"session": SID, "op": "write", "path": "/work/a", "mode": 0o600}),
        ("sandbox/1 file", {"session": SID, "op": "remove", "path": "/work/a", "recursive": True}),
        ("sandbox/1 file", {"session": SID, "op": "mkdir", "path": "/work/d", "recursive": False, "mode": 0o700}),
        ("sandbox/1 pause", {"session": SID}),
        ("sandbox/1 resume", {"session": SID}),
    ]
    # The data: I messages of at most 64 KiB, then E.
    more = seen[0]["more"]
    assert [m[:1] for m in more] == [b"I", b"I", b"E"] and b"".join(m[1:] for m in more[:-1]) == b"\x00" * 70_000 + b"\xff"


def test_read_list_stat_diff_decoding_and_rename(serve):
    def answer(c, verb, req, entry):
        op = req.get("op")
        if op == "read":
            c.send(b"1\x00\xff")
            c.send(b"1more")
            c.send(b'X{"ok":true,"bytes":6}')
        elif op == "list":
            c.send(b"1" + json.dumps([{"name": "f", "type": "file", "size": 3, "mode": 420, "mtime": 1.5},
                                      {"name": "d", "type": "dir", "size": 0, "mode": 493, "mtime": 2}]).encode())
            c.send(b'X{"ok":true}')
        elif op == "rename":
            c.send(b'X{"ok":true}')
        elif op == "stat":
            c.send(b"1" + json.dumps({"name": "f", "type": "file", "size": 3, "mode": 420, "mtime": 1.5}).encode())
            c.send(b'X{"ok":true}')
        elif op == "diff":
            c.send(b"1" + json.dumps([{"path": "/a", "change": "created", "type": "file", "size": 1},
                                      {"path": "/b", "change": "deleted", "type": "file", "size": 0}]).encode())
            c.send(b'X{"ok":true}')
        elif verb == "sandbox/1 list":
            c.send(b"X" + json.dumps({"sessions": [{"id": SID, "parent": None, "age_s": 1.5, "idle_s": 0.5,
                                                    "ttl_s": 600, "idle_timeout_s": 600, "running": 1,
                                                    "served": 3, "paused": False, "memory_mb": 512,
                                                    "pids": 256, "network": False}]}).encode())

    h, seen = recording(answer)
    d = serve(h)
    fb = Forkbox(socket=d.path)
    s = fb.connect(SID)
    assert s.read_file("/f") == b"\x00\xffmore"
    assert s.list("/work/") == [FileInfo("f", "/work/f", "file", 3, 0o644, 1.5),
                                FileInfo("d", "/work/d", "dir", 0, 0o755, 2.0)]
    assert s.diff() == [Change("/a", "created", "file", 1), Change("/b", "deleted", "file", 0)]
    assert "path" not in seen[2]["req"]
    (info,) = fb.sandboxes()
    assert info == SandboxInfo(SID, None, 1.5, 0.5, 600, 600, 1, 3, False, 512, 256, False)
    assert seen[3]["verb"] == "sandbox/1 list" and seen[3]["req"] == {}
    assert s.stat("/work//f") == FileInfo("f", "/work/f", "file", 3, 0o644, 1.5)
    assert seen[4]["req"] == {"session": SID, "op": "stat", "path": "/work//f"}  # the daemon cleans it
    s.rename("/a/", "/b//c")
    assert seen[5]["req"] == {"session": SID, "op": "rename", "path": "/a/", "to": "/b//c"}


def test_fork_gives_sandboxes_of_the_same_client(serve):
    h, seen = recording(ok)
    d = serve(h)
    fb = Forkbox(socket=d.path)
    s = fb.create(timeout_ms=123)
    kids = s.fork(3)
    assert seen[1]["req"] == {"session": SID, "count": 3}
    assert [k.id for k in kids] == ["sb-child0", "sb-child1", "sb-child2"]
    assert all(k.client is fb and k.parent == SID and k.timeout_ms == 123 and k.limits == s.limits for k in kids)


def test_a_fork_reply_without_ids_is_a_protocol_error(serve):
    d = serve(lambda c: (c.request(), c.send(b'X{"sessions":[1]}')))
    with pytest.raises(ProtocolError):
        Forkbox(socket=d.path).connect(SID).fork()


@pytest.mark.parametrize("path", ["relative", "", "/a/../b", "/..", "/x\0y", 5, b"/bytes"])
def test_bad_paths_are_refused_before_sending(path):
    with pytest.raises(InvalidRequest):
        sandbox_path(path)
    s = Forkbox(socket="/nonexistent/x.sock", autostart=False).connect(SID)
    with pytest.raises(InvalidRequest):
        s.read_file(path)


def test_dots_that_are_not_a_component_are_paths():
    assert sandbox_path("/a/..b/c..") == "/a/..b/c.." and sandbox_path("/./x") == "/./x"


# Errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("number,cls,builtin", [
    (errno.ENOENT, SandboxFileNotFoundError, FileNotFoundError),
    (errno.EEXIST, SandboxFileExistsError, FileExistsError),
    (errno.EISDIR, SandboxIsADirectoryError, IsADirectoryError),
    (errno.ENOTDIR, SandboxNotADirectoryError, NotADirectoryError),
    (errno.EACCES, SandboxPermissionError, PermissionError),
    (errno.EPERM, SandboxPermissionError, PermissionError),
    (errno.ETIMEDOUT, SandboxFileTimeoutError, TimeoutError),
    (errno.ENOTEMPTY, FileError, OSError),
    (errno.ELOOP, FileError, OSError),
])
def test_file_error_mapping(number, cls, builtin):
    e = error_from_reply({"error": "file_error", "errno": number, "message": "/w/x: open: why"}, path="/w/x")
    assert type(e) is cls and isinstance(e, builtin) and isinstance(e, FileError) and isinstance(e, ForkboxError)
    assert (e.errno, e.filename, e.strerror, e.code, str(e)) == (number, "/w/x", os.strerror(number), "file_error",
                                                                  "/w/x: open: why")
    # As Python's own: the same class for the same errno.
    assert isinstance(e, type(OSError(number, "x")))


def test_file_error_filename_from_the_message():
    e = error_from_reply({"error": "file_error", "errno": 2, "message": "/a b/c: open: No such file"})
    assert e.filename == "/a b/c"


@pytest.mark.parametrize("bad", [None, "2", 0, True])
def test_file_error_without_errno_is_a_protocol_error(bad):
    assert isinstance(error_from_reply({"error": "file_error", "errno": bad, "message": "m"}), ProtocolError)


def test_no_such_sandbox_is_sandbox_closed_with_its_reason():
    e = error_from_reply({"error": "no_such_sandbox",
                          "message": f"the sandbox {SID} has ended: expired (its ttl of 2 s)"})
    assert type(e) is SandboxClosed and isinstance(e, SandboxError)
    assert (e.sandbox_id, e.reason, e.code) == (SID, "expired (its ttl of 2 s)", "no_such_sandbox")
    e = error_from_reply({"error": "no_such_sandbox", "message": 'no sandbox "sb-1" here'}, sandbox_id="sb-1")
    assert (e.sandbox_id, e.reason) == ("sb-1", None)


def test_sandbox_closed_marks_the_session_and_later_calls_send_nothing(serve):
    d = serve(lambda c: (c.request(), c.error("no_such_sandbox", f"the sandbox {SID} has ended: idle for 600 s")))
    s = Forkbox(socket=d.path).connect(SID)
    with pytest.raises(SandboxClosed, match="idle for 600 s"):
        s.read_file("/x")
    assert s.closed and "idle" in repr(s)
    with pytest.raises(SandboxClosed, match="idle for 600 s") as e:
        s.run("true")
    assert e.value.reason == "idle for 600 s"
    assert len(d.conns) == 1  # the second call was refused here
    s.close()  # an ended session: nothing to do
    assert len(d.conns) == 1


def test_close_is_idempotent_and_accepts_an_ended_session(serve):
    h, seen = recording(lambda c, v, r, e: c.error("no_such_sandbox", "no sandbox here"))
    d = serve(h)
    s = Forkbox(socket=d.path).connect(SID)
    s.close()
    s.close()
    assert [e["verb"] for e in seen] == ["sandbox/1 close"] and s.closed


def test_context_manager_closes(serve):
    h, seen = recording(ok)
    d = serve(h)
    with Forkbox(socket=d.path).create() as s:
        pass
    assert [e["verb"] for e in seen] == ["sandbox/1 create", "sandbox/1 close"] and s.closed


# Streaming and processes ------------------------------------------------------------------


def test_stream_retries_busy_then_yields_chunks_and_the_result(serve):
    calls = []

    def h(c):
        c.request()
        calls.append(1)
        if len(calls) == 1:
            c.error("busy", "too many")
            return
        c.send(b"1a")
        c.send(b"2b")
        c.send(b"1")  # an empty data message is not a chunk
        c.result(exit_code=3)

    d = serve(h)
    events = list(Forkbox(socket=d.path).connect(SID).stream("x"))
    assert events[:2] == [OutputChunk("stdout", b"a"), OutputChunk("stderr", b"b")]
    assert isinstance(events[2], RunResult) and events[2].exit_code == 3 and len(events) == 3
    assert len(calls) == 2


def test_stream_checks_arguments_at_the_call():
    s = Forkbox(socket="/nonexistent/x.sock", autostart=False).connect(SID)
    with pytest.raises(InvalidRequest):
        s.stream()  # neither cmd nor argv


def test_process_messages(serve):
    got = []

    def h(c):
        c.request()
        while True:
            m = c.recv()
            got.append(m)
            if m.startswith(b"K"):
                c.send(b"1out")
                c.result(exit_code=143, signal=15)
                return

    d = serve(h)
    p = Forkbox(socket=d.path).connect(SID).spawn("cat", on_stdout=lambda b: got.append(("cb", b)))
    p.write(b"x" * 70_000)
    p.write("")  # nothing to send
    p.close_stdin()
    p.kill(15)
    r = p.wait(10)
    assert r.signal == 15 and r.stdout == "out"
    msgs = [m for m in got if isinstance(m, bytes)]
    assert [m[:1] for m in msgs] == [b"I", b"I", b"E", b"K"] and msgs[-1] == b"K15"
    assert ("cb", b"out") in got
    with pytest.raises(InvalidRequest):
        p.kill(0)


def test_spawn_request_opens_stdin(serve):
    h, seen = recording(lambda c, v, r, e: c.result(exit_code=0))
    d = serve(h)
    Forkbox(socket=d.path).connect(SID).spawn(argv=["cat"]).wait(10)
    assert seen[0]["req"] == {"session": SID, "argv": ["cat"], "stdin": True}


def test_callbacks_must_be_callable():
    s = Forkbox(socket="/nonexistent/x.sock", autostart=False).connect(SID)
    with pytest.raises(InvalidRequest):
        s.run("true", on_stdout="print")


def test_busy_create_is_retried(serve):
    calls = []

    def h(c):
        c.request()
        calls.append(1)
        if len(calls) < 3:
            c.error("busy", "too many")
        else:
            c.send(b"X" + json.dumps({"session": SID}).encode())

    d = serve(h)
    assert Forkbox(socket=d.path).create().id == SID and len(calls) == 3
    calls.clear()
    with pytest.raises(SandboxBusy):
        Forkbox(socket=d.path, busy_retry_s=0).create()


# asyncio ----------------------------------------------------------------------------------


def test_async_create_is_awaitable_and_a_context_manager(serve):
    h, seen = recording(ok)
    d = serve(h)

    async def main():
        c = AsyncForkbox(socket=d.path)
        s = await c.create(ttl_s=5)
        assert isinstance(s, AsyncSandbox) and s.id == SID
        async with c.create() as s2:
            assert (await s2.run("true")).ok
        assert s2.closed and not s.closed
        await s.close()
        return [e["verb"] for e in seen]

    assert asyncio.run(main()) == ["sandbox/1 create", "sandbox/1 create", "sandbox/1 run", "sandbox/1 close",
                                   "sandbox/1 close"]


def test_async_stream_and_process(serve):
    def h(c):
        verb, req = c.request()
        if req.get("stdin"):
            data = c.read_stdin()
            c.send(b"1" + data)
        else:
            c.send(b"1a")
            c.send(b"2b")
        c.result(exit_code=0)

    d = serve(h)

    async def main():
        s = AsyncForkbox(socket=d.path).connect(SID)
        events = [ev async for ev in s.stream("x")]
        p = await s.spawn("cat")
        await p.write(b"\x00\xff")
        await p.close_stdin()
        return events, await p.wait(10)

    events, r = asyncio.run(main())
    assert events[:2] == [OutputChunk("stdout", b"a"), OutputChunk("stderr", b"b")] and events[2].ok
    assert r.stdout_bytes == b"\x00\xff"
