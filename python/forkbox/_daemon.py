"""Finding the daemon's socket, and starting a per-user daemon when none answers."""

import errno
import fcntl
import os
import shutil
import socket
import subprocess
import time
from typing import List, Mapping, Optional, Tuple

from .errors import DaemonNotRunning, ForkboxError

__all__ = [
    "ROOT_SOCKET",
    "default_socket_path",
    "resolve_socket",
    "find_binary",
    "autostart_disabled_by_env",
    "scope_launcher",
    "start_daemon",
    "not_running_error",
    "connect_blocking",
    "NOT_RUNNING_ERRNOS",
]

ROOT_SOCKET = "/run/forkbox/forkbox.sock"
INITIAL_UID_MAP = (0, 0, 4294967295)
# connect() errors that mean "no daemon there".
NOT_RUNNING_ERRNOS = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR})
AUTOSTART_WAIT_S = 5.0
LOG_NAME = "forkbox-daemon.log"

# Daemons this process started. Kept referenced so that no ResourceWarning is raised for a
# child that is meant to outlive the call (it is a long-lived per-user service).
_started: List["subprocess.Popen[bytes]"] = []


def _read_uid_map() -> Optional[str]:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def _uid_map_is_initial(text: Optional[str]) -> bool:
    if text is None:
        # No /proc: nothing says we are in a user namespace.
        return True
    fields = text.split()
    if len(fields) != 3:
        return False
    try:
        return tuple(int(x) for x in fields) == INITIAL_UID_MAP
    except ValueError:
        return False


def default_socket_path(
    environ: Optional[Mapping[str, str]] = None,
    euid: Optional[int] = None,
    uid: Optional[int] = None,
    uid_map: Optional[str] = "",
) -> str:
    """The socket a default daemon serves, ignoring ``FORKBOX_SOCKET``.

    Root (euid 0 in the initial user namespace, or with ``USER=root``):
    ``/run/forkbox/forkbox.sock``. Anyone else, including root inside a user namespace
    whose ``USER`` is not ``root``: ``$XDG_RUNTIME_DIR/forkbox/forkbox.sock``, or
    ``/run/user/<uid>/forkbox/forkbox.sock`` when ``XDG_RUNTIME_DIR`` is unset.

    The arguments exist for tests; by default they are read from this process.
    """
    env = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    uid = os.getuid() if uid is None else uid
    if euid == 0:
        text = _read_uid_map() if uid_map == "" else uid_map
        in_userns = not _uid_map_is_initial(text)
        if not (in_userns and env.get("USER") != "root"):
            return ROOT_SOCKET
    xdg = env.get("XDG_RUNTIME_DIR")
    base = xdg if xdg else f"/run/user/{uid}"
    return os.path.join(base, "forkbox", "forkbox.sock")


