"""fd_receiver: the listening end of the runtime's fd-passing sockets (--console-socket,
--pidfd-socket, linux.seccomp.listenerPath), for the helpers beside it."""
import array
import socket


def receive_fds(path, max_bytes=65536, max_fds=16):
    """Listens on the unix socket `path` (writing `path`.ready once it listens), accepts one
    connection and returns its first message and the fds that came with it (SCM_RIGHTS)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    with open(path + ".ready", "w") as ready:
        ready.write("ready\n")
    conn, _ = srv.accept()
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(max_bytes, socket.CMSG_SPACE(max_fds * fds.itemsize))
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
    conn.close()
    srv.close()
    return data, list(fds)
