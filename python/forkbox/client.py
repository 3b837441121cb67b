"""The clients: :class:`Forkbox` (blocking) and :class:`AsyncForkbox` (asyncio)."""

import asyncio
import functools
import inspect
import os
import socket
import threading
import time
import types
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    List,
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
    Exchange,
    MountSpec,
    PathArg,
    StdinData,
    build_create_request,
    build_python_request,
    build_run_request,
    encode_info,
    encode_request,
    encode_run,
    stdin_messages,
)
from ._pool import IdleConnections
from ._transport import AsyncChannel, BusyRetry, Channel, KeepRefused
from .async_sandbox import AsyncSandbox
from .errors import DaemonNotRunning, ForkboxError, InvalidRequest, ProtocolError, SandboxError
from .result import RunResult, SandboxInfo
from ._session import session_id
from .sandbox import Sandbox

__all__ = ["Forkbox", "AsyncForkbox"]

R = TypeVar("R")

INFO_TIMEOUT_S = 30.0
# The daemon fails a file verb after 60 s (ETIMEDOUT); create, fork and the control verbs
# are quicker. The client waits that long plus its grace.
VERB_TIMEOUT_S = 60.0


class _ClientMethod(Generic[R]):
    """A method callable on an instance or on the class.

    ``client.run(...)`` is an ordinary method call. ``Forkbox.run(...)`` calls the default
    client (``Forkbox()``: socket from the environment, autostart as configured there),
    one per socket and autostart setting, kept for later calls with its idle connections.
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
                return await func(_default_client(cls), *args, **kwargs)  # type: ignore[misc]

            call_async.__signature__ = self._class_signature  # type: ignore[attr-defined]
            return call_async  # type: ignore[return-value]

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> R:
            return func(_default_client(cls), *args, **kwargs)  # type: ignore[misc]

        call.__signature__ = self._class_signature  # type: ignore[attr-defined]
        return call


# The clients of class-level calls, by class, socket and autostart (the environment may
# change between calls); the oldest goes beyond a few.
_DEFAULT_CLIENTS: "Dict[Any, _ClientBase]" = {}
_DEFAULT_CLIENTS_LOCK = threading.Lock()
_MAX_DEFAULT_CLIENTS = 8


def _autostart_for(autostart: Optional[bool], socket_is_default: bool) -> bool:
    if _daemon.autostart_disabled_by_env():
        return False
    return socket_is_default if autostart is None else autostart


def _default_client(cls: Type[Any]) -> Any:
    path, is_default = _daemon.resolve_socket(None)
    key = (cls, path, _autostart_for(None, is_default))
    with _DEFAULT_CLIENTS_LOCK:
        client = _DEFAULT_CLIENTS.get(key)
        if client is None:
            while len(_DEFAULT_CLIENTS) >= _MAX_DEFAULT_CLIENTS:
                _DEFAULT_CLIENTS.pop(next(iter(_DEFAULT_CLIENTS))).close()
            client = _DEFAULT_CLIENTS[key] = cls()
    return client


class _ClientBase:
    """What both clients share: configuration, socket resolution, deadlines, idle
    connections."""

    def __init__(
        self,
        socket: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        autostart: Optional[bool] = None,
        request_timeout_s: Optional[float] = None,
        timeout_grace_s: float = 5.0,
        busy_retry_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        keep_connections: bool = True,
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
        self.autostart: bool = _autostart_for(autostart, is_default)
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
        if not isinstance(keep_connections, bool):
            raise InvalidRequest(f"keep_connections must be a bool, not {keep_connections!r}")
        self.keep_connections: bool = keep_connections
        self._idle = IdleConnections(self)
        self._keep_refused = False  # by a daemon older than the keep verb: not asked again

    def close(self) -> None:
        """Close the idle connections this client keeps (the client stays usable: a later
        call connects again). They are closed too when the client is collected, and at the
        end of ``with Forkbox(...) as fb:`` (``async with`` for :class:`AsyncForkbox`)."""
        self._idle.close()

    def _reuse(self) -> Optional[socket.socket]:
        """An idle kept connection, or None."""
        return self._idle.take() if self.keep_connections else None

    def _asks_keep(self, keep: bool) -> bool:
        return keep and self.keep_connections and not self._keep_refused

    def _finish(self, ch: Union[Channel, AsyncChannel], clean: bool) -> None:
        """Done with ``ch``: kept for the next call when its request ended with its final
        message on a connection the daemon keeps, else closed (which ends whatever the
        daemon still does for it)."""
        if clean and ch.reusable():
            self._idle.put(ch.sock)
        else:
            ch.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(socket={self.socket_path!r}, autostart={self.autostart})"

    def _run_budget(self, request: Mapping[str, Any], default_timeout_ms: Optional[int] = None) -> Optional[float]:
        """Seconds the client waits for a run's final message, or None (forever).
        ``default_timeout_ms`` is the deadline that applies when the request gives none (a
        session's)."""
        budgets = []
        if self.request_timeout_s is not None:
            budgets.append(float(self.request_timeout_s))
        t = request.get("timeout_ms", default_timeout_ms)
        if t is not None:
            budgets.append(t / 1000.0 + self.timeout_grace_s)
        return min(budgets) if budgets else None

    def _info_budget(self) -> float:
        return float(self.request_timeout_s) if self.request_timeout_s is not None else INFO_TIMEOUT_S

    def _verb_budget(self) -> float:
        """Seconds the client waits for a session verb's final message (create, file, fork,
        pause, resume, close, list)."""
        if self.request_timeout_s is not None:
            return float(self.request_timeout_s)
        return VERB_TIMEOUT_S + self.timeout_grace_s

    @staticmethod
    def _deadline(budget: Optional[float]) -> Optional[float]:
        return None if budget is None else time.monotonic() + budget

    def _channel_errors(self, budget: Optional[float]) -> Dict[str, Callable[[], SandboxError]]:
        return {"timeout_error": lambda: self._timeout_error(budget or 0.0), "closed_error": self._closed_error}

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

    A call takes a connection of its own: one the client kept from an earlier call (the
    daemon keeps it open between requests), else a new one. One client may be shared by
    threads.

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
        keep_connections: keep connections open between calls (at most a few, idle),
            which saves each later call a ``connect``; ``False``: one connection per call.
            :meth:`close` closes the idle ones.

    A client-side deadline that passes closes the connection, which kills the sandbox, and
    raises :class:`SandboxError`.
    """

    def __enter__(self) -> "Forkbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    def _open(self, deadline: Optional[float], budget: Optional[float], keep: bool = False) -> Channel:
        """A channel bounded by ``deadline``: on an idle kept connection, else on a new one
        (asking the daemon to keep it when ``keep``: give it back with :meth:`_finish`)."""
        errors = self._channel_errors(budget)
        sock = self._reuse()
        if sock is not None:
            return Channel(sock, self.socket_path, deadline, kept=True, **errors)
        ch = Channel(self._connect(deadline), self.socket_path, deadline, **errors)
        if self._asks_keep(keep):
            ch.ask_keep()
        return ch

    def _exchange(self, kind: str, first: bytes, stdin: Optional[bytes], budget: Optional[float],
                  **exchange: Any) -> Any:
        """One request and its answer (``kind``: see :class:`Exchange`), ``busy`` retried.

        ``exchange`` goes to the :class:`Exchange` (``path``, ``session``, callbacks).
        """
        deadline = self._deadline(budget)
        retry = BusyRetry(self.busy_retry_s, deadline)
        keep = True
        while True:
            ex = Exchange(kind, **exchange)
            ch = self._open(deadline, budget, keep=keep)
            clean = False
            try:
                ch.queue([first])
                if stdin is not None:
                    ch.queue(stdin_messages(stdin))
                while True:
                    msg = ch.recv()
                    if msg is not None and ex.feed(msg):
                        break
                clean = True
            except KeepRefused as e:
                self._keep_refused = self._keep_refused or e.permanent
                keep = False
                continue  # the request was not read: again, on a connection of its own
            finally:
                self._finish(ch, clean)
            if ex.busy and not ex.data_received:
                pause = retry.pause()
                if pause is not None:
                    time.sleep(pause)
                    continue
            return ex.result()

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
        rootfs: Optional[PathArg] = None,
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
            rootfs: the sandbox's read-only root instead of the daemon's (by default the
                host's ``/``): a directory or an OCI bundle (its ``root.path``), such as an
                image unpacked for the agent; a relative path is made absolute here. Only
                the daemon's own user may choose one. Each root is a kind of sandbox the
                daemon keeps ready once asked for.

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
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, caps=caps, rootfs=rootfs,
        )
        result: RunResult = self._exchange("run", encode_run(request), data, self._run_budget(request))
        return result

    @_ClientMethod
    def run_python(
        self,
        code: str,
        *,
        preload: Optional[Sequence[str]] = None,
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
        rootfs: Optional[PathArg] = None,
    ) -> RunResult:
        """Run Python code in a fresh sandbox, without the interpreter's start-up.

        The daemon keeps sandboxes whose ``python3`` has already started (and imported
        ``preload``); the code runs there as ``python3 -c code`` would: a fresh ``__main__``,
        python3's traceback on stderr and exit code 1 for an exception, ``sys.exit``'s code.
        Each call is a sandbox of its own, used once: nothing of one call is seen by the
        next. Callable on the class or on an instance, as :meth:`run`.

        Args:
            code: the Python source.
            preload: modules the interpreter imports before the call (``["numpy"]``); each
                list is a kind of sandbox the daemon keeps ready once asked for. A module
                that fails to import makes the call fail (:class:`SandboxError`, naming it).
            timeout_ms, stdin, env, cwd, memory_mb, pids, cpus, network, mounts, max_output,
                rootfs: as :meth:`run` (the root must have ``python3``).

        Returns:
            The :class:`RunResult` (``cpu_ms`` leaves out the interpreter's start-up).
        """
        request, data = build_python_request(
            code, preload=preload, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, rootfs=rootfs,
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

    @_ClientMethod
    def create(
        self,
        *,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: bool = False,
        mounts: Optional[Sequence[MountSpec]] = None,
        caps: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        ttl_s: Optional[int] = None,
        idle_s: Optional[int] = None,
        rootfs: Optional[PathArg] = None,
    ) -> Sandbox:
        """Make a session: one sandbox kept for many runs and file verbs (a
        :class:`forkbox.Sandbox`). Callable on the class or on an instance, as :meth:`run`.

        >>> with Forkbox.create(memory_mb=512, timeout_ms=30_000, ttl_s=600) as sb:
        ...     sb.write_file("/work/main.py", "print(6*7)")
        ...     sb.run("cd /work && python3 main.py").stdout
        '42\\n'

        Args:
            memory_mb, pids, cpus, network, mounts, caps, rootfs: the sandbox's, as for
                :meth:`run`; for the session's whole life (and its forks').
            timeout_ms: the deadline of each run in it that gives none.
            ttl_s: end the session this many seconds after it began (default: never).
            idle_s: end it this many seconds after its last run or file verb ended
                (default: the daemon's, 600 s).

        Raises:
            InvalidRequest, DaemonNotRunning, SandboxBusy, SandboxError: as :meth:`run`
                (a session counts as one sandbox against the daemon's ``--max-sandboxes``).
        """
        request = build_create_request(memory_mb=memory_mb, pids=pids, cpus=cpus, network=network, mounts=mounts,
                                       caps=caps, timeout_ms=timeout_ms, ttl_s=ttl_s, idle_s=idle_s, rootfs=rootfs)
        reply = self._exchange("object", encode_request("create", request), None, self._verb_budget())
        return Sandbox(self, _session_of(reply), limits=_limits_of(reply), timeout_ms=timeout_ms)

    @_ClientMethod
    def connect(self, sandbox_id: str) -> Sandbox:
        """The session ``sandbox_id`` (made by this or another process), as a
        :class:`forkbox.Sandbox`. Nothing is sent: a session that has ended raises
        :class:`forkbox.SandboxClosed` at its first call."""
        return Sandbox(self, session_id(sandbox_id))

    @_ClientMethod
    def sandboxes(self) -> List[SandboxInfo]:
        """The caller's sessions on this daemon (the ``list`` verb), each a
        :class:`forkbox.SandboxInfo`."""
        found: List[SandboxInfo] = self._exchange("sessions", encode_request("list", {}), None, self._verb_budget())
        return found


class AsyncForkbox(_ClientBase):
    """The asyncio client: the same calls as :class:`Forkbox`, as coroutines.

    Each call takes a non-blocking connection of its own (kept from an earlier call, or
    new), so many runs may go on at once on one client
    (``asyncio.gather(*(client.run(...) for ...))``). Takes the same constructor
    arguments as :class:`Forkbox`. Autostart (a blocking start-up wait) runs in the loop's
    default executor.
    """

    async def __aenter__(self) -> "AsyncForkbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

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

    async def _open(self, deadline: Optional[float], budget: Optional[float], keep: bool = False) -> AsyncChannel:
        """A channel bounded by ``deadline``: the coroutine of :meth:`Forkbox._open`."""
        errors = self._channel_errors(budget)
        sock = self._reuse()
        if sock is not None:
            return AsyncChannel(sock, self.socket_path, deadline, kept=True, **errors)
        ch = AsyncChannel(await self._connect(deadline), self.socket_path, deadline, **errors)
        if self._asks_keep(keep):
            ch.ask_keep()
        return ch

    async def _exchange(self, kind: str, first: bytes, stdin: Optional[bytes], budget: Optional[float],
                        **exchange: Any) -> Any:
        """One request and its answer: the coroutine of :meth:`Forkbox._exchange`."""
        deadline = self._deadline(budget)
        retry = BusyRetry(self.busy_retry_s, deadline)
        keep = True
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise self._timeout_error(budget or 0.0)
            ex = Exchange(kind, **exchange)
            ch = await self._open(deadline, budget, keep=keep)
            clean = False
            try:
                ch.queue([first])
                if stdin is not None:
                    ch.queue(stdin_messages(stdin))
                while True:
                    msg = await ch.recv()
                    if msg is not None and ex.feed(msg):
                        break
                clean = True
            except KeepRefused as e:
                self._keep_refused = self._keep_refused or e.permanent
                keep = False
                continue  # the request was not read: again, on a connection of its own
            finally:
                self._finish(ch, clean)
            if ex.busy and not ex.data_received:
                pause = retry.pause()
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
            return ex.result()

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
        rootfs: Optional[PathArg] = None,
    ) -> RunResult:
        """Run one command in a fresh sandbox: the coroutine of :meth:`Forkbox.run` (same
        arguments, result and exceptions). Callable on the class or on an instance."""
        request, data = build_run_request(
            cmd, argv=argv, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, caps=caps, rootfs=rootfs,
        )
        result: RunResult = await self._exchange("run", encode_run(request), data, self._run_budget(request))
        return result

    @_ClientMethod
    async def run_python(
        self,
        code: str,
        *,
        preload: Optional[Sequence[str]] = None,
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
        rootfs: Optional[PathArg] = None,
    ) -> RunResult:
        """Run Python code in a fresh sandbox by a warm interpreter: the coroutine of
        :meth:`Forkbox.run_python`. Callable on the class or on an instance."""
        request, data = build_python_request(
            code, preload=preload, timeout_ms=timeout_ms, stdin=stdin, env=env, cwd=cwd, memory_mb=memory_mb,
            pids=pids, cpus=cpus, network=network, mounts=mounts, max_output=max_output, rootfs=rootfs,
        )
        result: RunResult = await self._exchange("run", encode_run(request), data, self._run_budget(request))
        return result

    @_ClientMethod
    async def info(self) -> Dict[str, Any]:
        """The daemon's facts and counters: the coroutine of :meth:`Forkbox.info`."""
        info: Dict[str, Any] = await self._exchange("info", encode_info(), None, self._info_budget())
        return info

    @_ClientMethod
    def create(
        self,
        *,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: bool = False,
        mounts: Optional[Sequence[MountSpec]] = None,
        caps: Optional[Sequence[str]] = None,
        timeout_ms: Optional[int] = None,
        ttl_s: Optional[int] = None,
        idle_s: Optional[int] = None,
        rootfs: Optional[PathArg] = None,
    ) -> "_Creating":
        """Make a session, as :meth:`Forkbox.create`, giving an :class:`forkbox.AsyncSandbox`.

        Either awaited (``sb = await client.create()``) or entered
        (``async with AsyncForkbox.create() as sb:``, which closes it at the end of the
        block). The arguments are checked when this is called.
        """
        request = build_create_request(memory_mb=memory_mb, pids=pids, cpus=cpus, network=network, mounts=mounts,
                                       caps=caps, timeout_ms=timeout_ms, ttl_s=ttl_s, idle_s=idle_s, rootfs=rootfs)
        return _Creating(self._create(request, timeout_ms))

    async def _create(self, request: Dict[str, Any], timeout_ms: Optional[int]) -> AsyncSandbox:
        reply = await self._exchange("object", encode_request("create", request), None, self._verb_budget())
        return AsyncSandbox(self, _session_of(reply), limits=_limits_of(reply), timeout_ms=timeout_ms)

    @_ClientMethod
    def connect(self, sandbox_id: str) -> AsyncSandbox:
        """The session ``sandbox_id`` as an :class:`forkbox.AsyncSandbox`, as
        :meth:`Forkbox.connect` (not a coroutine: nothing is sent)."""
        return AsyncSandbox(self, session_id(sandbox_id))

    @_ClientMethod
    async def sandboxes(self) -> List[SandboxInfo]:
        """The caller's sessions: the coroutine of :meth:`Forkbox.sandboxes`."""
        found: List[SandboxInfo] = await self._exchange("sessions", encode_request("list", {}), None,
                                                        self._verb_budget())
        return found


class _Creating:
    """A session being made by :meth:`AsyncForkbox.create`: await it for the
    :class:`forkbox.AsyncSandbox`, or ``async with`` it to close the session at the end."""

    def __init__(self, making: "Awaitable[AsyncSandbox]") -> None:
        self._making = making
        self._sandbox: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._making.__await__()

    async def __aenter__(self) -> AsyncSandbox:
        self._sandbox = await self._making
        return self._sandbox

    async def __aexit__(self, *exc: object) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()


def _session_of(reply: Any) -> str:
    sid = reply.get("session") if isinstance(reply, dict) else None
    if not isinstance(sid, str) or not sid:
        raise ProtocolError(f"daemon sent a create result without a session id: {reply!r}")
    return sid


def _limits_of(reply: Any) -> Optional[Dict[str, str]]:
    limits = reply.get("limits") if isinstance(reply, dict) else None
    return {str(k): str(v) for k, v in limits.items()} if isinstance(limits, dict) else None
