"""The sandbox protocol, version 1: request encoding and reply decoding.

Transport-free: the sync and async clients feed received messages to :class:`Exchange`
and send what :func:`encode_request` / :func:`stdin_messages` give. See
``docs/sandbox-protocol.md`` in the forkbox tree (its "Sessions" section for the session
verbs: create, file, fork, pause, resume, close, list).
"""

import json
import math
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import InvalidRequest, ProtocolError, error_from_reply
from .result import Change, FileInfo, OutputChunk, RunResult, SandboxInfo

__all__ = [
    "PROTOCOL_VERSION",
    "RECV_BUFFER",
    "STDIN_CHUNK",
    "MountSpec",
    "OutputCallback",
    "build_run_request",
    "build_python_request",
    "python_keys",
    "build_session_run_request",
    "build_create_request",
    "sandbox_path",
    "encode_request",
    "encode_run",
    "encode_info",
    "stdin_messages",
    "kill_message",
    "chunk_of",
    "Exchange",
]

PROTOCOL_VERSION = 1
# The daemon's data messages are at most 64 KiB + the tag; its final messages are small
# JSON objects. A larger buffer costs nothing and leaves room; MSG_TRUNC is checked anyway.
RECV_BUFFER = 128 * 1024
STDIN_CHUNK = 64 * 1024
MAX_FORK = 16  # children per fork request
MAX_SECONDS = 2_592_000  # ttl_s and idle_s: 30 days at most

TAG_STDOUT = ord("1")
TAG_STDERR = ord("2")
TAG_RESULT = ord("X")
TAG_ERROR = ord("!")

MountSpec = Union[
    Tuple[Union[str, "os.PathLike[str]"], str],
    Tuple[Union[str, "os.PathLike[str]"], str, str],
    Mapping[str, Any],
]
StdinData = Union[bytes, bytearray, memoryview, str]
# A host path: a sandbox's rootfs (a directory, or an OCI bundle).
PathArg = Union[str, "os.PathLike[str]"]
OutputCallback = Callable[[bytes], None]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive_int(name: str, v: object) -> int:
    if not _is_int(v) or v <= 0:  # type: ignore[operator]
        raise InvalidRequest(f"{name} must be a positive int, not {v!r}")
    return v  # type: ignore[return-value]


def _mount(m: object) -> Dict[str, str]:
    if isinstance(m, Mapping):
        unknown = set(m) - {"source", "destination", "mode"}
        if unknown:
            raise InvalidRequest(f"mount {dict(m)!r}: unknown keys {sorted(unknown)!r}")
        source, destination, mode = m.get("source"), m.get("destination"), m.get("mode", "ro")
    elif isinstance(m, (tuple, list)) and len(m) in (2, 3):
        source, destination = m[0], m[1]
        mode = m[2] if len(m) == 3 else "ro"
    else:
        raise InvalidRequest(
            f"a mount is a (host_path, sandbox_path) or (host_path, sandbox_path, 'ro'|'rw') tuple, not {m!r}"
        )
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source:
        raise InvalidRequest(f"mount {m!r}: the host path must be a non-empty str or path")
    if isinstance(destination, os.PathLike):
        destination = os.fspath(destination)
    if not isinstance(destination, str) or not destination.startswith("/"):
        raise InvalidRequest(f"mount {m!r}: the sandbox path must be an absolute str path")
    if mode not in ("ro", "rw"):
        raise InvalidRequest(f"mount {m!r}: the mode must be 'ro' or 'rw', not {mode!r}")
    # The daemon resolves paths in its own cwd: a relative host path means the caller's.
    return {"source": os.path.abspath(source), "destination": destination, "mode": mode}


def _env(env: object) -> List[str]:
    items: List[str] = []
    if isinstance(env, Mapping):
        for k, v in env.items():
            if not isinstance(k, str) or not k or "=" in k or "\0" in k:
                raise InvalidRequest(f"env: bad variable name {k!r}")
            if not isinstance(v, str) or "\0" in v:
                raise InvalidRequest(f"env: the value of {k} must be a str without NUL, not {v!r}")
            items.append(f"{k}={v}")
    elif isinstance(env, (list, tuple)):
        for e in env:
            if not isinstance(e, str) or "=" not in e or e.startswith("=") or "\0" in e:
                raise InvalidRequest(f"env: {e!r} is not a KEY=VALUE str")
            items.append(e)
    else:
        raise InvalidRequest(f"env must be a dict of str to str, not {type(env).__name__}")
    return items


