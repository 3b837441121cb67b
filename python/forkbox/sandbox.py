"""Sessions: one sandbox kept for many runs and file verbs (:class:`Sandbox`), and a
command running in one while you write to it (:class:`Process`).

The asyncio twins (:class:`forkbox.AsyncSandbox`, :class:`forkbox.AsyncProcess`) are in
``async_sandbox.py``; what both share (checking arguments, planning requests, knowing when
a session has ended) is ``_session.SandboxBase``.
"""

import time
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Generator,
    Iterator,
    List,
    Optional,
    Sequence,
    Union,
)

from ._protocol import Exchange, OutputCallback, StdinData, chunk_of, kill_message, stdin_messages
from ._session import SandboxBase, StreamItem, Call, check_callback, file_bytes
from ._transport import BusyRetry, Channel
from .errors import FileError, ForkboxError, InvalidRequest, SandboxClosed, WaitTimeout
from .result import Change, FileInfo, RunResult

if TYPE_CHECKING:
    from .client import Forkbox

__all__ = ["Sandbox", "Process"]


class Sandbox(SandboxBase):
    """A session: one sandbox (its namespaces, overlay, cgroup and limits) kept for many
    runs and file verbs, until :meth:`close`, its ``ttl_s``, or ``idle_s`` without a call.

    Made by :meth:`forkbox.Forkbox.create` (or ``connect``, or :meth:`fork`). Each
    :meth:`run` is a new process group in the sandbox with its own deadline; what it writes
    stays for the next run. Paths are absolute paths inside the sandbox, resolved in its
    own root by the daemon (a symlink pointing out lands inside), never on the host.

    ``with Forkbox.create() as sb:`` closes the session at the end of the block. A session
    that is not closed lives until its ``ttl_s`` or ``idle_s`` (the daemon's default idle
    time is 600 s): dropping the object does not end it (another process may
    ``connect``).

    Every method raises :class:`forkbox.SandboxClosed` once the session has ended (closed,
    expired: the message says why), without a hang.
    """

    client: "Forkbox"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exchange(self, call: Call, **exchange: Any) -> Any:
        self._check_open()
        try:
            return self.client._exchange(call.kind, call.first, call.stdin, call.budget, path=call.path,
                                         session=self.id, **exchange)
        except SandboxClosed as e:
            self._note(e)
            raise

    # Commands -------------------------------------------------------------------------

    def run(
        self,
        cmd: Optional[str] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[StdinData] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        max_output: Optional[int] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> RunResult:
        """Run a command in the session and return what it did.

        The arguments are :meth:`forkbox.Forkbox.run`'s that belong to a command (the
        sandbox's own, such as ``memory_mb``, are the session's). ``timeout_ms`` defaults to
        the session's. At the deadline the run's process group is killed (exit code 124);
        the session goes on.

        The run ends when its command exits: processes it started in the background go on
        in the session (their output is no longer this run's).

        Args:
            on_stdout, on_stderr: called with each chunk of output (``bytes``) as it
                arrives, in this thread, before the call returns. The result has the whole
                output too.

        Raises:
            SandboxClosed: the session has ended.
            SandboxError: it is paused, or the daemon could not run the command.
            InvalidRequest: wrong arguments.
        """
        call = self._plan_run(cmd, argv, timeout_ms, stdin, env, cwd, max_output)
        result: RunResult = self._exchange(call, on_stdout=check_callback("on_stdout", on_stdout),
                                           on_stderr=check_callback("on_stderr", on_stderr))
        return result

    def run_python(
        self,
        code: str,
        *,
        preload: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[StdinData] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        max_output: Optional[int] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> RunResult:
        """Run Python code in the session without the interpreter's start-up.

        The session keeps a warm ``python3`` per ``preload`` list (started, and the modules
        imported, by the first call that asks for it); each call is a fork of it that runs
        the code as ``python3 -c code`` would, in the session's sandbox and files, with its
        own process group and deadline. Nothing of one call's interpreter state reaches the
        next (each is a fresh fork); what it writes to files stays, as for :meth:`run`.
        Other arguments as :meth:`run`."""
        call = self._plan_run(None, None, timeout_ms, stdin, env, cwd, max_output, python=code, preload=preload)
        result: RunResult = self._exchange(call, on_stdout=check_callback("on_stdout", on_stdout),
                                           on_stderr=check_callback("on_stderr", on_stderr))
        return result

    def stream(
        self,
        cmd: Optional[str] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[StdinData] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        max_output: Optional[int] = None,
    ) -> Iterator[StreamItem]:
        """Run a command in the session and yield its output as it comes: an
        :class:`forkbox.OutputChunk` per piece (``.stream`` is ``"stdout"`` or
        ``"stderr"``, ``.data`` the bytes), then the :class:`forkbox.RunResult` last.

        >>> for ev in sb.stream("make 2>&1"):
        ...     if isinstance(ev, OutputChunk):
        ...         print(ev.text, end="")
        ...     else:
        ...         result = ev

        Nothing is read ahead: a consumer that is slow slows the command (the daemon stops
        reading its output within a bounded buffer). Leaving the loop early closes the
        connection, which kills the run's process group. Arguments as :meth:`run`; they are
        checked, and a closed session is refused, when this is called (not at the first
        item).
        """
        call = self._plan_run(cmd, argv, timeout_ms, stdin, env, cwd, max_output)
        self._check_open()
        return self._stream(call)

    def _stream(self, call: Call) -> Generator[StreamItem, None, None]:
        client = self.client
        deadline = client._deadline(call.budget)
        retry = BusyRetry(client.busy_retry_s, deadline)
        while True:
            ex = Exchange("run", session=self.id)
            ch = client._open(deadline, call.budget)
            try:
                ch.queue([call.first])
                if call.stdin is not None:
                    ch.queue(stdin_messages(call.stdin))
                while True:
                    msg = ch.recv()
                    if msg is None:
                        continue
                    chunk = chunk_of(msg)
                    final = ex.feed(msg)
                    if chunk is not None and chunk.data:
                        yield chunk
                    if final:
                        break
            finally:
                ch.close()
            if ex.busy and not ex.data_received:
                pause = retry.pause()
                if pause is not None:
                    time.sleep(pause)
                    continue
            try:
                result: RunResult = ex.result()
            except SandboxClosed as e:
                self._note(e)
                raise
            yield result
            return

    def spawn(
        self,
        cmd: Optional[str] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        max_output: Optional[int] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> "Process":
        """Start a command in the session and return at once: a :class:`Process` whose
        standard input you write (:meth:`Process.write`, then :meth:`Process.close_stdin`
        for its EOF) and that you :meth:`Process.wait` for or :meth:`Process.kill`.

        Its output is read (and ``on_stdout``/``on_stderr`` called) while you call the
        process's methods, not in the background: a command left alone blocks once its
        output fills the buffers, and goes on at the next call. Arguments as :meth:`run`.
        An error of the request itself (the session has ended) is raised by the first
        call on the process that reads.
        """
        call = self._plan_run(cmd, argv, timeout_ms, None, env, cwd, max_output, open_stdin=True)
        out_cb, err_cb = check_callback("on_stdout", on_stdout), check_callback("on_stderr", on_stderr)
        self._check_open()
        deadline = self.client._deadline(call.budget)
        ch = self.client._open(deadline, call.budget)
        proc = Process(self, ch, Exchange("run", session=self.id, on_stdout=out_cb, on_stderr=err_cb))
        proc._send([call.first])
        return proc

    # Files ----------------------------------------------------------------------------

    def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        """Create or truncate the file ``path`` in the sandbox with ``data`` (``str`` is
        encoded as UTF-8), making its missing parent directories (0755).

        Raises:
            FileError: the write failed inside the sandbox (an ``OSError`` too: a
                ``NotADirectoryError`` when a parent is a file, ...).
            InvalidRequest: a relative path, or one with a ``..`` component.
            SandboxClosed: the session has ended.
        """
        self._exchange(self._plan_write(path, data, mode))

    def read_file(self, path: str) -> bytes:
        """The bytes of the file ``path`` in the sandbox (at most 64 MiB).

        Raises:
            FileError: e.g. a :class:`FileNotFoundError`, an :class:`IsADirectoryError`.
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        data: bytes = self._exchange(self._plan_file("read", path, kind="read"))
        return data

    def list(self, path: str = "/") -> List[FileInfo]:
        """The entries of the directory ``path``, by name (symlinks are not followed).

        Raises:
            FileError: e.g. a :class:`NotADirectoryError`, a :class:`FileNotFoundError`.
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        entries: List[FileInfo] = self._exchange(self._plan_file("list", path, kind="list"))
        return entries

    def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file, a symlink or an empty directory; with ``recursive``, a whole tree.

        Raises:
            FileError: e.g. a :class:`FileNotFoundError`; ``errno.ENOTEMPTY`` for a directory
                that is not empty without ``recursive``.
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        self._exchange(self._plan_remove(path, recursive))

    def mkdir(self, path: str, parents: bool = True, mode: int = 0o755) -> None:
        """Make the directory ``path``. With ``parents`` (default) its missing parents
        too, and no error when it exists (``mkdir -p``); without, a
        :class:`FileExistsError` or :class:`FileNotFoundError` as ``os.mkdir`` raises.

        Raises:
            FileError, InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        self._exchange(self._plan_mkdir(path, parents, mode))

    def stat(self, path: str) -> FileInfo:
        """The entry ``path`` names in the sandbox, as :meth:`list` gives it (a symlink is
        not followed: its own entry).

        Raises:
            FileError: e.g. a :class:`FileNotFoundError`.
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        info: FileInfo = self._exchange(self._plan_file("stat", path, kind="stat"))
        return info

    def exists(self, path: str) -> bool:
        """Whether ``path`` names an entry in the sandbox (a dangling symlink exists); False
        when the lookup fails inside the sandbox, as ``os.path.exists`` (a missing path, a
        file where a directory should be, a directory it may not search).

        Raises:
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        try:
            self.stat(path)
        except FileError:
            return False
        return True

    def rename(self, path: str, to: str) -> None:
        """Rename ``path`` to ``to`` in the sandbox, as ``os.rename`` does: a file or a
        directory, replacing a file (or an empty directory) that ``to`` names; ``to``'s
        parent must exist. Between two of the sandbox's mounts (a user's daemon gives each
        top-level directory its own) it copies and removes, as ``mv`` does.

        Raises:
            FileError: e.g. a :class:`FileNotFoundError`, ``errno.ENOTEMPTY``.
            InvalidRequest, SandboxClosed: as :meth:`write_file`.
        """
        self._exchange(self._plan_rename(path, to))

    def diff(self) -> List[Change]:
        """What changed in the sandbox's files since the session began (for a fork: since
        it was forked), by path: each a :class:`forkbox.Change` (``created``,
        ``modified``, ``deleted``) with its type and size. Bind mounts are not state."""
        changes: List[Change] = self._exchange(self._plan_file("diff", None, kind="diff"))
        return changes

    # The session ------------------------------------------------------------------------

    def fork(self, n: int = 1) -> List["Sandbox"]:
        """``n`` (1 to 16) new sessions whose files start as this one's are now; each then
        diverges and this one goes on unchanged (its processes are stopped only while the
        state is copied). A child has this session's settings and none of its processes;
        its :meth:`diff` is against the fork point. Close the children you do not keep.

        Raises:
            SandboxClosed: this session has ended.
            SandboxError: a child could not be made (then none is).
        """
        reply = self._exchange(self._plan_fork(n))
        return [Sandbox(self.client, i, limits=self.limits, timeout_ms=self.timeout_ms, parent=self.id)
                for i in self._children(reply)]

    def pause(self) -> None:
        """Stop every process of the session (SIGSTOP) until :meth:`resume`. A run in a
        paused session is a :class:`forkbox.SandboxError`."""
        self._exchange(self._plan_verb("pause"))

    def resume(self) -> None:
        """Continue the processes :meth:`pause` stopped."""
        self._exchange(self._plan_verb("resume"))

    def close(self) -> None:
        """End the session now: every process, mount and file of it is gone. Idempotent: a
        session that is already closed or has expired is not an error."""
        if self._ended is not None:
            return
        try:
            self._exchange(self._plan_verb("close"))
        except SandboxClosed:
            pass
        self._mark_closed()


class Process:
    """A command running in a session, made by :meth:`Sandbox.spawn`.

    Its output is received while you call :meth:`write`, :meth:`close_stdin`,
    :meth:`kill`, :meth:`poll` or :meth:`wait`, which pass it to the spawn's callbacks; the
    final :class:`forkbox.RunResult` has all of it. ``with sb.spawn(...) as p:`` kills
    the command at the end of the block if it still runs.
    """

    def __init__(self, sandbox: Sandbox, channel: Channel, exchange: Exchange) -> None:
        self.sandbox = sandbox
        """The session the command runs in."""
        self._ch: Optional[Channel] = channel
        self._ex = exchange
        self._stdin_open = True
        self._result: Optional[RunResult] = None
        self._error: Optional[BaseException] = None

    def __repr__(self) -> str:
        state = "running" if self._ch is not None else f"done ({self._result or self._error!r})"
        return f"Process({self.sandbox.id!r}, {state})"

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """True until the result (or an error) was received."""
        return self._ch is not None

    def _finish(self, error: Optional[BaseException] = None) -> None:
        if self._ch is not None:
            self._ch.close()
            self._ch = None
        if error is None:
            try:
                self._result = self._ex.result()
            except ForkboxError as e:
                error = e
        if error is not None:
            self._error = error
            self.sandbox._note(error)

    def _outcome(self) -> RunResult:
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _pump(self, timeout: Optional[float]) -> None:
        """Receive until the final message, or for ``timeout`` seconds (0: what is there)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self._ch is not None:
            left = None if until is None else max(0.0, until - time.monotonic())
            try:
                msg = self._ch.recv(left)
                if msg is None:
                    return
                if self._ex.feed(msg):
                    self._finish()
            except ForkboxError as e:
                self._finish(e)

    def _send(self, messages: Sequence[bytes]) -> None:
        if self._ch is None:
            return
        try:
            self._ch.queue(messages)
            self._ch.flush()
        except ForkboxError as e:
            self._finish(e)
            raise
        self._pump(0)

    def write(self, data: Union[bytes, str]) -> None:
        """Write ``data`` (``str``: UTF-8) to the command's standard input; blocks until the
        daemon took it (output meanwhile is received). Data written after the command has
        ended is discarded, as a pipe's reader that is gone would.

        Raises:
            InvalidRequest: after :meth:`close_stdin`.
        """
        if not self._stdin_open:
            raise InvalidRequest("write() after close_stdin(): the command's stdin is closed")
        payload = file_bytes(data)
        if payload:
            self._send(list(stdin_messages(payload, eof=False)))

    def close_stdin(self) -> None:
        """Close the command's standard input: it reads EOF. Idempotent."""
        if self._stdin_open:
            self._stdin_open = False
            self._send([b"E"])

    def kill(self, signal: int = 9) -> None:
        """Send ``signal`` (default SIGKILL) to the command's process group; :meth:`wait`
        then gives its result (``signal`` set, exit code 128 + signal). Nothing happens when
        it has ended."""
        self._send([kill_message(signal)])

    def poll(self) -> Optional[RunResult]:
        """The result if the command has ended, else None (never waits).

        Raises:
            ForkboxError: the run failed (the session has ended, the client's deadline).
        """
        self._pump(0)
        return None if self._ch is not None else self._outcome()

    def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Wait for the command to end and return its result. Standard input stays open
        (call :meth:`close_stdin` first for a command that reads to EOF).

        Args:
            timeout: seconds to wait at most; ``None``: as long as it runs (bounded by the
                run's ``timeout_ms`` and the client's ``request_timeout_s``).

        Raises:
            WaitTimeout: ``timeout`` passed; the command goes on.
            ForkboxError: the run failed (the session has ended, the client's deadline).
        """
        self._pump(timeout)
        if self._ch is not None:
            raise WaitTimeout(f"the command in {self.sandbox.id} still runs after {timeout:g} s")
        return self._outcome()

    def close(self) -> None:
        """Release the connection; a command that still runs is killed (closing its
        connection ends its process group). Idempotent."""
        if self._ch is not None:
            self._finish(ForkboxError(f"the process in {self.sandbox.id} was closed before it ended (and killed)"))
