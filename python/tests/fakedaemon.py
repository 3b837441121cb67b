"""A test double of the forkbox daemon's sandbox protocol, for the SDK's own logic.

It is not a sandbox: it speaks the wire protocol on a real SOCK_SEQPACKET socket, with
scripted answers, so that the client's encoding, decoding, error mapping, stdin
streaming, deadlines and reconnects are tested without the daemon.

Used two ways:
- in-process: ``FakeDaemon(path, handler)`` serves each request with ``handler(conn)``
  in a thread per connection. A connection that asks for ``keep`` carries request after
  request, as the daemon's do: the handler is called again for each (``keep=False``: the
  verb is refused, as by a daemon older than it; ``None``: the handler gets it);
- as a program: ``python3 fakedaemon.py daemon --socket PATH`` (the ``FORKBOX_BIN`` of the
  autostart tests): serves ``info`` and echoes a run's argv; appends its pid to
  ``PATH.starts``; SIGTERM stops it.
"""

import json
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable, List, Optional

RECV = 256 * 1024


class Conn:
    """One accepted connection of the fake daemon."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received: List[bytes] = []
        self.kept = False
        self.closed = False
        self.finals = 0  # final messages sent
        self._unread: List[bytes] = []

    def recv(self, timeout: Optional[float] = 10.0) -> bytes:
        """One message (b"" at the client's close or on timeout)."""
        if self._unread:
            return self._unread.pop()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(RECV)
        except (socket.timeout, ConnectionResetError):
            return b""
        self.received.append(data)
        return data

    def request(self) -> Any:
        """The first message, split: (verb line, JSON object)."""
        first = self.recv()
        head, _, body = first.partition(b"\n")
        return head.decode(), (json.loads(body) if body else None)

    def send(self, data: bytes) -> None:
        self.sock.send(data)
        self.finals += data[:1] in (b"X", b"!")

    def unread(self, message: bytes) -> None:
        """Give ``message`` back: the next :meth:`recv` returns it."""
        self._unread.append(message)

    def result(self, **fields: Any) -> None:
        obj = {"exit_code": 0, "signal": None, "timed_out": False, "oom_killed": False,
               "duration_ms": 1.5, "stdout_dropped": 0, "stderr_dropped": 0,
               "limits": {"memory": "cgroup", "pids": "cgroup", "cpu": "cgroup"}, "exec_error": None}
        obj.update(fields)
        self.send(b"X" + json.dumps(obj).encode())

    def error(self, code: str, message: str) -> None:
        self.send(b"!" + json.dumps({"error": code, "message": message}).encode())

    def read_stdin(self) -> bytes:
        """The I messages up to E, concatenated."""
        chunks = []
        while True:
            m = self.recv()
            if not m or m == b"E":
                return b"".join(chunks)
            assert m[:1] == b"I", m[:20]
            chunks.append(m[1:])

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class FakeDaemon:
    """Serves ``handler(conn)`` for every connection on ``path`` until :meth:`stop`."""

    def __init__(self, path: str, handler: Callable[[Conn], None], keep: Optional[bool] = True) -> None:
        self.path = path
        self.handler = handler
        self.keep = keep
        self.keeps = 0  # keep verbs answered
        self.conns: List[Conn] = []
        self.errors: List[BaseException] = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(128)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            c = Conn(s)
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: Conn) -> None:
        try:
            first = c.recv()
            if first.startswith(b"sandbox/1 keep\n") and self.keep is not None:
                c.received.pop()
                if not self.keep:
                    c.error("invalid_request", 'unknown verb "keep"')
                    return
                c.kept = True
                with self.lock:
                    self.keeps += 1
                c.send(b'X{"keep":true}')
                first = c.recv()
            while first:
                c.unread(first)
                finals = c.finals
                self.handler(c)
                if not c.kept or c.closed or c.finals == finals:
                    return
                # The next request; what the last one's client sent after its end is dropped.
                first = c.recv(timeout=30)
                while first[:1] in (b"I", b"E", b"K"):
                    first = c.recv(timeout=30)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.errors.append(e)
        finally:
            c.close()

    def stop(self) -> None:
        self.stopping = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def echo_handler(c: Conn) -> None:
    """info: a fake info; run: stdout is the argv joined, stdin echoed on stderr."""
    verb, req = c.request()
    if verb == "sandbox/1 info":
        c.send(b"X" + json.dumps({"protocol": 1, "version": "fake", "uid": os.getuid(), "mode": "fake",
                                  "live": 0, "served": 0, "pid": os.getpid()}).encode())
        return
    if verb != "sandbox/1 run":
        c.error("invalid_request", f"unknown request {verb!r}")
        return
    if req.get("stdin"):
        c.send(b"2" + c.read_stdin())
    c.send(b"1" + " ".join(req["argv"]).encode())
    c.result(exit_code=0)


def main(argv: List[str]) -> int:
    if len(argv) != 3 or argv[0] != "daemon" or argv[1] != "--socket":
        print("usage: fakedaemon.py daemon --socket PATH", file=sys.stderr)
        return 2
    path = argv[2]
    try:
        os.unlink(path)
    except OSError:
        pass
    d = FakeDaemon(path, echo_handler)
    with open(path + ".starts", "a") as f:
        f.write(f"{os.getpid()}\n")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