def _sandbox_keys(
    req: Dict[str, Any],
    memory_mb: Optional[int],
    pids: Optional[int],
    cpus: Optional[float],
    network: Optional[bool],
    mounts: Optional[Sequence[MountSpec]],
    caps: Optional[Sequence[str]],
    rootfs: Optional[PathArg] = None,
) -> None:
    """The keys that make a sandbox (a run's, or a session's at create)."""
    if memory_mb is not None:
        req["memory_mb"] = _positive_int("memory_mb", memory_mb)
    if pids is not None:
        req["pids"] = _positive_int("pids", pids)
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not math.isfinite(cpus) or cpus <= 0:
            raise InvalidRequest(f"cpus must be a positive number, not {cpus!r}")
        req["cpus"] = float(cpus)
    if network is not None and network is not False:
        if network is not True:
            raise InvalidRequest(f"network must be a bool, not {network!r}")
        req["network"] = True
    if mounts is not None:
        if isinstance(mounts, (str, bytes, Mapping)) or not isinstance(mounts, (list, tuple)):
            raise InvalidRequest(f"mounts must be a list of (host_path, sandbox_path[, mode]) tuples, not {mounts!r}")
        req["mounts"] = [_mount(m) for m in mounts]
    if caps is not None:
        if isinstance(caps, (str, bytes)) or not isinstance(caps, (list, tuple)):
            raise InvalidRequest(f"caps must be a list of capability names, not {caps!r}")
        for c in caps:
            if not isinstance(c, str) or not c:
                raise InvalidRequest(f"caps must be a list of str; {c!r} is not")
        req["caps"] = list(caps)
    if rootfs is not None:
        if isinstance(rootfs, bytes) or not isinstance(rootfs, (str, os.PathLike)):
            raise InvalidRequest(f"rootfs must be a path (str or os.PathLike), not {rootfs!r}")
        path = os.fspath(rootfs)
        if not isinstance(path, str) or not path or "\0" in path:
            raise InvalidRequest(f"rootfs must be a non-empty path without NUL bytes, not {rootfs!r}")
        # The daemon resolves it from its own directory: absolute here.
        req["rootfs"] = os.path.abspath(path)


def _stdin_bytes(stdin: StdinData) -> bytes:
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return bytes(stdin)
    raise InvalidRequest(f"stdin must be bytes or str, not {type(stdin).__name__}")


def _command_keys(
    req: Dict[str, Any],
    cmd: Optional[str],
    argv: Optional[Sequence[str]],
    timeout_ms: Optional[int],
    env: Optional[Union[Mapping[str, str], Sequence[str]]],
    cwd: Optional[str],
    max_output: Optional[int],
) -> None:
    """The keys of the command itself (a run's in a sandbox of its own or in a session)."""
    if (cmd is None) == (argv is None):
        raise InvalidRequest("give exactly one of cmd (a shell command line) and argv (a list of str)")
    if cmd is not None:
        if not isinstance(cmd, str):
            raise InvalidRequest(f"cmd must be a str (a shell command line), not {type(cmd).__name__}; use argv= for a list")
        if "\0" in cmd:
            raise InvalidRequest("cmd must not contain NUL")
        req["argv"] = ["/bin/sh", "-c", cmd]
    else:
        if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
            raise InvalidRequest(f"argv must be a list of str, not {type(argv).__name__}")
        if not argv:
            raise InvalidRequest("argv must not be empty")
        for a in argv:
            if not isinstance(a, str):
                raise InvalidRequest(f"argv must be a list of str; {a!r} is a {type(a).__name__}")
            if "\0" in a:
                raise InvalidRequest(f"argv element {a!r} contains NUL")
        if not argv[0]:
            raise InvalidRequest("argv[0] must not be empty")
        req["argv"] = list(argv)
    if env is not None:
        req["env"] = _env(env)
    if cwd is not None:
        if isinstance(cwd, os.PathLike):
            cwd = os.fspath(cwd)
        if not isinstance(cwd, str) or not cwd:
            raise InvalidRequest(f"cwd must be a non-empty str, not {cwd!r}")
        req["cwd"] = cwd
    if timeout_ms is not None:
        req["timeout_ms"] = _positive_int("timeout_ms", timeout_ms)
    if max_output is not None:
        req["max_output"] = _positive_int("max_output", max_output)


