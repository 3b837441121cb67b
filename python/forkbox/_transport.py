"""One connection to the daemon, message by message: :class:`Channel` (blocking, with
``poll``) and :class:`AsyncChannel` (asyncio).

A channel may carry request after request (the ``keep`` verb): :meth:`_Core.ask_keep`
sends it ahead of the first request, and the daemon's answer to it is taken here, before
the request's own messages, so that callers see only those.

A channel keeps a queue of messages to send and sends them while it waits to receive, so
that standard input written to a command never deadlocks against the output it makes (the
daemon stops reading when its own sends to us block). A message received while the caller
is only sending is kept in an inbox for the next :meth:`Channel.recv`. Nothing is read
ahead otherwise: a caller that stops receiving stops the daemon's sends (back-pressure).
"""

import asyncio
import collections
import errno
import random
import select
import socket
import time
from typing import Callable, Deque, Iterable, Optional

from .errors import InvalidRequest, ProtocolError, SandboxError
from ._protocol import RECV_BUFFER, TAG_RESULT, encode_keep

__all__ = ["Channel", "AsyncChannel", "BusyRetry", "KeepRefused"]

_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_MSG_TRUNC = getattr(socket, "MSG_TRUNC", 0x20)
# A reset is reported once for unread messages of ours the daemon dropped at its close;
# what it sent before closing can still be read after it.
_MAX_RESETS = 2


def _backoff(attempt: int) -> float:
    return float(min(0.5, 0.01 * 2.0 ** min(attempt, 6)) * (0.5 + random.random()))


class KeepRefused(Exception):
    """The daemon answered the ``keep`` verb with an error and closed the connection
    without reading the request sent after it: send that again on a new connection.
    ``permanent``: the daemon does not know the verb (an older one), so do not ask again;
    otherwise it could not serve sandboxes at that moment (its sandbox service was down)."""

    def __init__(self, permanent: bool) -> None:
        super().__init__("keep refused")
        self.permanent = permanent


class BusyRetry:
    """When to retry a ``busy`` reply: with backoff, for ``busy_retry_s`` in all, never past
    the call's deadline."""

    def __init__(self, busy_retry_s: float, deadline: Optional[float]) -> None:
        self.start = time.monotonic()
        self.busy_retry_s = busy_retry_s
        self.deadline = deadline
        self.attempt = 0

    def pause(self) -> Optional[float]:
        """Seconds to wait before the next attempt, or None: give up (raise the busy)."""
        pause = _backoff(self.attempt)
        self.attempt += 1
        now = time.monotonic()
        if now - self.start + pause > self.busy_retry_s:
            return None
        if self.deadline is not None and now + pause > self.deadline:
            return None
        return pause


class _Core:
    """What both channels share: the socket, the queues, and one non-blocking step each
    way."""

    def __init__(
        self,
        sock: socket.socket,
        path: str,
        deadline: Optional[float],
        timeout_error: Callable[[], SandboxError],
        closed_error: Callable[[], SandboxError],
        kept: bool = False,
    ) -> None:
        if not kept:  # a kept connection is non-blocking already
            sock.setblocking(False)
        self.sock = sock
        self.path = path
        self.deadline = deadline
        self._timeout_error = timeout_error
        self._closed_error = closed_error
        self.pending: Deque[bytes] = collections.deque()
        self.inbox: Deque[bytes] = collections.deque()
        self.resets = 0
        self.eof = False
        self.kept = kept
        """The daemon keeps this connection open after a final message (``keep``)."""
        self._keep_asked = False

    def queue(self, messages: Iterable[bytes]) -> None:
        """Messages to send, in order, as the socket takes them."""
        self.pending.extend(messages)

    def ask_keep(self) -> None:
        """Ask the daemon to keep this connection for later requests: the ``keep`` verb,
        sent before what is queued next and without waiting for its answer."""
        self.pending.append(encode_keep())
        self._keep_asked = True

    def reusable(self) -> bool:
        """True when the connection may carry another request: the daemon keeps it, and
        nothing went wrong on it. Call once the final message was received."""
        return self.kept and not self.eof and self.resets == 0

    def _take(self) -> Optional[bytes]:
        """The inbox's first message, or None when it was the answer to ``keep``.

        Raises:
            KeepRefused: ``keep`` was answered with an error.
        """
        msg = self.inbox.popleft()
        if not self._keep_asked:
            return msg
        self._keep_asked = False
        if msg[:1] != bytes([TAG_RESULT]):
            raise KeepRefused(permanent=b'"invalid_request"' in msg)
        self.kept = True
        return None

    def _try_send(self) -> bool:
        """Send the first pending message if the socket takes it now. True if it did."""
        if not self.pending:
            return False
        try:
            self.sock.send(self.pending[0], _MSG_NOSIGNAL)
        except BlockingIOError:
            return False
        except (BrokenPipeError, ConnectionResetError):
            # The daemon stopped reading (an error reply, the command gone): read on.
            self.pending.clear()
            return True
        except OSError as e:
            if e.errno == errno.EMSGSIZE:
                raise InvalidRequest(f"request too large for one message ({len(self.pending[0])} bytes)") from None
            raise SandboxError(f"send to {self.path}: {e}") from None
        self.pending.popleft()
        return True

    def _exchange_now(self) -> bool:
        """Without waiting: send what the socket takes, receive what it holds. True if a
        message was received."""
        self._try_send()
        return self._try_recv()

    def _try_recv(self) -> bool:
        """Receive one message into the inbox if one is there now. True if it did."""
        try:
            data, _, flags, _ = self.sock.recvmsg(RECV_BUFFER)
        except BlockingIOError:
            return False
        except ConnectionResetError:
            self.resets += 1
            if self.resets > _MAX_RESETS:
                raise self._closed_error() from None
            return True
        except OSError as e:
            raise SandboxError(f"receive from {self.path}: {e}") from None
        if flags & _MSG_TRUNC:
            raise ProtocolError(f"daemon sent a message larger than {RECV_BUFFER} bytes")
        if not data:
            self.eof = True
            raise self._closed_error()
        self.inbox.append(data)
        return True

    def _until(self, timeout: Optional[float]) -> Optional[float]:
        """The monotonic time a wait of ``timeout`` seconds ends, within the deadline."""
        ends = [t for t in (self.deadline, None if timeout is None else time.monotonic() + timeout) if t is not None]
        return min(ends) if ends else None

    def _expired(self, until: Optional[float]) -> bool:
        """True when ``until`` has passed; raises when it was the deadline."""
        if until is None or time.monotonic() < until:
            return False
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise self._timeout_error()
        return True

    def close(self) -> None:
        """Close the connection (the daemon ends what it was doing for it)."""
        self.sock.close()


