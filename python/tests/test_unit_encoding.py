"""Request encoding, argument validation, result decoding, error mapping: no daemon."""

import json
import os
import pathlib

import pytest

from forkbox import InvalidRequest, ProtocolError, RunResult, SandboxBusy, SandboxClosed, SandboxError
from forkbox._protocol import Exchange, build_run_request, encode_info, encode_run, stdin_messages
from forkbox.errors import ForkboxError, error_from_reply


def req(*args, **kwargs):
    return build_run_request(*args, **kwargs)[0]


def test_cmd_becomes_sh_c_and_nothing_else_is_sent():
    assert req("echo hi") == {"argv": ["/bin/sh", "-c", "echo hi"]}


def test_argv_is_sent_as_is():
    assert req(argv=["/bin/echo", "a b", ""]) == {"argv": ["/bin/echo", "a b", ""]}
    assert req(argv=("ls",)) == {"argv": ["ls"]}


def test_every_key_given():
    r, data = build_run_request(
        argv=["cat"], timeout_ms=500, stdin="hé", env={"A": "1", "B": "x=y"}, cwd="/tmp", memory_mb=64,
        pids=32, cpus=1, network=True, mounts=[("/srv", "/data"), ("/opt", "/o", "rw")], max_output=4096,
        caps=["CAP_CHOWN"],
    )
    assert r == {
        "argv": ["cat"], "timeout_ms": 500, "stdin": True, "env": ["A=1", "B=x=y"], "cwd": "/tmp",
        "memory_mb": 64, "pids": 32, "cpus": 1.0, "network": True,
        "mounts": [{"source": "/srv", "destination": "/data", "mode": "ro"},
                   {"source": "/opt", "destination": "/o", "mode": "rw"}],
        "max_output": 4096, "caps": ["CAP_CHOWN"],
    }
    assert data == "hé".encode()


def test_network_false_and_none_are_not_sent():
    assert "network" not in req("true", network=False)
    assert "network" not in req("true", network=None)


def test_caps_empty_list_is_sent():
    assert req("true", caps=[])["caps"] == []


def test_stdin_empty_bytes_is_still_stdin():
    r, data = build_run_request("cat", stdin=b"")
    assert r["stdin"] is True and data == b""


def test_stdin_bytes_like():
    assert build_run_request("cat", stdin=bytearray(b"ab"))[1] == b"ab"
    assert build_run_request("cat", stdin=memoryview(b"cd"))[1] == b"cd"


def test_relative_mount_source_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = req("true", mounts=[("sub", "/x"), (pathlib.Path("p2"), "/y", "ro")])["mounts"]
    assert m[0]["source"] == os.path.join(str(tmp_path), "sub")
    assert m[1]["source"] == os.path.join(str(tmp_path), "p2")


def test_rootfs_is_sent_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert req("true", rootfs="img")["rootfs"] == os.path.join(str(tmp_path), "img")
    assert req("true", rootfs=pathlib.Path("/srv/img"))["rootfs"] == "/srv/img"
    assert "rootfs" not in req("true")
    for bad in (b"/x", "", 3, "a\0b"):
        with pytest.raises(InvalidRequest):
            req("true", rootfs=bad)