def build_run_request(
    cmd: Optional[str] = None,
    *,
    argv: Optional[Sequence[str]] = None,
    timeout_ms: Optional[int] = None,
    stdin: Optional[StdinData] = None,
    env: Optional[Union[Mapping[str, str], Sequence[str]]] = None,
    cwd: Optional[str] = None,
    memory_mb: Optional[int] = None,
    pids: Optional[int] = None,
    cpus: Optional[float] = None,
    network: Optional[bool] = False,
    mounts: Optional[Sequence[MountSpec]] = None,
    max_output: Optional[int] = None,
    caps: Optional[Sequence[str]] = None,
    rootfs: Optional[PathArg] = None,
) -> Tuple[Dict[str, Any], Optional[bytes]]:
    """Check the arguments of a run and build its request object.

    Returns the JSON object of the request (only the keys given) and the standard input
    bytes (``None`` when no stdin is sent).

    Raises:
        InvalidRequest: the arguments are wrong (before anything is sent).
    """
    req: Dict[str, Any] = {}
    _command_keys(req, cmd, argv, timeout_ms, env, cwd, max_output)
    data: Optional[bytes] = None
    if stdin is not None:
        data = _stdin_bytes(stdin)
        req["stdin"] = True
    _sandbox_keys(req, memory_mb, pids, cpus, network, mounts, caps, rootfs)
    return req, data


_MODULE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def build_python_request(
    code: str,
    *,
    preload: Optional[Sequence[str]] = None,
    timeout_ms: Optional[int] = None,
    stdin: Optional[StdinData] = None,
    env: Optional[Union[Mapping[str, str], Sequence[str]]] = None,
    cwd: Optional[str] = None,
    memory_mb: Optional[int] = None,
    pids: Optional[int] = None,
    cpus: Optional[float] = None,
    network: Optional[bool] = False,
    mounts: Optional[Sequence[MountSpec]] = None,
    max_output: Optional[int] = None,
    rootfs: Optional[PathArg] = None,
) -> Tuple[Dict[str, Any], Optional[bytes]]:
    """Check the arguments of a warm Python run (``"python"``: the code, ``"preload"``: the
    modules its interpreter imports first) and build its request object and stdin bytes.

    Raises:
        InvalidRequest: the arguments are wrong (before anything is sent).
    """
    req, data = build_run_request(
        argv=["python3"], timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
        pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, rootfs=rootfs,
    )
    python_keys(req, code, preload)
    return req, data


def python_keys(req: Dict[str, Any], code: object, preload: Optional[Sequence[str]]) -> None:
    """A run request's ``python`` (the code, instead of ``argv``) and ``preload`` keys.

    Raises:
        InvalidRequest: the code is not a str of Python source, or a module name is wrong.
    """
    if not isinstance(code, str):
        raise InvalidRequest(f"code must be a str of Python source, not {type(code).__name__}")
    if "\0" in code:
        raise InvalidRequest("code must not contain NUL (Python source cannot)")
    req.pop("argv", None)
    req["python"] = code
    if preload is not None:
        if isinstance(preload, (str, bytes)) or not isinstance(preload, (list, tuple)):
            raise InvalidRequest(f"preload must be a list of module names, not {preload!r}")
        for m in preload:
            if (not isinstance(m, str) or not m or m[0] == "." or m[-1] == "." or len(m) > 128
                    or not set(m) <= _MODULE_CHARS):
                raise InvalidRequest(f"preload: {m!r} is not a module name (\"json\", \"os.path\")")
        if preload:
            req["preload"] = list(preload)


def build_session_run_request(
    session: str,
    cmd: Optional[str] = None,
    *,
    argv: Optional[Sequence[str]] = None,
    timeout_ms: Optional[int] = None,
    stdin: Optional[StdinData] = None,
    env: Optional[Union[Mapping[str, str], Sequence[str]]] = None,
    cwd: Optional[str] = None,
    max_output: Optional[int] = None,
    open_stdin: bool = False,
) -> Tuple[Dict[str, Any], Optional[bytes]]:
    """The request of a run in a session (its sandbox keys are the session's).

    ``open_stdin`` asks for a standard input written while the command runs (a spawn):
    ``"stdin": true`` with no data here.
    """
    req: Dict[str, Any] = {"session": session}
    _command_keys(req, cmd, argv, timeout_ms, env, cwd, max_output)
    data: Optional[bytes] = None
    if stdin is not None:
        data = _stdin_bytes(stdin)
    if data is not None or open_stdin:
        req["stdin"] = True
    return req, data


def _seconds(name: str, v: object) -> int:
    if not _is_int(v) or not 1 <= v <= MAX_SECONDS:  # type: ignore[operator]
        raise InvalidRequest(f"{name} must be a whole number of seconds from 1 to {MAX_SECONDS}, not {v!r}")
    return v  # type: ignore[return-value]


