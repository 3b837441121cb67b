"""The clients: :class:`Forkbox` (blocking) and :class:`AsyncForkbox` (asyncio)."""

import asyncio
import collections
import errno
import functools
import inspect
import os
import random
import select
import socket
import time
import types
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Generic,
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
    overload,
)

from . import _daemon
from ._protocol import (
    RECV_BUFFER,
    Exchange,
    MountSpec,
    StdinData,
    build_run_request,
    encode_info,
    encode_run,
    stdin_messages,
)
from .errors import DaemonNotRunning, ForkboxError, InvalidRequest, ProtocolError, SandboxBusy, SandboxError
from .result import RunResult

__all__ = ["Forkbox", "AsyncForkbox"]

R = TypeVar("R")

_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_MSG_TRUNC = getattr(socket, "MSG_TRUNC", 0x20)
INFO_TIMEOUT_S = 30.0


class _ClientMethod(Generic[R]):
    """A method callable on an instance or on the class.

    ``client.run(...)`` is an ordinary method call. ``Forkbox.run(...)`` makes a default
    client (``Forkbox()``: socket from the environment, autostart as configured there)
    for that one call.
    """

    def __init__(self, func: Callable[..., R]) -> None:
        self.func = func
        functools.update_wrapper(self, func)
        sig = inspect.signature(func)
        # The class-level call's signature: the method's, without self.
        self._class_signature = sig.replace(parameters=list(sig.parameters.values())[1:])

    @overload
    def __get__(self, obj: None, objtype: Type[Any]) -> Callable[..., R]: ...

    @overload
    def __get__(self, obj: object, objtype: Optional[Type[Any]] = None) -> Callable[..., R]: ...

    def __get__(self, obj: Optional[object], objtype: Optional[Type[Any]] = None) -> Callable[..., R]:
        if obj is not None:
            return types.MethodType(self.func, obj)
        cls = objtype
        func = self.func
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                return await func(cls(), *args, **kwargs)  # type: ignore[misc]

            call_async.__signature__ = self._class_signature  # type: ignore[attr-defined]
            return call_async  # type: ignore[return-value]

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> R:
            return func(cls(), *args, **kwargs)  # type: ignore[misc]

        call.__signature__ = self._class_signature  # type: ignore[attr-defined]
        return call


def _backoff(attempt: int) -> float:
    return float(min(0.5, 0.01 * 2.0 ** min(attempt, 6)) * (0.5 + random.random()))


