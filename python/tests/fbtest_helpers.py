"""Helpers of the integration tests: a real daemon process, raw protocol exchanges, and
looks at the host (/proc, mountinfo, cgroups) to check that nothing leaks."""

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Set

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BINARY = os.path.normpath(os.path.join(PYTHON_DIR, os.pardir, "build", "forkbox"))
RECV = 128 * 1024
SYSTEM_PYTHON = "/usr/bin/python3"

# Generous bounds that only keep a broken daemon from hanging the suite.
HANG_GUARD_S = 600
CLIENT_TIMEOUT_S = 180.0

ROOTLESS_USER = "fbrootless"
ROOTLESS_UID = 23456


def binary_under_test() -> str:
    """``$FORKBOX_BIN``, else ``build/forkbox`` of this tree."""
    return os.environ.get("FORKBOX_BIN") or DEFAULT_BINARY


def copy_binary(src: str, directory: str) -> str:
    """A private copy of the binary (a rebuild during the run does not disturb it)."""
    dst = os.path.join(directory, "forkbox")
    shutil.copy2(src, dst)
    os.chmod(dst, 0o755)
    return dst


def raw_exchange(path: str, messages: Sequence[bytes], timeout: float = 30.0) -> List[bytes]:
    """Send ``messages`` on a fresh connection; return what came back up to the final
    message (or the close)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        for m in messages:
            try:
                s.send(m)
            except (BrokenPipeError, ConnectionResetError):
                break
        out: List[bytes] = []
        resets = 0
        while True:
            try:
                d = s.recv(RECV)
            except ConnectionResetError:
                resets += 1
                if resets > 2:
                    break
                continue
            if not d:
                break
            out.append(d)
            if d[:1] in (b"X", b"!"):
                break
        return out
    finally:
        s.close()


def raw_info(path: str, timeout: float = 5.0) -> Optional[Dict[str, Any]]:
    """The daemon's info object, or None when it does not answer one."""
    try:
        msgs = raw_exchange(path, [b"sandbox/1 info\n{}"], timeout)
    except OSError:
        return None
    if msgs and msgs[-1][:1] == b"X":
        try:
            obj = json.loads(msgs[-1][1:])
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None
    return None


def describe_answer(path: str) -> str:
    try:
        msgs = raw_exchange(path, [b"sandbox/1 info\n{}"], 5.0)
    except OSError as e:
        return f"connect/recv error: {e}"
    return repr(msgs)[:300] if msgs else "closed the connection without a reply"


def peer_pid(path: str) -> int:
    """The pid of the process serving ``path`` (SO_PEERCRED)."""
    import struct

    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    try:
        s.connect(path)
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _, _ = struct.unpack("3i", creds)
        return pid
    finally:
        s.close()


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout: float) -> bool:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def user_prefix(uid: int, home: str, runtime_dir: str, extra_env: Optional[Dict[str, str]] = None) -> List[str]:
    """``setpriv`` to the user, with a clean environment."""
    name = pwd.getpwuid(uid).pw_name
    env = {
        "HOME": home, "USER": name, "LOGNAME": name, "XDG_RUNTIME_DIR": runtime_dir,
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
    }
    env.update(extra_env or {})
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", "env", "-i"] + [
        f"{k}={v}" for k, v in env.items()
    ]