def test_mount_as_dict():
    m = req("true", mounts=[{"source": "/a", "destination": "/b"}])["mounts"]
    assert m == [{"source": "/a", "destination": "/b", "mode": "ro"}]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # neither
        {"cmd": "true", "argv": ["true"]},  # both
        {"cmd": ["true"]},
        {"cmd": b"true"},
        {"argv": "true"},
        {"argv": []},
        {"argv": ["true", 1]},
        {"argv": [""]},
        {"argv": ["a\0b"]},
        {"cmd": "true", "timeout_ms": 0},
        {"cmd": "true", "timeout_ms": -5},
        {"cmd": "true", "timeout_ms": 1.5},
        {"cmd": "true", "timeout_ms": True},
        {"cmd": "true", "timeout_ms": "500"},
        {"cmd": "true", "stdin": 5},
        {"cmd": "true", "stdin": ["a"]},
        {"cmd": "true", "env": "A=1"},
        {"cmd": "true", "env": {"A": 1}},
        {"cmd": "true", "env": {"A=B": "1"}},
        {"cmd": "true", "env": {"": "1"}},
        {"cmd": "true", "env": ["NOEQUALS"]},
        {"cmd": "true", "cwd": 5},
        {"cmd": "true", "cwd": ""},
        {"cmd": "true", "memory_mb": 0},
        {"cmd": "true", "memory_mb": "64"},
        {"cmd": "true", "pids": -1},
        {"cmd": "true", "cpus": 0},
        {"cmd": "true", "cpus": float("nan")},
        {"cmd": "true", "cpus": "1"},
        {"cmd": "true", "network": "yes"},
        {"cmd": "true", "network": 1},
        {"cmd": "true", "mounts": "/a:/b"},
        {"cmd": "true", "mounts": [("/a",)]},
        {"cmd": "true", "mounts": [("/a", "rel")]},
        {"cmd": "true", "mounts": [("/a", "/b", "rx")]},
        {"cmd": "true", "mounts": [("", "/b")]},
        {"cmd": "true", "mounts": [{"source": "/a", "destination": "/b", "extra": 1}]},
        {"cmd": "true", "max_output": 0},
        {"cmd": "true", "caps": "CAP_CHOWN"},
        {"cmd": "true", "caps": [1]},
    ],
)
def test_bad_arguments_are_invalid_request(kwargs):
    with pytest.raises(InvalidRequest) as e:
        build_run_request(**kwargs)
    assert e.value.code is None  # client-side
    assert isinstance(e.value, ForkboxError)


def test_encode_run_frames_version_and_verb():
    msg = encode_run({"argv": ["true"], "env": ["X=é"]})
    head, _, body = msg.partition(b"\n")
    assert head == b"sandbox/1 run"
    assert json.loads(body.decode()) == {"argv": ["true"], "env": ["X=é"]}


def test_encode_info():
    assert encode_info() == b"sandbox/1 info\n{}"


def test_stdin_chunking():
    data = bytes(range(256)) * 600  # 153600 bytes: 64 KiB + 64 KiB + 22528
    msgs = list(stdin_messages(data))
    assert [len(m) for m in msgs] == [65537, 65537, 22529, 1]
    assert all(m[:1] == b"I" for m in msgs[:-1]) and msgs[-1] == b"E"
    assert b"".join(m[1:] for m in msgs[:-1]) == data


def test_stdin_chunking_empty_and_exact():
    assert list(stdin_messages(b"")) == [b"E"]
    msgs = list(stdin_messages(b"x" * 65536))
    assert [len(m) for m in msgs] == [65537, 1]


RESULT = {
    "exit_code": 3, "signal": None, "timed_out": False, "oom_killed": False, "duration_ms": 2,
    "stdout_bytes": 10, "stderr_bytes": 1, "stdout_dropped": 4, "stderr_dropped": 0, "cpu_ms": 0.5,
    "peak_memory_bytes": 1245184, "limits": {"memory": "cgroup", "pids": "rlimit", "cpu": "none"},
    "exec_error": None,
}


def test_result_decoding():
    r = RunResult.from_reply(RESULT, b"abc\xff", b"e")
    assert r.stdout_bytes == b"abc\xff" and r.stdout == "abc\ufffd" and r.stderr == "e"
    assert r.exit_code == 3 and not r.ok and r.signal is None
    assert isinstance(r.duration_ms, float) and r.duration_ms == 2.0
    assert r.stdout_truncated and not r.stderr_truncated
    assert r.stdout_dropped == 4 and r.stdout_written == 10 and r.stderr_written == 1
    assert r.cpu_ms == 0.5 and r.peak_memory_bytes == 1245184
    assert r.limits == {"memory": "cgroup", "pids": "rlimit", "cpu": "none"}
    assert r.raw["stdout_bytes"] == 10