def build_create_request(
    *,
    memory_mb: Optional[int] = None,
    pids: Optional[int] = None,
    cpus: Optional[float] = None,
    network: Optional[bool] = False,
    mounts: Optional[Sequence[MountSpec]] = None,
    caps: Optional[Sequence[str]] = None,
    timeout_ms: Optional[int] = None,
    ttl_s: Optional[int] = None,
    idle_s: Optional[int] = None,
    rootfs: Optional[PathArg] = None,
) -> Dict[str, Any]:
    """Check the arguments of a session's ``create`` and build its request object.

    Raises:
        InvalidRequest: the arguments are wrong (before anything is sent).
    """
    req: Dict[str, Any] = {}
    _sandbox_keys(req, memory_mb, pids, cpus, network, mounts, caps, rootfs)
    if timeout_ms is not None:
        req["timeout_ms"] = _positive_int("timeout_ms", timeout_ms)
    if ttl_s is not None:
        req["ttl_s"] = _seconds("ttl_s", ttl_s)
    if idle_s is not None:
        req["idle_s"] = _seconds("idle_s", idle_s)
    return req


def sandbox_path(path: object) -> str:
    """Check a path inside a sandbox as the daemon does, before anything is sent: a str (or
    path object), absolute, without NUL and without a ``..`` component.

    Raises:
        InvalidRequest: the path is refused.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise InvalidRequest(f"a sandbox path must be a str, not {type(path).__name__}")
    if not path.startswith("/"):
        raise InvalidRequest(f"a sandbox path must be absolute: {path!r}")
    if "\0" in path:
        raise InvalidRequest(f"a sandbox path must not contain NUL: {path!r}")
    if ".." in path.split("/"):
        # The daemon refuses it too; resolving it here could not mean the same inside.
        raise InvalidRequest(f"the path {path!r} has a '..' component: refused")
    return path


def clean_sandbox_path(path: str) -> str:
    """A checked sandbox path as the daemon cleans it: no empty or ``.`` components."""
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


def fork_count(n: object) -> int:
    """Check a fork's child count (1 to 16)."""
    if not _is_int(n) or not 1 <= n <= MAX_FORK:  # type: ignore[operator]
        raise InvalidRequest(f"fork: n must be an int from 1 to {MAX_FORK}, not {n!r}")
    return n  # type: ignore[return-value]


# One encoder for every request: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _frame(verb: str, obj: Mapping[str, Any]) -> bytes:
    return f"sandbox/{PROTOCOL_VERSION} {verb}\n".encode("ascii") + _ENCODER.encode(obj).encode("utf-8")


def encode_request(verb: str, request: Mapping[str, Any]) -> bytes:
    """The first message of a request: ``sandbox/1 VERB\\n`` + the JSON object."""
    return _frame(verb, request)


def encode_run(request: Mapping[str, Any]) -> bytes:
    """The first message of a run: ``sandbox/1 run\\n`` + the JSON object."""
    return _frame("run", request)


def encode_info() -> bytes:
    """The message of an ``info`` request."""
    return _frame("info", {})


def encode_keep() -> bytes:
    """The message of a ``keep`` request: the daemon keeps the connection for more."""
    return _frame("keep", {})


def stdin_messages(data: bytes, chunk: int = STDIN_CHUNK, eof: bool = True) -> Iterator[bytes]:
    """The ``I`` messages (at most ``chunk`` bytes of data each) then, with ``eof``, the
    ``E`` message."""
    view = memoryview(data)
    for off in range(0, len(view), chunk):
        yield b"I" + bytes(view[off : off + chunk])
    if eof:
        yield b"E"


def kill_message(signal: int) -> bytes:
    """The ``K`` message: the run's process group gets ``signal``."""
    if not _is_int(signal) or not 1 <= signal <= 64:
        raise InvalidRequest(f"signal must be an int from 1 to 64, not {signal!r}")
    return b"K" + str(int(signal)).encode("ascii")


def chunk_of(msg: bytes) -> Optional[OutputChunk]:
    """The output chunk a data message carries, or None for any other message."""
    if msg[:1] == b"1":
        return OutputChunk("stdout", msg[1:])
    if msg[:1] == b"2":
        return OutputChunk("stderr", msg[1:])
    return None


# What an Exchange decodes its final message into (the ``kind`` it is made with).
KINDS = ("run", "info", "object", "read", "list", "stat", "diff", "sessions")


def _json_of(data: bytes, what: str, kind: type, kind_name: str) -> Any:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise ProtocolError(f"daemon sent a {what} that is not JSON: {data[:200]!r} ({e})") from None
    if not isinstance(value, kind):
        raise ProtocolError(f"daemon sent a {what} that is not {kind_name}: {data[:200]!r}")
    return value


