"""The asyncio sessions: :class:`AsyncSandbox` and :class:`AsyncProcess`, the coroutine
twins of :class:`forkbox.Sandbox` and :class:`forkbox.Process` (same names, arguments,
results and exceptions; see those for the details)."""

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Dict, List, Optional, Sequence, Union

from ._protocol import Exchange, OutputCallback, StdinData, chunk_of, kill_message, stdin_messages
from ._transport import AsyncChannel, BusyRetry
from .errors import FileError, ForkboxError, InvalidRequest, SandboxClosed, WaitTimeout
from .result import Change, FileInfo, RunResult
from ._session import SandboxBase, StreamItem, Call, check_callback, file_bytes

if TYPE_CHECKING:
    from .client import AsyncForkbox

__all__ = ["AsyncSandbox", "AsyncProcess"]


class AsyncSandbox(SandboxBase):
    """A session, for asyncio: the methods of :class:`forkbox.Sandbox` as coroutines.

    ``async with AsyncForkbox.create() as sb:`` (or ``sb = await client.create()``) closes
    it at the end of the block. Any number of calls may go on at once on one session (each
    has its own connection), e.g. ``await asyncio.gather(sb.run(a), sb.run(b))``.
    :meth:`stream` is an async generator (``async for ev in sb.stream(cmd)``), and
    :meth:`spawn` a coroutine giving an :class:`AsyncProcess`.
    """

    client: "AsyncForkbox"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _exchange(self, call: Call, **exchange: Any) -> Any:
        self._check_open()
        try:
            return await self.client._exchange(call.kind, call.first, call.stdin, call.budget, path=call.path,
                                               session=self.id, **exchange)
        except SandboxClosed as e:
            self._note(e)
            raise

    async def run(
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
        """Run a command in the session: :meth:`forkbox.Sandbox.run` (the callbacks are
        plain functions, called in the event loop)."""
        call = self._plan_run(cmd, argv, timeout_ms, stdin, env, cwd, max_output)
        result: RunResult = await self._exchange(call, on_stdout=check_callback("on_stdout", on_stdout),
                                                 on_stderr=check_callback("on_stderr", on_stderr))
        return result

    async def run_python(
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
        result: RunResult = await self._exchange(call, on_stdout=check_callback("on_stdout", on_stdout),
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
    ) -> AsyncIterator[StreamItem]:
        """An async generator of the command's output chunks, then its result:
        :meth:`forkbox.Sandbox.stream` for ``async for``. Not a coroutine: no ``await``
        before the loop.

        Leaving the loop early kills the run when the generator is closed: ``await
        gen.aclose()`` (or ``contextlib.aclosing``) closes it at once; otherwise the event
        loop does when the generator is garbage collected.
        """
        call = self._plan_run(cmd, argv, timeout_ms, stdin, env, cwd, max_output)
        self._check_open()
        return self._stream(call)

    async def _stream(self, call: Call) -> AsyncGenerator[StreamItem, None]:
        client = self.client
        deadline = client._deadline(call.budget)
        retry = BusyRetry(client.busy_retry_s, deadline)
        while True:
            ex = Exchange("run", session=self.id)
            ch = await client._open(deadline, call.budget)
            try:
                ch.queue([call.first])
                if call.stdin is not None:
                    ch.queue(stdin_messages(call.stdin))
                while True:
                    msg = await ch.recv()
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
                    await asyncio.sleep(pause)
                    continue
            try:
                result: RunResult = ex.result()
            except SandboxClosed as e:
                self._note(e)
                raise
            yield result
            return

    async def spawn(
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
    ) -> "AsyncProcess":
        """Start a command in the session: :meth:`forkbox.Sandbox.spawn`."""
        call = self._plan_run(cmd, argv, timeout_ms, None, env, cwd, max_output, open_stdin=True)
        out_cb, err_cb = check_callback("on_stdout", on_stdout), check_callback("on_stderr", on_stderr)
        self._check_open()
        deadline = self.client._deadline(call.budget)
        ch = await self.client._open(deadline, call.budget)
        proc = AsyncProcess(self, ch, Exchange("run", session=self.id, on_stdout=out_cb, on_stderr=err_cb))
        await proc._send([call.first])
        return proc

    async def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        """:meth:`forkbox.Sandbox.write_file`."""
        await self._exchange(self._plan_write(path, data, mode))

    async def read_file(self, path: str) -> bytes:
        """:meth:`forkbox.Sandbox.read_file`."""
        data: bytes = await self._exchange(self._plan_file("read", path, kind="read"))
        return data

    async def list(self, path: str = "/") -> List[FileInfo]:
        """:meth:`forkbox.Sandbox.list`."""
        entries: List[FileInfo] = await self._exchange(self._plan_file("list", path, kind="list"))
        return entries

    async def remove(self, path: str, recursive: bool = False) -> None:
        """:meth:`forkbox.Sandbox.remove`."""
        await self._exchange(self._plan_remove(path, recursive))

    async def mkdir(self, path: str, parents: bool = True, mode: int = 0o755) -> None:
        """:meth:`forkbox.Sandbox.mkdir`."""
        await self._exchange(self._plan_mkdir(path, parents, mode))

    async def stat(self, path: str) -> FileInfo:
        """:meth:`forkbox.Sandbox.stat`."""
        info: FileInfo = await self._exchange(self._plan_file("stat", path, kind="stat"))
        return info

    async def exists(self, path: str) -> bool:
        """:meth:`forkbox.Sandbox.exists`."""
        try:
            await self.stat(path)
        except FileError:
            return False
        return True

    async def rename(self, path: str, to: str) -> None:
        """:meth:`forkbox.Sandbox.rename`."""
        await self._exchange(self._plan_rename(path, to))

    async def diff(self) -> List[Change]:
        """:meth:`forkbox.Sandbox.diff`."""
        changes: List[Change] = await self._exchange(self._plan_file("diff", None, kind="diff"))
        return changes

    async def fork(self, n: int = 1) -> List["AsyncSandbox"]:
        """:meth:`forkbox.Sandbox.fork`: ``n`` new sessions as :class:`AsyncSandbox`."""
        reply = await self._exchange(self._plan_fork(n))
        return [AsyncSandbox(self.client, i, limits=self.limits, timeout_ms=self.timeout_ms, parent=self.id)
                for i in self._children(reply)]

    async def pause(self) -> None:
        """:meth:`forkbox.Sandbox.pause`."""
        await self._exchange(self._plan_verb("pause"))

    async def resume(self) -> None:
        """:meth:`forkbox.Sandbox.resume`."""
        await self._exchange(self._plan_verb("resume"))

    async def close(self) -> None:
        """:meth:`forkbox.Sandbox.close` (idempotent)."""
        if self._ended is not None:
            return
        try:
            await self._exchange(self._plan_verb("close"))
        except SandboxClosed:
            pass
        self._mark_closed()


class AsyncProcess:
    """A command running in a session, for asyncio: :class:`forkbox.Process`'s methods as
    coroutines. ``async with await sb.spawn(...) as p:`` kills it at the end of the block
    if it still runs."""

    def __init__(self, sandbox: AsyncSandbox, channel: AsyncChannel, exchange: Exchange) -> None:
        self.sandbox = sandbox
        """The session the command runs in."""
        self._ch: Optional[AsyncChannel] = channel
        self._ex = exchange
        self._stdin_open = True
        self._result: Optional[RunResult] = None
        self._error: Optional[BaseException] = None

    def __repr__(self) -> str:
        state = "running" if self._ch is not None else f"done ({self._result or self._error!r})"
        return f"AsyncProcess({self.sandbox.id!r}, {state})"

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    async def _pump(self, timeout: Optional[float]) -> None:
        until = None if timeout is None else time.monotonic() + timeout
        while self._ch is not None:
            left = None if until is None else max(0.0, until - time.monotonic())
            try:
                msg = await self._ch.recv(left)
                if msg is None:
                    return
                if self._ex.feed(msg):
                    self._finish()
            except ForkboxError as e:
                self._finish(e)

    async def _send(self, messages: Sequence[bytes]) -> None:
        if self._ch is None:
            return
        try:
            self._ch.queue(messages)
            await self._ch.flush()
        except ForkboxError as e:
            self._finish(e)
            raise
        await self._pump(0)

    async def write(self, data: Union[bytes, str]) -> None:
        """:meth:`forkbox.Process.write`."""
        if not self._stdin_open:
            raise InvalidRequest("write() after close_stdin(): the command's stdin is closed")
        payload = file_bytes(data)
        if payload:
            await self._send(list(stdin_messages(payload, eof=False)))

    async def close_stdin(self) -> None:
        """:meth:`forkbox.Process.close_stdin`."""
        if self._stdin_open:
            self._stdin_open = False
            await self._send([b"E"])

    async def kill(self, signal: int = 9) -> None:
        """:meth:`forkbox.Process.kill`."""
        await self._send([kill_message(signal)])

    async def poll(self) -> Optional[RunResult]:
        """:meth:`forkbox.Process.poll`."""
        await self._pump(0)
        return None if self._ch is not None else self._outcome()

    async def wait(self, timeout: Optional[float] = None) -> RunResult:
        """:meth:`forkbox.Process.wait`."""
        await self._pump(timeout)
        if self._ch is not None:
            raise WaitTimeout(f"the command in {self.sandbox.id} still runs after {timeout:g} s")
        return self._outcome()

    async def close(self) -> None:
        """:meth:`forkbox.Process.close`."""
        if self._ch is not None:
            self._finish(ForkboxError(f"the process in {self.sandbox.id} was closed before it ended (and killed)"))