class Channel(_Core):
    """A blocking channel: waits with ``poll``."""

    _poller: "Optional[select.poll]" = None
    _mask = 0

    def _step(self, until: Optional[float]) -> bool:
        """One wait for the socket and what it allows. False when ``until`` passed first."""
        if self._expired(until):
            return False
        if self.pending and self._try_send():
            return True  # the socket had room (the first message always has): no poll
        mask = select.POLLIN | (select.POLLOUT if self.pending else 0)
        fd = self.sock.fileno()
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(fd, mask)
        elif self._mask != mask:
            self._poller.modify(fd, mask)
        self._mask = mask
        wait_ms = -1 if until is None else max(0, int((until - time.monotonic()) * 1000) + 1)
        events = self._poller.poll(wait_ms)
        if not events:
            return not self._expired(until)
        ev = events[0][1]
        if ev & select.POLLOUT:
            self._try_send()
        if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
            self._try_recv()
        return True

    def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next message, sending pending ones meanwhile. ``None`` when ``timeout``
        seconds passed first (``0``: only what is there now).

        Raises:
            SandboxError: the deadline passed (the caller closes), the daemon closed.
        """
        until = self._until(timeout)
        while True:
            while not self.inbox:
                if timeout == 0:
                    if not self._exchange_now():
                        return None
                    continue
                if not self._step(until):
                    return None
            msg = self._take()
            if msg is not None:
                return msg

    def flush(self) -> None:
        """Send every pending message (receiving into the inbox meanwhile)."""
        while self.pending:
            self._step(self._until(None))


class AsyncChannel(_Core):
    """An asyncio channel: waits with the loop's reader and writer callbacks."""

    async def _step(self, until: Optional[float]) -> bool:
        if self._expired(until):
            return False
        if self._try_send() | self._try_recv():
            return True
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[None]" = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        fd = self.sock.fileno()
        writing = bool(self.pending)
        loop.add_reader(fd, ready)
        if writing:
            loop.add_writer(fd, ready)
        try:
            if until is None:
                await fut
            else:
                try:
                    await asyncio.wait_for(fut, max(0.0, until - time.monotonic()))
                except asyncio.TimeoutError:
                    return not self._expired(until)
        finally:
            loop.remove_reader(fd)
            if writing:
                loop.remove_writer(fd)
        return True

    async def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next message, sending pending ones meanwhile: the coroutine of
        :meth:`Channel.recv`."""
        until = self._until(timeout)
        while True:
            while not self.inbox:
                if timeout == 0:
                    if not self._exchange_now():
                        return None
                    continue
                if not await self._step(until):
                    return None
            msg = self._take()
            if msg is not None:
                return msg

    async def flush(self) -> None:
        """Send every pending message (receiving into the inbox meanwhile)."""
        while self.pending:
            await self._step(self._until(None))