def _json_list(data: bytes, what: str) -> List[Any]:
    found: List[Any] = _json_of(data, what, list, "a list")
    return found


def _json_object(data: bytes, what: str) -> Dict[str, Any]:
    found: Dict[str, Any] = _json_of(data, what, dict, "an object")
    return found


class Exchange:
    """Collects a reply: feed it each message received; :meth:`feed` returns True on the
    final one, then :meth:`result` gives the decoded answer or raises the daemon's error.

    Args:
        kind: what the answer is: ``"run"`` (a :class:`RunResult`), ``"info"`` or
            ``"object"`` (the final object), ``"read"`` (the data bytes), ``"list"`` (a
            directory's :class:`FileInfo` entries), ``"stat"`` (one :class:`FileInfo`),
            ``"diff"`` (:class:`Change` entries),
            ``"sessions"`` (:class:`SandboxInfo` entries).
        path: the sandbox path of a file verb (errors' ``filename``; ``list``'s directory).
        session: the session the request names (a :class:`SandboxClosed`'s id).
        on_stdout, on_stderr: called with each data message's bytes as it is fed.
    """

    def __init__(
        self,
        kind: str,
        *,
        path: Optional[str] = None,
        session: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown exchange kind {kind!r}")
        self.verb = kind
        self.path = path
        self.session = session
        self._on = {TAG_STDOUT: on_stdout, TAG_STDERR: on_stderr}
        self._stdout: List[bytes] = []
        self._stderr: List[bytes] = []
        self._final: Optional[Tuple[int, Any]] = None
        self.data_received = False
        """True once a data message was fed (a retry would repeat output)."""

    @property
    def done(self) -> bool:
        """True once the final message was received."""
        return self._final is not None

    def feed(self, msg: bytes) -> bool:
        """Take one received message. Returns True when it was the final one.

        Raises:
            ProtocolError: an empty message, an unknown tag, bad JSON, or data after the end.
            Whatever an ``on_stdout``/``on_stderr`` callback raises.
        """
        if self._final is not None:
            raise ProtocolError("daemon sent a message after its final message")
        if not msg:
            raise ProtocolError("daemon sent an empty message")
        tag = msg[0]
        if tag in (TAG_STDOUT, TAG_STDERR):
            data = msg[1:]
            (self._stdout if tag == TAG_STDOUT else self._stderr).append(data)
            self.data_received = True
            callback = self._on[tag]
            if callback is not None and data:
                callback(data)
            return False
        if tag in (TAG_RESULT, TAG_ERROR):
            try:
                obj = json.loads(msg[1:].decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
                raise ProtocolError(f"daemon sent a final message that is not JSON: {msg[:200]!r} ({e})") from None
            self._final = (tag, obj)
            return True
        raise ProtocolError(f"daemon sent a message with unknown tag {chr(tag)!r}: {msg[:80]!r}")

    @property
    def busy(self) -> bool:
        """True when the final message is a ``busy`` error (the request was not served)."""
        return (self._final is not None and self._final[0] == TAG_ERROR and isinstance(self._final[1], dict)
                and self._final[1].get("error") == "busy")

    def result(self) -> Any:
        """The decoded answer (see ``kind``).

        Raises:
            ForkboxError: the daemon's ``!`` error, mapped to its exception class.
            ProtocolError: the answer is not what ``kind`` expects.
        """
        if self._final is None:
            raise ProtocolError("no final message received")
        tag, obj = self._final
        if tag == TAG_ERROR:
            raise error_from_reply(obj, path=self.path, sandbox_id=self.session)
        if self.verb == "run":
            return RunResult.from_reply(obj, b"".join(self._stdout), b"".join(self._stderr))
        if not isinstance(obj, dict):
            raise ProtocolError(f"daemon sent a {self.verb} result that is not an object: {obj!r}")
        if self.verb == "read":
            return b"".join(self._stdout)
        if self.verb == "list":
            entries = _json_list(b"".join(self._stdout), "directory listing")
            return [FileInfo.from_reply(e, self.path or "/") for e in entries]
        if self.verb == "stat":
            entry = _json_object(b"".join(self._stdout), "file's entry")
            return FileInfo.from_reply(entry, "", path=clean_sandbox_path(self.path or "/"))
        if self.verb == "diff":
            return [Change.from_reply(e) for e in _json_list(b"".join(self._stdout), "diff")]
        if self.verb == "sessions":
            sessions = obj.get("sessions")
            if not isinstance(sessions, list):
                raise ProtocolError(f"daemon sent a list result without a sessions list: {obj!r}")
            return [SandboxInfo.from_reply(e) for e in sessions]
        return obj
