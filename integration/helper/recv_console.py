#!/usr/bin/env python3
"""recv_console.py SOCKET RESULT: the receiving end of `create --console-socket`.

Listens on the unix socket SOCKET (writing SOCKET.ready once it listens), accepts one
connection, takes the pty master fd the runtime sends with SCM_RIGHTS, and writes to
RESULT: "isatty=True|False", then everything read from the master until the container
closes its side (EIO). Exits 1 when no fd arrives.
"""
import os
import sys

from fd_receiver import receive_fds


def main():
    path, result = sys.argv[1], sys.argv[2]
    _, fds = receive_fds(path)
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
