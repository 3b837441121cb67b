"""What :class:`forkbox.Sandbox` and :class:`forkbox.AsyncSandbox` share, without I/O:
checking a session call's arguments, planning its request (message, data, the client's
wait), and knowing when the session has ended."""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

from ._protocol import (
    OutputCallback,
    StdinData,
    build_session_run_request,
    python_keys,
    encode_request,
    fork_count,
    sandbox_path,
)
from .errors import InvalidRequest, ProtocolError, SandboxClosed
from .result import OutputChunk, RunResult

__all__ = ["StreamItem", "Call", "SandboxBase", "session_id", "check_callback", "file_bytes"]

StreamItem = Union[OutputChunk, RunResult]
CLOSED_BY_CLIENT = "closed by its client"


class Call(NamedTuple):
    """A request planned by :class:`SandboxBase`, for a client to exchange."""

    kind: str  # what the answer decodes into (forkbox._protocol.Exchange)
    first: bytes  # the request message
    stdin: Optional[bytes]  # data sent as I messages then E, or None
    budget: Optional[float]  # seconds the client waits for the final message
    path: Optional[str] = None  # a file verb's path


def _mode(name: str, mode: object) -> int:
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise InvalidRequest(f"{name} must be an int from 0 to 0o7777 (permission bits), not {mode!r}")
    return mode


def file_bytes(data: object) -> bytes:
    """A file's (or stdin's) data as bytes: ``str`` is UTF-8."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidRequest(f"file data must be bytes or str, not {type(data).__name__}")


def check_callback(name: str, cb: object) -> Optional[OutputCallback]:
    """An ``on_stdout``/``on_stderr`` argument: None or a callable."""
    if cb is not None and not callable(cb):
        raise InvalidRequest(f"{name} must be a callable taking bytes, not {cb!r}")
    return cb


def session_id(sandbox_id: object) -> str:
    """Check a session id given by the caller (``Forkbox.connect``)."""
    if not isinstance(sandbox_id, str) or not sandbox_id or any(c.isspace() for c in sandbox_id):
        raise InvalidRequest(f"a sandbox id is a str like 'sb-0123456789abcdef', not {sandbox_id!r}")
    return sandbox_id


class SandboxBase:
    """What :class:`Sandbox` and :class:`forkbox.AsyncSandbox` share: the session's id and
    settings, whether it has ended, and the requests of its calls (no I/O here)."""

    def __init__(
        self,
        client: Any,
        sandbox_id: str,
        *,
        limits: Optional[Dict[str, str]] = None,
        timeout_ms: Optional[int] = None,
        parent: Optional[str] = None,
    ) -> None:
        self.id: str = sandbox_id
        """The session's id (``"sb-<16 hex>"``); ``Forkbox.connect(id)`` attaches to it."""
        self.client = client
        """The client whose daemon holds the session."""
        self.limits: Optional[Dict[str, str]] = limits
        """How each limit is enforced (``{"memory": "cgroup", ...}``), when this object made
        the session; ``None`` for one attached to with ``connect``."""
        self.timeout_ms: Optional[int] = timeout_ms
        """The deadline of a run that gives none, when known (the ``create`` argument)."""
        self.parent: Optional[str] = parent
        """The id of the session this one was forked from (by this object's fork), or None."""
        self._ended: Optional[SandboxClosed] = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or a call found the session ended (expired,
        its init died, the daemon restarted). A session that has expired without any call
        noticing still shows False until the next call raises :class:`SandboxClosed`."""
        return self._ended is not None

    def __repr__(self) -> str:
        state = f", closed ({self._ended.reason})" if self._ended is not None else ""
        return f"{type(self).__name__}({self.id!r}{state})"

    # State ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._ended is not None:
            e = self._ended
            raise SandboxClosed(e.message, code=e.code, sandbox_id=self.id, reason=e.reason)

    def _note(self, error: BaseException) -> None:
        """Remember that the session has ended, when ``error`` says so."""
        if isinstance(error, SandboxClosed) and self._ended is None:
            self._ended = SandboxClosed(error.message, code=error.code, sandbox_id=self.id, reason=error.reason)

    def _mark_closed(self) -> None:
        if self._ended is None:
            self._ended = SandboxClosed(
                f"the sandbox {self.id} has ended: {CLOSED_BY_CLIENT} (close() was called)",
                code="no_such_sandbox", sandbox_id=self.id, reason=CLOSED_BY_CLIENT,
            )

    # Plans ----------------------------------------------------------------------------

    def _plan_run(
        self,
        cmd: Optional[str],
        argv: Optional[Sequence[str]],
        timeout_ms: Optional[int],
        stdin: Optional[StdinData],
        env: Any,
        cwd: Optional[str],
        max_output: Optional[int],
        open_stdin: bool = False,
        python: Optional[str] = None,
        preload: Optional[Sequence[str]] = None,
    ) -> Call:
        if python is not None:
            argv = ["python3"]  # replaced by the code
        request, data = build_session_run_request(
            self.id, cmd, argv=argv, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd,
            max_output=max_output, open_stdin=open_stdin,
        )
        if python is not None:
            python_keys(request, python, preload)
        budget = self.client._run_budget(request, self.timeout_ms)
        return Call("run", encode_request("run", request), data, budget)

    def _plan_file(self, op: str, path: Optional[object], kind: str = "object", stdin: Optional[bytes] = None,
                   **keys: Any) -> Call:
        request: Dict[str, Any] = {"session": self.id, "op": op}
        checked = None
        if path is not None:
            checked = sandbox_path(path)
            request["path"] = checked
        request.update(keys)
        return Call(kind, encode_request("file", request), stdin, self.client._verb_budget(), checked)

    def _plan_write(self, path: object, data: object, mode: object) -> Call:
        return self._plan_file("write", path, stdin=file_bytes(data), mode=_mode("mode", mode))

    def _plan_mkdir(self, path: object, parents: bool, mode: object) -> Call:
        if not isinstance(parents, bool):
            raise InvalidRequest(f"parents must be a bool, not {parents!r}")
        return self._plan_file("mkdir", path, recursive=parents, mode=_mode("mode", mode))

    def _plan_remove(self, path: object, recursive: bool) -> Call:
        if not isinstance(recursive, bool):
            raise InvalidRequest(f"recursive must be a bool, not {recursive!r}")
        return self._plan_file("remove", path, recursive=recursive)

    def _plan_rename(self, path: object, to: object) -> Call:
        return self._plan_file("rename", path, to=sandbox_path(to))

    def _plan_verb(self, verb: str, **keys: Any) -> Call:
        request = {"session": self.id}
        request.update(keys)
        return Call("object", encode_request(verb, request), None, self.client._verb_budget())

    def _plan_fork(self, n: object) -> Call:
        return self._plan_verb("fork", count=fork_count(n))

    def _children(self, reply: Dict[str, Any]) -> List[str]:
        ids = reply.get("sessions")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ProtocolError(f"daemon sent a fork result without a list of session ids: {reply!r}")
        return ids