def resolve_socket(
    explicit: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> Tuple[str, bool]:
    """The socket to use and whether it is the default one (not given by the caller nor by
    ``FORKBOX_SOCKET``): ``socket=`` > ``$FORKBOX_SOCKET`` > :func:`default_socket_path`."""
    env = os.environ if environ is None else environ
    if explicit:
        return os.fspath(explicit), False
    from_env = env.get("FORKBOX_SOCKET")
    if from_env:
        return from_env, False
    return default_socket_path(env), True


def autostart_disabled_by_env(environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when ``FORKBOX_NO_AUTOSTART`` is set to something other than ``""``/``0``."""
    env = os.environ if environ is None else environ
    v = env.get("FORKBOX_NO_AUTOSTART", "")
    return v not in ("", "0")


def find_binary(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The forkbox binary: ``$FORKBOX_BIN``, else ``forkbox`` in ``PATH``, else
    ``/usr/local/bin/forkbox``; ``None`` when none is an executable file."""
    env = os.environ if environ is None else environ
    given = env.get("FORKBOX_BIN")
    if given:
        return given if os.access(given, os.X_OK) and os.path.isfile(given) else None
    found = shutil.which("forkbox", path=env.get("PATH", os.defpath))
    if found:
        return found
    fallback = "/usr/local/bin/forkbox"
    return fallback if os.access(fallback, os.X_OK) else None


def scope_launcher(environ: Optional[Mapping[str, str]] = None, euid: Optional[int] = None) -> List[str]:
    """The command an autostarted daemon runs under, so that it gets cgroups of its own.

    For a user (not root) whose systemd user manager runs (``$XDG_RUNTIME_DIR/systemd/private``
    exists) and who has ``systemd-run``: ``systemd-run --user --scope -p Delegate=yes``, a
    scope whose cgroup the daemon is delegated, where it makes its sandboxes' cgroups (memory,
    pids and cpu limits instead of rlimits). Otherwise, or with ``FORKBOX_NO_SCOPE`` set to
    something other than ``""``/``0``, none (``[]``).
    """
    env = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    if euid == 0 or env.get("FORKBOX_NO_SCOPE", "") not in ("", "0"):
        return []
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime or not os.path.exists(os.path.join(runtime, "systemd", "private")):
        return []
    tool = shutil.which("systemd-run", path=env.get("PATH", os.defpath))
    if tool is None:
        return []
    return [tool, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]


def not_running_error(path: str, reason: str, extra: str = "") -> DaemonNotRunning:
    """The :class:`DaemonNotRunning` for ``path``, with how to start a daemon."""
    msg = (
        f"no forkbox daemon answers on {path} ({reason}); "
        f"start one with: forkbox daemon --socket {path}"
    )
    if extra:
        msg += f" ({extra})"
    return DaemonNotRunning(msg, socket_path=path)


def _connect_error(path: str, e: OSError) -> ForkboxError:
    if e.errno in NOT_RUNNING_ERRNOS:
        return not_running_error(path, os.strerror(e.errno or 0).lower())
    if e.errno in (errno.EACCES, errno.EPERM):
        return ForkboxError(
            f"cannot connect to {path}: permission denied (a daemon serves only its own uid, "
            "or the members of its --allow-group)"
        )
    return ForkboxError(f"cannot connect to {path}: {e}")


def connect_blocking(path: str, timeout_s: Optional[float]) -> socket.socket:
    """A connected SOCK_SEQPACKET socket to ``path`` (blocking mode).

    Raises:
        DaemonNotRunning: nothing listens there.
        ForkboxError: any other connect failure.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        sock.settimeout(None)
        return sock
    except socket.timeout:
        sock.close()
        raise ForkboxError(f"cannot connect to {path}: timed out after {timeout_s} s (daemon overloaded?)") from None
    except OSError as e:
        sock.close()
        raise _connect_error(path, e) from None


def _probe(path: str, timeout_s: float) -> bool:
    """True when something answers an ``info`` request on ``path`` within ``timeout_s``."""
    from ._protocol import Exchange, RECV_BUFFER, encode_info

    try:
        sock = connect_blocking(path, timeout_s)
    except ForkboxError:
        return False
    try:
        sock.settimeout(timeout_s)
        sock.send(encode_info())
        ex = Exchange("info")
        while True:
            data = sock.recv(RECV_BUFFER)
            if not data:
                return False
            if ex.feed(data):
                return True
    except (OSError, ForkboxError):
        return False
    finally:
        sock.close()


def _tail(path: str, n: int = 600) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def _spawn(argv: List[str], log_path: str, env: Mapping[str, str]) -> "subprocess.Popen[bytes]":
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            env=dict(env),
            cwd="/",
        )
    _started.append(proc)
    return proc


def _wait_for_daemon(path: str, proc: "subprocess.Popen[bytes]", wait_s: float) -> Optional[int]:
    """None once a daemon answers on ``path``; else ``proc``'s exit status, or -1 when it
    neither answered nor exited within ``wait_s``."""
    until = time.monotonic() + wait_s
    while True:
        if _probe(path, 1.0):
            return None
        code = proc.poll()
        if code is not None:
            return code
        if time.monotonic() > until:
            return -1
        time.sleep(0.05)


def start_daemon(path: str, wait_s: float = AUTOSTART_WAIT_S, environ: Optional[Mapping[str, str]] = None) -> None:
    """Start ``forkbox daemon --socket PATH`` detached, unless a daemon answers there by
    now, and wait up to ``wait_s`` seconds for it to answer ``info``.

    Concurrent callers (threads, processes) serialize on a lock file beside the socket, so
    that a single daemon is started. Its output goes to ``forkbox-daemon.log`` beside the
    socket. A user's daemon is started in a systemd scope of its own when the user's systemd
    can make one (:func:`scope_launcher`), else as it is.

    Raises:
        DaemonNotRunning: no binary, or the daemon did not answer in time.
    """
    env = dict(os.environ if environ is None else environ)
    binary = find_binary(env)
    if binary is None:
        raise not_running_error(
            path,
            "no daemon, and no forkbox binary to start one",
            "autostart looked at $FORKBOX_BIN, forkbox in PATH and /usr/local/bin/forkbox",
        )
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as e:
        raise not_running_error(path, "no daemon", f"autostart cannot make {directory}: {e.strerror}") from None
    lock_path = os.path.join(directory, ".forkbox-autostart.lock")
    deadline = time.monotonic() + wait_s + 5.0
    try:
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise not_running_error(path, "no daemon", f"autostart cannot open {lock_path}: {e.strerror}") from None
    try:
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise not_running_error(path, "no daemon", f"autostart: {lock_path} stays locked") from None
                time.sleep(0.02)
        # Another caller may have started it while we waited for the lock.
        if _probe(path, 1.0):
            return
        log_path = os.path.join(directory, LOG_NAME)
        command = [binary, "daemon", "--socket", path]
        launcher = scope_launcher(env)
        if launcher:
            # A scope of its own when the user's systemd makes one; if it cannot (no bus, an
            # old systemd), the daemon is started as it is, with rlimits.
            proc = _spawn(launcher + command, log_path, env)
            code = _wait_for_daemon(path, proc, wait_s)
            if code is None:
                return
            if code < 0:  # neither up nor gone: not left to race the next one for the socket
                proc.kill()
                proc.wait()
        proc = _spawn(command, log_path, env)
        code = _wait_for_daemon(path, proc, wait_s)
        if code is None:
            return
        if code >= 0:
            raise not_running_error(
                path,
                f"autostart: {binary} daemon exited with status {code}",
                f"log {log_path}: {_tail(log_path)}",
            )
        raise not_running_error(
            path,
            f"autostart: {binary} daemon (pid {proc.pid}) did not answer within {wait_s:g} s",
            f"log {log_path}",
        )
    finally:
        os.close(lock_fd)
