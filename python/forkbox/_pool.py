"""A client's idle connections to its daemon, kept for its next calls.

A call on a kept connection skips ``connect``, and the daemon its ``accept``. The pool is
bounded, drops what the daemon closed meanwhile
(it restarted, or stopped), and starts empty in a forked child: a connection shared by two
processes would mix their requests.
"""

import os
import select
import socket
import weakref
from typing import List, Optional

__all__ = ["IdleConnections"]

# More than one for a client shared by threads or by concurrent asyncio tasks; the daemon
# holds one fd per idle connection.
MAX_IDLE = 4


def _close_all(sockets: List[socket.socket]) -> None:
    while sockets:
        sockets.pop().close()


class IdleConnections:
    """Kept connections to one daemon, free for the next call. Thread-safe: ``list.pop``
    and ``append`` are atomic. Closed when the owner is collected, or at exit."""

    def __init__(self, owner: object) -> None:
        self._sockets: List[socket.socket] = []
        weakref.finalize(owner, _close_all, self._sockets)
        _EVERY_POOL.add(self)

    def forget(self) -> None:
        """In a forked child: close this process's copies of the parent's connections."""
        _close_all(self._sockets)

    def take(self) -> Optional[socket.socket]:
        """A kept connection the daemon still holds open, or None."""
        while True:
            try:
                sock = self._sockets.pop()
            except IndexError:
                return None
            # Between requests the daemon sends nothing: anything to read is its close.
            # (poll, not select: a process may hold fds beyond select's 1024.)
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            if not poller.poll(0):
                return sock
            sock.close()

    def put(self, sock: socket.socket) -> None:
        """Keep ``sock`` (whose last request is over) for a later call, or close it."""
        if len(self._sockets) < MAX_IDLE:
            self._sockets.append(sock)
        else:
            sock.close()

    def close(self) -> None:
        """Close every idle connection."""
        _close_all(self._sockets)


# Every pool, so that a forked child starts with none of its parent's connections (checked at
# the fork, not with a getpid per call).
_EVERY_POOL: "weakref.WeakSet[IdleConnections]" = weakref.WeakSet()


def _forget_in_child() -> None:
    for pool in list(_EVERY_POOL):
        pool.forget()


os.register_at_fork(after_in_child=_forget_in_child)