class DaemonProc:
    """A ``forkbox daemon --socket SOCK`` process (as root, or behind ``prefix``)."""

    def __init__(self, binary: str, sock: str, log_path: str, prefix: Sequence[str] = (),
                 args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.sock = sock
        self.log_path = log_path
        self.prefix = list(prefix)
        self.args = list(args)
        self.proc: Optional["subprocess.Popen[bytes]"] = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.prefix + [self.binary, "daemon", "--socket", self.sock] + self.args,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )

    def wait_ready(self, timeout: float = 15.0) -> Optional[Dict[str, Any]]:
        """Its info once it answers, or None (exited, or no answer in time)."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if self.proc is None or self.proc.poll() is not None:
                return None
            info = raw_info(self.sock, 2.0)
            if info is not None:
                return info
            time.sleep(0.1)
        return None

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        """SIGTERM, wait; SIGKILL (its pid only) if it does not stop."""
        if self.proc is None:
            return None
        p, self.proc = self.proc, None
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                return p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                return p.wait(10)
        return p.returncode

    def restart(self) -> Optional[Dict[str, Any]]:
        self.stop()
        self.start()
        return self.wait_ready()

    def log_tail(self, n: int = 1500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


# Looks at the host ------------------------------------------------------------------------


def procs_with(needle: str) -> List[int]:
    """Pids whose command line contains ``needle``."""
    want = needle.encode()
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if want in f.read():
                    out.append(int(name))
        except OSError:
            pass
    return out


def children_of(pid: int) -> List[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(name))
    return out


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def mount_points() -> Set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f if line.strip()}


def sandbox_cgroups() -> Set[str]:
    """Cgroup directories under /sys/fs/cgroup whose path contains ``forkbox-sandbox`` (the
    parent and every sandbox's group below it)."""
    found: Set[str] = set()
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        for d in dirs:
            path = os.path.join(root, d)
            if "forkbox-sandbox" in path:
                found.add(path)
    return found


def host_snapshot(info: Dict[str, Any], daemon_pid: int) -> Dict[str, Any]:
    """What a daemon holds, from its info and from the host: fds and children of the daemon
    and of its sandbox service process, host mount points, sandbox cgroups."""
    pids = sorted({daemon_pid, int(info.get("service_pid") or daemon_pid)})
    fds, children = {}, {}
    for p in pids:
        try:
            fds[p] = fd_count(p)
        except OSError:
            fds[p] = None
        children[p] = len(children_of(p))
    service = int(info.get("service_pid") or daemon_pid)
    # Sandbox cgroups are named <service pid>-<n>; the ready embryos of the pool have theirs.
    mine = {c for c in sandbox_cgroups() if os.path.basename(c).startswith(f"{service}-")}
    return {"info": info, "fds": fds, "children": children, "mounts": mount_points(), "cgroups": mine}


def leak_differences(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
    """What ``after`` holds more (or otherwise) than ``before``."""
    out = []
    bi, ai = before["info"], after["info"]
    if ai.get("live") != 0:
        out.append(f"live {ai.get('live')}")
    if ai.get("sessions", 0) != 0:
        out.append(f"sessions {ai.get('sessions')}")
    for key in ("open_fds",):
        if ai.get(key) != bi.get(key):
            out.append(f"info {key} {bi.get(key)} -> {ai.get(key)}")
    if (ai.get("pool") or {}).get("ready") != (bi.get("pool") or {}).get("ready"):
        out.append(f"pool {bi.get('pool')} -> {ai.get('pool')}")
    if after["fds"] != before["fds"]:
        out.append(f"/proc/PID/fd counts {before['fds']} -> {after['fds']}")
    if after["children"] != before["children"]:
        out.append(f"children {before['children']} -> {after['children']}")
    new_mounts = after["mounts"] - before["mounts"]
    if new_mounts:
        out.append(f"new host mounts {sorted(new_mounts)[:10]}")
    if len(after["cgroups"]) != len(before["cgroups"]):
        out.append(f"the service's cgroups {len(before['cgroups'])} -> {len(after['cgroups'])}: "
                   f"{sorted(after['cgroups'] - before['cgroups'])[:10]}")
    return out


def idle_snapshot(sock: str, daemon_pid: int, like: Optional[Dict[str, Any]] = None,
                  timeout: float = 30.0) -> Dict[str, Any]:
    """What the daemon holds once idle (no live sandbox or session, no build going on, and
    the same in two looks in a row: a look can catch an fd in passing on a loaded host);
    with ``like``, waits (up to ``timeout``) until it holds the same as then: a leak never
    gets there, a slow pool refill does."""
    until = time.monotonic() + timeout
    last: Optional[Dict[str, Any]] = None
    while True:
        snap = host_snapshot(raw_info(sock) or {}, daemon_pid)
        info = snap["info"]
        pool = info.get("pool") or {}
        # Held embryos (kept for forks while a session of their kind lives) go shortly after.
        idle = (info.get("live") == 0 and info.get("sessions", 0) == 0 and pool.get("building", 0) == 0
                and pool.get("held", 0) == 0 and info.get("exiting", 0) == 0)
        if idle and like is not None:
            idle = not leak_differences(like, snap)
        elif idle:
            idle = last is not None and not leak_differences(last, snap)
        if idle or time.monotonic() > until:
            return snap
        last = snap
        time.sleep(0.1)


def host_pids() -> int:
    return sum(1 for n in os.listdir("/proc") if n.isdigit())


def net_interfaces(proc_net_dev: str) -> List[str]:
    """Interface names in the text of /proc/net/dev."""
    names = []
    for line in proc_net_dev.splitlines()[2:]:
        if ":" in line:
            names.append(line.split(":", 1)[0].strip())
    return names


def make_tmp(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


ESCAPE_SCRIPT = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    conv = [ctypes.c_long(a) if isinstance(a, int) else ctypes.c_char_p(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    return 0 if r != -1 else ctypes.get_errno()
out = {}
out["mount"] = sc(165, b"none", b"/mnt", b"tmpfs", 0, 0)
out["umount2"] = sc(166, b"/", 0)
out["ptrace"] = sc(101, 0, 0, 0, 0)                      # PTRACE_TRACEME
out["bpf"] = sc(321, 5, 0, 0)                            # BPF_PROG_LOAD, NULL
out["reboot"] = sc(169, 0, 0, 0, 0)                      # bad magic: EINVAL if allowed
out["kexec_load"] = sc(246, 0, 0, 0, 0)
out["init_module"] = sc(175, 0, 0, b"")
out["finit_module"] = sc(313, -1, b"", 0)
out["delete_module"] = sc(176, b"fb_no_such_module", 0)
out["keyctl"] = sc(250, 0, -3, 0)                        # KEYCTL_GET_KEYRING_ID, session
out["add_key"] = sc(248, b"user", b"fbtest", b"x", 1, -2)  # to the process keyring
out["perf_event_open"] = sc(298, 0, 0, -1, -1, 0)
out["setns"] = sc(308, -1, 0)
out["userfaultfd"] = sc(323, 0)
out["open_by_handle_at"] = sc(304, -1, 0, 0)
out["clone3"] = sc(435, 0, 0)
out["unshare(CLONE_NEWUSER)"] = sc(272, 0x10000000)
# The new mount API (Flatpak's CVE-2021-41133: a profile that blocked only mount(2)).
out["open_tree"] = sc(428, -100, b"/", 1)                # OPEN_TREE_CLONE of /
out["move_mount"] = sc(429, -1, b"", -1, b"", 0)
out["fsopen"] = sc(430, b"tmpfs", 0)
out["fsconfig"] = sc(431, -1, 0, 0, 0, 0)
out["fsmount"] = sc(432, -1, 0, 0)
out["fspick"] = sc(433, -100, b"/", 0)
out["mount_setattr"] = sc(442, -100, b"/", 0, 0, 0)
# io_uring's operations bypass seccomp; another process's fds and memory.
out["io_uring_setup"] = sc(425, 1, 0)
out["pidfd_getfd"] = sc(438, -1, 0, 0)
out["process_vm_writev"] = sc(311, 1, 0, 0, 0, 0, 0)
out["kcmp"] = sc(312, 1, 1, 0, 0, 0)
out["iopl"] = sc(172, 3)
out["x32 getpid"] = sc(0x40000000 + 39)                  # the x32 ABI: ENOSYS either way
print(json.dumps(out))
"""

ESCAPE_EXPECTED = {name: 1 for name in (  # EPERM
    "mount", "umount2", "ptrace", "bpf", "reboot", "kexec_load", "init_module", "finit_module",
    "delete_module", "keyctl", "add_key", "perf_event_open", "setns", "userfaultfd",
    "open_by_handle_at", "unshare(CLONE_NEWUSER)", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "io_uring_setup", "pidfd_getfd", "process_vm_writev",
    "kcmp", "iopl",
)}
ESCAPE_EXPECTED["clone3"] = 38  # ENOSYS
ESCAPE_EXPECTED["x32 getpid"] = 38


def escape_mismatches(stdout: str) -> Dict[str, str]:
    import errno

    got = json.loads(stdout.strip().splitlines()[-1])
    bad = {}
    for name, want in ESCAPE_EXPECTED.items():
        have = got.get(name)
        if have != want:
            bad[name] = f"errno {errno.errorcode.get(have, have) if have else 'none (succeeded)'}, " \
                        f"expected {errno.errorcode[want]}"
    return bad