def test_result_nulls_and_missing_fields():
    r = RunResult.from_reply({"exit_code": 0, "cpu_ms": None, "peak_memory_bytes": None}, b"", b"")
    assert r.ok and r.cpu_ms is None and r.peak_memory_bytes is None and r.limits == {}
    assert r.exec_error is None and r.signal is None and not r.timed_out


def test_result_timeout_and_signal():
    r = RunResult.from_reply({"exit_code": 124, "signal": 9, "timed_out": True}, b"", b"")
    assert r.timed_out and r.signal == 9 and r.exit_code == 124


def test_result_exec_error():
    r = RunResult.from_reply({"exit_code": 127, "exec_error": "nope: not found"}, b"", b"")
    assert r.exec_error == "nope: not found" and r.exit_code == 127


@pytest.mark.parametrize("bad", [{}, {"exit_code": "0"}, {"exit_code": True}, [], "x"])
def test_result_without_exit_code_is_protocol_error(bad):
    with pytest.raises(ProtocolError):
        RunResult.from_reply(bad, b"", b"")


def test_result_is_frozen_and_repr_is_short():
    r = RunResult.from_reply({"exit_code": 0}, b"y\n" * 5_000_000, b"")
    with pytest.raises(Exception):
        r.exit_code = 1  # type: ignore[misc]
    text = repr(r)
    assert len(text) < 400 and "10000000 bytes" in text and text.startswith("RunResult(exit_code=0")


def test_result_equality_ignores_raw():
    a = RunResult.from_reply({"exit_code": 0, "x": 1}, b"a", b"")
    b = RunResult.from_reply({"exit_code": 0, "x": 2}, b"a", b"")
    assert a == b


@pytest.mark.parametrize(
    "code,cls",
    [("invalid_request", InvalidRequest), ("sandbox_error", SandboxError), ("busy", SandboxBusy),
     ("no_such_sandbox", SandboxClosed), ("something_new", SandboxError)],
)
def test_error_mapping(code, cls):
    e = error_from_reply({"error": code, "message": "the daemon's words"})
    assert type(e) is cls and str(e) == "the daemon's words" and e.code == code
    assert isinstance(e, ForkboxError)


def test_busy_is_a_sandbox_error():
    assert issubclass(SandboxBusy, SandboxError)


def test_malformed_error_reply():
    assert isinstance(error_from_reply(["x"]), ProtocolError)
    assert "daemon error" in str(error_from_reply({"error": "busy"}))


def test_exchange_collects_streams_in_order():
    ex = Exchange("run")
    assert not ex.feed(b"1he")
    assert not ex.feed(b"2err")
    assert not ex.feed(b"1llo")
    assert ex.feed(b"X" + json.dumps({"exit_code": 0}).encode())
    r = ex.result()
    assert r.stdout == "hello" and r.stderr == "err"


def test_exchange_binary_data_is_untouched():
    ex = Exchange("run")
    ex.feed(b"1" + bytes(range(256)))
    ex.feed(b'X{"exit_code":0}')
    assert ex.result().stdout_bytes == bytes(range(256))


def test_exchange_error_reply_raises():
    ex = Exchange("run")
    assert ex.feed(b'!{"error":"invalid_request","message":"run: bad"}')
    with pytest.raises(InvalidRequest, match="run: bad"):
        ex.result()


@pytest.mark.parametrize("msg", [b"", b"Zwhat", b"Xnot json", b"!{", b"X\xff"])
def test_exchange_protocol_errors(msg):
    with pytest.raises(ProtocolError):
        Exchange("run").feed(msg)


def test_exchange_message_after_final():
    ex = Exchange("info")
    ex.feed(b'X{"protocol":1}')
    assert ex.result() == {"protocol": 1}
    with pytest.raises(ProtocolError):
        ex.feed(b"1x")


def test_info_result_must_be_object():
    ex = Exchange("info")
    ex.feed(b"X[1]")
    with pytest.raises(ProtocolError):
        ex.result()
