#!/usr/bin/env python3
"""recv_console.py SOCKET RESULT: the receiving end of `create --console-socket`.

Listens on the unix socket SOCKET (writing SOCKET.ready once it listens), accepts one
connection, takes the pty master fd the runtime sends with SCM_RIGHTS, and writes to
RESULT: "isatty=True|False", then everything read from the master until the container
closes its side (EIO). Exits 1 when no fd arrives.
"""
import array
import os
import socket
import sys


def main():
    path, result = sys.argv[1], sys.argv[2]
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    with open(path + ".ready", "w") as ready:
        ready.write("ready\n")
    conn, _ = srv.accept()
    fds = array.array("i")
    _, ancdata, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    conn.close()
    with open(result, "w") as out:
        if not fds:
            out.write("no fd received\n")
            return 1
        master = fds[0]
        out.write("isatty=%s\n" % os.isatty(master))
        out.flush()
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the last slave fd was closed
                break
            if not chunk:
                break
            out.write(chunk.decode(errors="replace"))
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
