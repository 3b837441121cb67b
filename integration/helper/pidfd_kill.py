#!/usr/bin/env python3
"""pidfd_kill.py SOCKET RESULT SIGNAL: the receiving end of `--pidfd-socket` (runc's protocol).

Listens on the unix socket SOCKET (writing SOCKET.ready once it listens), accepts one
connection, takes the pidfd the runtime sends with SCM_RIGHTS, writes to RESULT the message
that came with it and the pid the pidfd names ("standard 1234"), then, once RESULT.go
exists (at most 30 s), sends SIGNAL (a number) through the pidfd. Exits 1 when no fd
arrives.
"""
import os
import signal
import sys
import time

from fd_receiver import receive_fds


def pid_of(pidfd):
    with open("/proc/self/fdinfo/%d" % pidfd) as info:
        for line in info:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    return -1


def main():
    path, result, sig = sys.argv[1], sys.argv[2], int(sys.argv[3])
    msg, fds = receive_fds(path)
    with open(result, "w") as out:
        if not fds:
            out.write("no fd received\n")
            return 1
        out.write("%s %d\n" % (msg.decode(), pid_of(fds[0])))
    deadline = time.monotonic() + 30
    while not os.path.exists(result + ".go") and time.monotonic() < deadline:
        time.sleep(0.02)
    signal.pidfd_send_signal(fds[0], sig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
