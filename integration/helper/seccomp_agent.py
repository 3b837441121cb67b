#!/usr/bin/env python3
"""seccomp_agent.py SOCKET RESULT: a seccomp notify agent for linux.seccomp.listenerPath.

Listens on the unix socket SOCKET (writing SOCKET.ready once it listens), accepts one
connection, reads runc's ContainerProcessState JSON with the listener fd attached
(SCM_RIGHTS), writes the JSON as the first line of RESULT, then answers every notification
with success (return value 0, the syscall itself not run) and appends "nr=N" for each,
until the listener reports that the filter's processes are gone.
"""
import fcntl
import os
import struct
import sys

from fd_receiver import receive_fds

NOTIF = struct.Struct("<QIIiIQ6Q")  # struct seccomp_notif (80 bytes)
RESP = struct.Struct("<QqiI")  # struct seccomp_notif_resp (24 bytes)
IOCTL_RECV = 0xC0502100  # SECCOMP_IOCTL_NOTIF_RECV = _IOWR('!', 0, struct seccomp_notif)
IOCTL_SEND = 0xC0182101  # SECCOMP_IOCTL_NOTIF_SEND = _IOWR('!', 1, struct seccomp_notif_resp)


def main():
    path, result = sys.argv[1], sys.argv[2]
    data, fds = receive_fds(path)
    out = open(result, "w")
    out.write(data.decode() + "\n")
    out.flush()
    if not fds:
        out.write("no fd received\n")
        return 1
    listener = fds[0]
    while True:
        buf = bytearray(NOTIF.size)
        try:
            fcntl.ioctl(listener, IOCTL_RECV, buf, True)
        except OSError:  # ENOENT: no process left behind the filter
            break
        notif_id, pid, _, nr, _, _, *_ = NOTIF.unpack(buf)
        out.write("nr=%d\n" % nr)
        out.flush()
        try:
            fcntl.ioctl(listener, IOCTL_SEND, bytearray(RESP.pack(notif_id, 0, 0, 0)), True)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