class _ClientBase:
    """What both clients share: configuration, socket resolution, deadlines."""

    def __init__(
        self,
        socket: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        autostart: Optional[bool] = None,
        request_timeout_s: Optional[float] = None,
        timeout_grace_s: float = 5.0,
        busy_retry_s: float = 30.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        explicit = os.fspath(socket) if socket is not None else None
        path, is_default = _daemon.resolve_socket(explicit)
        self.socket_path: str = path
        """The socket this client connects to."""
        self.socket_is_default: bool = is_default
        """True when :attr:`socket_path` came from the default rule (no ``socket=`` and no
        ``FORKBOX_SOCKET``)."""
        if autostart is not None and not isinstance(autostart, bool):
            raise InvalidRequest(f"autostart must be a bool or None, not {autostart!r}")
        if _daemon.autostart_disabled_by_env():
            self.autostart: bool = False
        elif autostart is None:
            self.autostart = is_default
        else:
            self.autostart = autostart
        for name, v in (("request_timeout_s", request_timeout_s),):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
                raise InvalidRequest(f"{name} must be a positive number or None, not {v!r}")
        for name, w in (("timeout_grace_s", timeout_grace_s), ("busy_retry_s", busy_retry_s),
                        ("connect_timeout_s", connect_timeout_s)):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0:
                raise InvalidRequest(f"{name} must be a number >= 0, not {w!r}")
        self.request_timeout_s: Optional[float] = request_timeout_s
        self.timeout_grace_s: float = float(timeout_grace_s)
        self.busy_retry_s: float = float(busy_retry_s)
        self.connect_timeout_s: float = float(connect_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(socket={self.socket_path!r}, autostart={self.autostart})"

    def _run_budget(self, request: Mapping[str, Any]) -> Optional[float]:
        """Seconds the client waits for a run's final message, or None (forever)."""
        budgets = []
        if self.request_timeout_s is not None:
            budgets.append(float(self.request_timeout_s))
        t = request.get("timeout_ms")
        if t is not None:
            budgets.append(t / 1000.0 + self.timeout_grace_s)
        return min(budgets) if budgets else None

    def _info_budget(self) -> float:
        return float(self.request_timeout_s) if self.request_timeout_s is not None else INFO_TIMEOUT_S

    def _timeout_error(self, budget: float) -> SandboxError:
        return SandboxError(
            f"no final message from the daemon on {self.socket_path} within {budget:g} s; "
            "the connection was closed (which kills the sandbox)"
        )

    def _closed_error(self) -> SandboxError:
        return SandboxError(
            f"daemon closed the connection on {self.socket_path} before its final message "
            "(did it crash or restart, or does it serve another uid?)"
        )


class Forkbox(_ClientBase):
    """A blocking client of a forkbox daemon.

    Every call opens its own connection, so one client may be shared by threads.

    Args:
        socket: the daemon's socket. Default: ``$FORKBOX_SOCKET``, else
            ``/run/forkbox/forkbox.sock`` for root, else
            ``$XDG_RUNTIME_DIR/forkbox/forkbox.sock`` (``/run/user/<uid>/...`` when
            ``XDG_RUNTIME_DIR`` is unset).
        autostart: start a per-user daemon (``forkbox daemon --socket PATH``, detached)
            when none answers. ``None`` (default): only for the default socket, not one
            given by ``socket=`` or ``FORKBOX_SOCKET``. ``True``: for any socket. ``False``:
            never. ``FORKBOX_NO_AUTOSTART=1`` in the environment turns it off whatever this
            says. The binary is ``$FORKBOX_BIN``, else ``forkbox`` in ``PATH``, else
            ``/usr/local/bin/forkbox``.
        request_timeout_s: the most a call waits for the daemon's final message. Default
            ``None``: a run with ``timeout_ms`` waits ``timeout_ms`` + ``timeout_grace_s``;
            a run without waits as long as the command runs; ``info`` waits 30 s.
        timeout_grace_s: what a run with ``timeout_ms`` waits beyond it (sandbox start-up,
            the kill, the output's tail).
        busy_retry_s: how long ``busy`` replies are retried (with backoff) before
            :class:`SandboxBusy` is raised; ``0`` raises at once.
        connect_timeout_s: the most ``connect`` may take.

    A client-side deadline that passes closes the connection, which kills the sandbox, and
    raises :class:`SandboxError`.
    """

    def _connect(self, deadline: Optional[float]) -> socket.socket:
        timeout = self.connect_timeout_s
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        try:
            return _daemon.connect_blocking(self.socket_path, timeout)
        except DaemonNotRunning as e:
            if not self.autostart:
                raise DaemonNotRunning(
                    e.message + "; autostart is off for this socket", socket_path=self.socket_path
                ) from None
        _daemon.start_daemon(self.socket_path)
        return _daemon.connect_blocking(self.socket_path, timeout)

    def _exchange(self, verb: str, first: bytes, stdin: Optional[bytes], budget: Optional[float]) -> Any:
        start = time.monotonic()
        deadline = None if budget is None else start + budget
        attempt = 0
        while True:
            try:
                return self._exchange_once(verb, first, stdin, deadline, budget)
            except SandboxBusy:
                waited = time.monotonic() - start
                pause = _backoff(attempt)
                attempt += 1
                if waited + pause > self.busy_retry_s or (deadline is not None and time.monotonic() + pause > deadline):
                    raise
                time.sleep(pause)

    def _exchange_once(
        self, verb: str, first: bytes, stdin: Optional[bytes], deadline: Optional[float], budget: Optional[float]
    ) -> Any:
        sock = self._connect(deadline)
        try:
            sock.setblocking(False)
            pending: Deque[bytes] = collections.deque([first])
            if stdin is not None:
                pending.extend(stdin_messages(stdin))
            ex = Exchange(verb)
            poller = select.poll()
            fd = sock.fileno()
            resets = 0
            registered = False
            while True:
                mask = select.POLLIN | (select.POLLOUT if pending else 0)
                if registered:
                    poller.modify(fd, mask)
                else:
                    poller.register(fd, mask)
                    registered = True
                if deadline is None:
                    events = poller.poll()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._timeout_error(budget or 0.0)
                    events = poller.poll(max(1, int(left * 1000) + 1))
                if not events:
                    continue
                ev = events[0][1]
                if ev & select.POLLOUT and pending:
                    try:
                        sock.send(pending[0], _MSG_NOSIGNAL)
                        pending.popleft()
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        # The daemon stopped reading (error reply, command gone): read on.
                        pending.clear()
                    except OSError as e:
                        if e.errno == errno.EMSGSIZE:
                            raise InvalidRequest(f"request too large for one message ({len(pending[0])} bytes)") from None
                        raise SandboxError(f"send to {self.socket_path}: {e}") from None
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        data, _, flags, _ = sock.recvmsg(RECV_BUFFER)
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        # The daemon closed with our unread messages queued: the error is
                        # reported once, then what it sent before closing can be read.
                        resets += 1
                        if resets > 2:
                            raise self._closed_error() from None
                        continue
                    except OSError as e:
                        raise SandboxError(f"receive from {self.socket_path}: {e}") from None
                    if flags & _MSG_TRUNC:
                        raise ProtocolError(f"daemon sent a message larger than {RECV_BUFFER} bytes")
                    if not data:
                        raise self._closed_error()
                    if ex.feed(data):
                        return ex.result()
        finally:
            sock.close()

    @_ClientMethod
    def run(
        self,
        cmd: Optional[str] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[StdinData] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: bool = False,
        mounts: Optional[Sequence[MountSpec]] = None,
        max_output: Optional[int] = None,
        caps: Optional[Sequence[str]] = None,
    ) -> RunResult:
        """Run one command in a fresh sandbox and return what it did.

        Callable on the class (``Forkbox.run("echo hi")``, with a default client) or on an
        instance (``Forkbox(socket=path).run(...)``).

        Args:
            cmd: a shell command line, run as ``["/bin/sh", "-c", cmd]``.
            argv: a program and its arguments, run directly (``argv[0]`` without ``/`` is
                looked up in ``PATH``). Give exactly one of ``cmd`` and ``argv``.
            timeout_ms: the deadline in milliseconds; at it every process of the sandbox is
                killed and the result has ``timed_out`` and exit code 124.
            stdin: standard input (``str`` is encoded as UTF-8); default ``/dev/null``.
            env: the environment, replacing the default (``PATH`` is added when missing).
            cwd: the working directory inside the sandbox (absolute), default ``/``.
            memory_mb, pids, cpus: limits (default: the daemon's); ``result.limits`` says
                how each was enforced.
            network: ``True`` shares the host's network; default: only ``lo``.
            mounts: host paths bound into the sandbox: ``(host_path, sandbox_path)`` (read
                only) or ``(host_path, sandbox_path, "ro" | "rw")``. A relative host path is
                made absolute here.
            max_output: bytes kept per stream (default 1 MiB); beyond it the middle is dropped.
            caps: capabilities inside the sandbox's user namespace; default Docker's set,
                ``[]`` none.

        Arguments left ``None`` are not sent, so the daemon's defaults apply.

        Returns:
            The :class:`RunResult`, whatever the command's exit status.

        Raises:
            InvalidRequest: wrong arguments (checked before connecting) or a request the
                daemon refused.
            DaemonNotRunning: no daemon answers (and autostart is off or failed).
            SandboxBusy: the daemon stayed busy for ``busy_retry_s``.
            SandboxError: the daemon could not make the sandbox, closed the connection
                early, or the client-side deadline passed.
        """
        request, data = build_run_request(
            cmd, argv=argv, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, caps=caps,
        )
        result: RunResult = self._exchange("run", encode_run(request), data, self._run_budget(request))
        return result

    @_ClientMethod
    def info(self) -> Dict[str, Any]:
        """The daemon's facts and counters (the ``info`` verb): protocol, version, uid, mode,
        limits, defaults, live, served, pool, open_fds.

        Callable on the class or on an instance, as :meth:`run`.
        """
        info: Dict[str, Any] = self._exchange("info", encode_info(), None, self._info_budget())
        return info


async def _wait_fd(loop: asyncio.AbstractEventLoop, fd: int, writable: bool) -> None:
    fut: "asyncio.Future[None]" = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    if writable:
        loop.add_writer(fd, ready)
    else:
        loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


class AsyncForkbox(_ClientBase):
    """The asyncio client: the same calls as :class:`Forkbox`, as coroutines.

    Each call opens its own non-blocking connection, so many runs may go on at once on one
    client (``asyncio.gather(*(client.run(...) for ...))``). Takes the same constructor
    arguments as :class:`Forkbox`. Autostart (a blocking start-up wait) runs in the loop's
    default executor.
    """

    async def _connect(self, deadline: Optional[float]) -> socket.socket:
        loop = asyncio.get_running_loop()
        timeout = self.connect_timeout_s
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        try:
            return await self._connect_once(timeout)
        except DaemonNotRunning as e:
            if not self.autostart:
                raise DaemonNotRunning(
                    e.message + "; autostart is off for this socket", socket_path=self.socket_path
                ) from None
        await loop.run_in_executor(None, _daemon.start_daemon, self.socket_path)
        return await self._connect_once(timeout)

    async def _connect_once(self, timeout: float) -> socket.socket:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, self.socket_path), timeout)
            return sock
        except asyncio.TimeoutError:
            sock.close()
            raise ForkboxError(f"cannot connect to {self.socket_path}: timed out after {timeout:g} s") from None
        except OSError as e:
            sock.close()
            raise _daemon._connect_error(self.socket_path, e) from None
        except BaseException:
            sock.close()
            raise

    async def _exchange(self, verb: str, first: bytes, stdin: Optional[bytes], budget: Optional[float]) -> Any:
        start = time.monotonic()
        deadline = None if budget is None else start + budget
        attempt = 0
        while True:
            try:
                if deadline is None:
                    return await self._exchange_once(verb, first, stdin, None)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._timeout_error(budget or 0.0)
                try:
                    return await asyncio.wait_for(self._exchange_once(verb, first, stdin, deadline), left)
                except asyncio.TimeoutError:
                    raise self._timeout_error(budget or 0.0) from None
            except SandboxBusy:
                waited = time.monotonic() - start
                pause = _backoff(attempt)
                attempt += 1
                if waited + pause > self.busy_retry_s or (deadline is not None and time.monotonic() + pause > deadline):
                    raise
                await asyncio.sleep(pause)

    async def _send_all(self, sock: socket.socket, messages: Sequence[bytes]) -> None:
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        for msg in messages:
            while True:
                try:
                    sock.send(msg, _MSG_NOSIGNAL)
                    break
                except BlockingIOError:
                    await _wait_fd(loop, fd, True)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the daemon stopped reading: its reply tells why
                except OSError as e:
                    if e.errno == errno.EMSGSIZE:
                        raise InvalidRequest(f"request too large for one message ({len(msg)} bytes)") from None
                    raise SandboxError(f"send to {self.socket_path}: {e}") from None

    async def _exchange_once(self, verb: str, first: bytes, stdin: Optional[bytes], deadline: Optional[float]) -> Any:
        loop = asyncio.get_running_loop()
        sock = await self._connect(deadline)
        sender: "Optional[asyncio.Task[None]]" = None
        try:
            messages = [first]
            if stdin is not None:
                messages.extend(stdin_messages(stdin))
            # The request goes first, alone: an error in it must not be hidden by a task.
            await self._send_all(sock, messages[:1])
            if len(messages) > 1:
                sender = asyncio.ensure_future(self._send_all(sock, messages[1:]))
            ex = Exchange(verb)
            fd = sock.fileno()
            resets = 0
            while True:
                if sender is not None and sender.done():
                    sender.result()  # re-raise a send failure
                    sender = None
                try:
                    data, _, flags, _ = sock.recvmsg(RECV_BUFFER)
                except BlockingIOError:
                    await _wait_fd(loop, fd, False)
                    continue
                except ConnectionResetError:
                    resets += 1
                    if resets > 2:
                        raise self._closed_error() from None
                    continue
                except OSError as e:
                    raise SandboxError(f"receive from {self.socket_path}: {e}") from None
                if flags & _MSG_TRUNC:
                    raise ProtocolError(f"daemon sent a message larger than {RECV_BUFFER} bytes")
                if not data:
                    raise self._closed_error()
                if ex.feed(data):
                    return ex.result()
        finally:
            if sender is not None and not sender.done():
                sender.cancel()
                try:
                    await sender
                except BaseException:
                    pass
            sock.close()

    @_ClientMethod
    async def run(
        self,
        cmd: Optional[str] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        stdin: Optional[StdinData] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: bool = False,
        mounts: Optional[Sequence[MountSpec]] = None,
        max_output: Optional[int] = None,
        caps: Optional[Sequence[str]] = None,
    ) -> RunResult:
        """Run one command in a fresh sandbox: the coroutine of :meth:`Forkbox.run` (same
        arguments, result and exceptions). Callable on the class or on an instance."""
        request, data = build_run_request(
            cmd, argv=argv, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, caps=caps,
        )
        result: RunResult = await self._exchange("run", encode_run(request), data, self._run_budget(request))
        return result

    @_ClientMethod
    async def info(self) -> Dict[str, Any]:
        """The daemon's facts and counters: the coroutine of :meth:`Forkbox.info`."""
        info: Dict[str, Any] = await self._exchange("info", encode_info(), None, self._info_budget())
        return info
