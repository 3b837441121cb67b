"""What calls return: the result of a run, output chunks, directory entries, diff entries,
session listings."""

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from .errors import ProtocolError

__all__ = ["RunResult", "OutputChunk", "FileInfo", "Change", "SandboxInfo"]

_REPR_TEXT = 60  # characters of each stream shown by repr()


def _short(data: bytes) -> str:
    text = data[: _REPR_TEXT * 4].decode("utf-8", errors="replace")
    if len(text) > _REPR_TEXT or len(data) > _REPR_TEXT * 4:
        return f"{text[:_REPR_TEXT]!r}... ({len(data)} bytes)"
    return repr(text)


@dataclass(frozen=True, repr=False)
class RunResult:
    """What a command run in a sandbox did.

    A command that fails is still a result: check :attr:`ok`, :attr:`exit_code`,
    :attr:`timed_out`, :attr:`oom_killed` and :attr:`exec_error`.

    Attributes:
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced by U+FFFD).
        stderr: standard error, decoded the same way.
        stdout_bytes: standard output as the raw bytes received.
        stderr_bytes: standard error as the raw bytes received.
        exit_code: the exit status; ``128 + N`` when killed by signal ``N``; ``124`` when the
            deadline killed it; ``127``/``126`` when the command could not be started.
        signal: the signal that killed the command, or ``None``.
        timed_out: the deadline (``timeout_ms``) killed the command.
        oom_killed: the kernel's OOM killer killed a process of the sandbox.
        duration_ms: from the command's release to its exit, measured by the daemon.
        stdout_truncated: the middle of standard output was dropped (``max_output``).
        stderr_truncated: the same for standard error.
        stdout_dropped: bytes of standard output dropped (not sent).
        stderr_dropped: bytes of standard error dropped.
        stdout_written: bytes the command wrote to standard output (kept + dropped).
        stderr_written: bytes the command wrote to standard error.
        cpu_ms: CPU time of the sandbox, or ``None`` where the host cannot measure it.
        peak_memory_bytes: peak memory of the sandbox, or ``None``.
        written_bytes: how much the run grew the sandbox's writable layer (its RAM tmpfs:
            the overlay's upper layer, /tmp, /root, /run), negative when it freed more than
            it wrote; ``None`` from a daemon that does not say.
        limits: how each limit was enforced: ``{"memory": "cgroup"|"rlimit"|"none", ...}``.
            ``"cgroup"`` bounds the sandbox as a whole; ``"rlimit"`` (a user's daemon) each
            process: memory is every process's address space (``RLIMIT_AS``), pids the
            sandbox's process count (``RLIMIT_NPROC`` in its own user namespace).
        exec_error: why the command could not be started (missing program, bad ``cwd``),
            or ``None``.
        raw: the daemon's result object as received (for fields newer than this SDK).
    """

    stdout_bytes: bytes
    stderr_bytes: bytes
    exit_code: int
    signal: Optional[int] = None
    timed_out: bool = False
    oom_killed: bool = False
    duration_ms: float = 0.0
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    stdout_written: int = 0
    stderr_written: int = 0
    cpu_ms: Optional[float] = None
    peak_memory_bytes: Optional[int] = None
    written_bytes: Optional[int] = None
    limits: Dict[str, str] = field(default_factory=dict)
    exec_error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def stdout(self) -> str:
        """Standard output decoded as UTF-8 with ``errors="replace"``."""
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """Standard error decoded as UTF-8 with ``errors="replace"``."""
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def stdout_truncated(self) -> bool:
        """True when the middle of standard output was dropped."""
        return self.stdout_dropped > 0

    @property
    def stderr_truncated(self) -> bool:
        """True when the middle of standard error was dropped."""
        return self.stderr_dropped > 0

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.exit_code == 0

    def __repr__(self) -> str:
        parts = [f"exit_code={self.exit_code}"]
        if self.signal is not None:
            parts.append(f"signal={self.signal}")
        if self.timed_out:
            parts.append("timed_out=True")
        if self.oom_killed:
            parts.append("oom_killed=True")
        if self.exec_error is not None:
            parts.append(f"exec_error={self.exec_error!r}")
        parts.append(f"duration_ms={self.duration_ms:.3f}")
        parts.append(f"stdout={_short(self.stdout_bytes)}")
        if self.stdout_dropped:
            parts.append(f"stdout_dropped={self.stdout_dropped}")
        parts.append(f"stderr={_short(self.stderr_bytes)}")
        if self.stderr_dropped:
            parts.append(f"stderr_dropped={self.stderr_dropped}")
        return f"RunResult({', '.join(parts)})"

    @classmethod
    def from_reply(cls, obj: Mapping[str, Any], stdout: bytes, stderr: bytes) -> "RunResult":
        """Build a result from the daemon's ``X`` object and the streams received.

        Raises:
            ProtocolError: the object is not a result (no integer ``exit_code``).
        """
        if type(obj) is not dict and not isinstance(obj, Mapping):  # dict first: the ABC check is slow
            raise ProtocolError(f"daemon sent a result that is not an object: {obj!r}")
        exit_code = obj.get("exit_code")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            raise ProtocolError(f"daemon sent a result without an integer exit_code: {dict(obj)!r}")
        limits_obj = obj.get("limits")
        limits = ({str(k): str(v) for k, v in limits_obj.items()}
                  if type(limits_obj) is dict or isinstance(limits_obj, Mapping) else {})
        exec_error = obj.get("exec_error")
        duration = _opt_number(obj, "duration_ms")
        stdout_dropped = _opt_int(obj, "stdout_dropped") or 0
        stderr_dropped = _opt_int(obj, "stderr_dropped") or 0
        stdout_written = _opt_int(obj, "stdout_bytes")
        stderr_written = _opt_int(obj, "stderr_bytes")
        return cls(
            stdout_bytes=bytes(stdout),
            stderr_bytes=bytes(stderr),
            exit_code=exit_code,
            signal=_opt_int(obj, "signal"),
            timed_out=obj.get("timed_out") is True,
            oom_killed=obj.get("oom_killed") is True,
            duration_ms=duration if duration is not None else 0.0,
            stdout_dropped=stdout_dropped,
            stderr_dropped=stderr_dropped,
            stdout_written=stdout_written if stdout_written is not None else len(stdout) + stdout_dropped,
            stderr_written=stderr_written if stderr_written is not None else len(stderr) + stderr_dropped,
            cpu_ms=_opt_number(obj, "cpu_ms"),
            peak_memory_bytes=_opt_int(obj, "peak_memory_bytes"),
            written_bytes=_opt_int(obj, "written_bytes"),
            limits=limits,
            exec_error=exec_error if isinstance(exec_error, str) else None,
            raw=dict(obj),
        )


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a command's output, as it arrived (:meth:`forkbox.Sandbox.stream`).

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        data: the bytes (at most 64 KiB per chunk).
    """

    stream: str
    data: bytes

    @property
    def text(self) -> str:
        """:attr:`data` decoded as UTF-8 with ``errors="replace"`` (a chunk may end inside
        a character: join the bytes first when that matters)."""
        return self.data.decode("utf-8", errors="replace")


def _str_field(obj: Mapping[str, Any], key: str, what: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise ProtocolError(f"daemon sent {what} whose {key!r} is not a str: {dict(obj)!r}")
    return v


def _opt_number(obj: Mapping[str, Any], key: str) -> Optional[float]:
    v = obj.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer beyond a float's range
        raise ProtocolError(f"daemon sent a {key!r} out of range: {str(v)[:40]}...") from None


def _opt_int(obj: Mapping[str, Any], key: str) -> Optional[int]:
    v = obj.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class FileInfo:
    """An entry of a directory in a sandbox (:meth:`forkbox.Sandbox.list`,
    :meth:`forkbox.Sandbox.stat`).

    Attributes:
        name: the entry's name.
        path: its absolute path in the sandbox (the listed directory + name).
        type: ``"file"``, ``"dir"``, ``"symlink"`` or ``"other"`` (a symlink is not followed).
        size: its size in bytes (a symlink's: its target's length).
        mode: its permission bits (``0o644``, ...).
        mtime: its modification time, seconds since the epoch.
    """

    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: float

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        """True for a regular file."""
        return self.type == "file"

    @classmethod
    def from_reply(cls, obj: Any, directory: str, path: Optional[str] = None) -> "FileInfo":
        """One entry of a ``list`` reply (in ``directory``), or a ``stat`` reply (of ``path``).

        Raises:
            ProtocolError: it is not an entry object.
        """
        if not isinstance(obj, Mapping):
            raise ProtocolError(f"daemon sent a directory entry that is not an object: {obj!r}")
        name = _str_field(obj, "name", "a directory entry")
        base = directory.rstrip("/")
        return cls(
            name=name,
            path=path if path is not None else f"{base}/{name}",
            type=_str_field(obj, "type", "a directory entry"),
            size=_opt_int(obj, "size") or 0,
            mode=_opt_int(obj, "mode") or 0,
            mtime=_opt_number(obj, "mtime") or 0.0,
        )


@dataclass(frozen=True)
class Change:
    """A path that differs from the sandbox's starting state (:meth:`forkbox.Sandbox.diff`).

    Attributes:
        path: the absolute path in the sandbox.
        change: ``"created"``, ``"modified"`` or ``"deleted"``.
        type: ``"file"``, ``"dir"``, ``"symlink"`` or ``"other"``.
        size: its size now (0 for a deleted path).
    """

    path: str
    change: str
    type: str
    size: int

    @classmethod
    def from_reply(cls, obj: Any) -> "Change":
        """One entry of a ``diff`` reply.

        Raises:
            ProtocolError: it is not a change object.
        """
        if not isinstance(obj, Mapping):
            raise ProtocolError(f"daemon sent a diff entry that is not an object: {obj!r}")
        kind = obj.get("type")
        return cls(
            path=_str_field(obj, "path", "a diff entry"),
            change=_str_field(obj, "change", "a diff entry"),
            type=kind if isinstance(kind, str) else "other",
            size=_opt_int(obj, "size") or 0,
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A session as the daemon lists it (:meth:`forkbox.Forkbox.sandboxes`).

    Attributes:
        id: the session's id (``"sb-<16 hex>"``); :meth:`forkbox.Forkbox.connect` takes it.
        parent: the session it was forked from, or ``None``.
        age_s: seconds since it began.
        idle_s: seconds since its last run or file verb ended.
        ttl_s: its ttl in seconds, or ``None`` (no ttl).
        idle_timeout_s: the idle time after which it ends, or ``None``.
        running: runs going on in it now.
        served: runs and verbs it has served.
        paused: it is paused (:meth:`forkbox.Sandbox.pause`).
        memory_mb: its memory limit, or ``None``.
        pids: its pids limit, or ``None``.
        network: it shares the host's network.
        raw: the daemon's object as received (for fields newer than this SDK).
    """

    id: str
    parent: Optional[str] = None
    age_s: float = 0.0
    idle_s: float = 0.0
    ttl_s: Optional[float] = None
    idle_timeout_s: Optional[float] = None
    running: int = 0
    served: int = 0
    paused: bool = False
    memory_mb: Optional[int] = None
    pids: Optional[int] = None
    network: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_reply(cls, obj: Any) -> "SandboxInfo":
        """One entry of a ``list`` reply.

        Raises:
            ProtocolError: it is not a session object.
        """
        if not isinstance(obj, Mapping):
            raise ProtocolError(f"daemon sent a session entry that is not an object: {obj!r}")
        parent = obj.get("parent")
        return cls(
            id=_str_field(obj, "id", "a session entry"),
            parent=parent if isinstance(parent, str) else None,
            age_s=_opt_number(obj, "age_s") or 0.0,
            idle_s=_opt_number(obj, "idle_s") or 0.0,
            ttl_s=_opt_number(obj, "ttl_s"),
            idle_timeout_s=_opt_number(obj, "idle_timeout_s"),
            running=_opt_int(obj, "running") or 0,
            served=_opt_int(obj, "served") or 0,
            paused=obj.get("paused") is True,
            memory_mb=_opt_int(obj, "memory_mb"),
            pids=_opt_int(obj, "pids"),
            network=obj.get("network") is True,
            raw=dict(obj),
        )
