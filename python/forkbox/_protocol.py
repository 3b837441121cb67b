"""The sandbox protocol, version 1: request encoding and reply decoding.

Transport-free: the sync and async clients feed received messages to :class:`Exchange`
and send what :func:`encode_run` / :func:`stdin_messages` give. See
``docs/sandbox-protocol.md`` in the forkbox tree.
"""

import json
import math
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import InvalidRequest, ProtocolError, error_from_reply
from .result import RunResult

__all__ = [
    "PROTOCOL_VERSION",
    "RECV_BUFFER",
    "STDIN_CHUNK",
    "MountSpec",
    "build_run_request",
    "encode_run",
    "encode_info",
    "stdin_messages",
    "Exchange",
]

PROTOCOL_VERSION = 1
# The daemon's data messages are at most 64 KiB + the tag; its final messages are small
# JSON objects. A larger buffer costs nothing and leaves room; MSG_TRUNC is checked anyway.
RECV_BUFFER = 128 * 1024
STDIN_CHUNK = 64 * 1024

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
) -> Tuple[Dict[str, Any], Optional[bytes]]:
    """Check the arguments of a run and build its request object.

    Returns the JSON object of the request (only the keys given) and the standard input
    bytes (``None`` when no stdin is sent).

    Raises:
        InvalidRequest: the arguments are wrong (before anything is sent).
    """
    if (cmd is None) == (argv is None):
        raise InvalidRequest("give exactly one of cmd (a shell command line) and argv (a list of str)")
    req: Dict[str, Any] = {}
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
    data: Optional[bytes] = None
    if stdin is not None:
        if isinstance(stdin, str):
            data = stdin.encode("utf-8")
        elif isinstance(stdin, (bytes, bytearray, memoryview)):
            data = bytes(stdin)
        else:
            raise InvalidRequest(f"stdin must be bytes or str, not {type(stdin).__name__}")
        req["stdin"] = True
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
    if max_output is not None:
        req["max_output"] = _positive_int("max_output", max_output)
    if caps is not None:
        if isinstance(caps, (str, bytes)) or not isinstance(caps, (list, tuple)):
            raise InvalidRequest(f"caps must be a list of capability names, not {caps!r}")
        for c in caps:
            if not isinstance(c, str) or not c:
                raise InvalidRequest(f"caps must be a list of str; {c!r} is not")
        req["caps"] = list(caps)
    return req, data


def _frame(verb: str, obj: Mapping[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"sandbox/{PROTOCOL_VERSION} {verb}\n".encode("ascii") + body.encode("utf-8")


def encode_run(request: Mapping[str, Any]) -> bytes:
    """The first message of a run: ``sandbox/1 run\\n`` + the JSON object."""
    return _frame("run", request)


def encode_info() -> bytes:
    """The message of an ``info`` request."""
    return _frame("info", {})


def stdin_messages(data: bytes, chunk: int = STDIN_CHUNK) -> Iterator[bytes]:
    """The ``I`` messages (at most ``chunk`` bytes of data each) then the ``E`` message."""
    view = memoryview(data)
    for off in range(0, len(view), chunk):
        yield b"I" + bytes(view[off : off + chunk])
    yield b"E"


class Exchange:
    """Collects a reply: feed it each message received; :meth:`feed` returns True on the
    final one, then :meth:`result` gives the decoded answer or raises the daemon's error.
    """

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self._stdout: List[bytes] = []
        self._stderr: List[bytes] = []
        self._final: Optional[Tuple[int, Any]] = None

    @property
    def done(self) -> bool:
        """True once the final message was received."""
        return self._final is not None

    def feed(self, msg: bytes) -> bool:
        """Take one received message. Returns True when it was the final one.

        Raises:
            ProtocolError: an empty message, an unknown tag, bad JSON, or data after the end.
        """
        if self._final is not None:
            raise ProtocolError("daemon sent a message after its final message")
        if not msg:
            raise ProtocolError("daemon sent an empty message")
        tag = msg[0]
        if tag == TAG_STDOUT:
            self._stdout.append(msg[1:])
            return False
        if tag == TAG_STDERR:
            self._stderr.append(msg[1:])
            return False
        if tag in (TAG_RESULT, TAG_ERROR):
            try:
                obj = json.loads(msg[1:].decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise ProtocolError(f"daemon sent a final message that is not JSON: {msg[:200]!r} ({e})") from None
            self._final = (tag, obj)
            return True
        raise ProtocolError(f"daemon sent a message with unknown tag {chr(tag)!r}: {msg[:80]!r}")

    def result(self) -> Any:
        """The run's :class:`RunResult`, or the info dict.

        Raises:
            ForkboxError: the daemon's ``!`` error, mapped to its exception class.
        """
        if self._final is None:
            raise ProtocolError("no final message received")
        tag, obj = self._final
        if tag == TAG_ERROR:
            raise error_from_reply(obj)
        if self.verb == "run":
            return RunResult.from_reply(obj, b"".join(self._stdout), b"".join(self._stderr))
        if not isinstance(obj, dict):
            raise ProtocolError(f"daemon sent an info result that is not an object: {obj!r}")
        return obj
