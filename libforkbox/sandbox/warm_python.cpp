#include "libforkbox/sandbox/embryo_parts.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <span>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/unix_socket.hpp"

// A sandbox of a warm Python kind, or a session's run_python, runs its code in a python3
// started before the code came: its interpreter's start-up and imports are off the path.
namespace forkbox::sandbox::embryo {

namespace {

// What both warm Pythons start with: python3 -c SCRIPT FD [MODULE...] imports the modules
// and says "R" on the socket FD (or "F" and why). run() then runs a request (cwd, code and
// the environment, with stdin, stdout and stderr) as `python3 -c CODE` would, in a fresh
// __main__: tracebacks and exit codes are python3's; the program's threads, atexit and
// streams are finished, the interpreter's teardown skipped (the process ends anyway).
constexpr const char* kPythonStart = R"PY(import os, sys, socket
s = socket.socket(fileno=int(sys.argv[1]))
try:
    for m in sys.argv[2:]:
        __import__(m)
except BaseException as e:
    s.send(("Fpreload: %s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")[:4000])
    os._exit(1)
def fds_of(anc):
    return [int.from_bytes(d[i:i + 4], sys.byteorder) for _, _, d in anc for i in range(0, len(d) - 3, 4)]
def run(cwd, code, env, fds):
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
        os.close(fd)
    os.environ.clear()
    for e in env:
        k, _, v = e.partition("=")
        os.environ[k] = v
    os.chdir(cwd)
    main = type(sys)("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        rc = 1
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    import atexit
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            rc = rc or 120
    os._exit(rc & 0xFF)
s.send(b"R")
)PY";

// A sandbox's own warm Python (pid 2): one request, "cwd\0code\0env..." with its stdio.
constexpr const char* kPythonOnce = R"PY(msg, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(12))
s.close()
cwd, code, *env = msg.decode("utf-8", "surrogateescape").split("\0")
run(cwd, code, env, fds_of(anc))
)PY";

// A session's warm Python: a fork per request ("id\0cwd\0code\0env..." with its stdio),
// each a process group of its own; it says "p<id> <pid>" when the request runs and
// "e<id> <wait status> <user us> <system us> <max rss KiB>" when it ended.
constexpr const char* kPythonZygote = R"PY(import select, signal
r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGCHLD, lambda *_: None)
runs = {}
def reap():
    while runs:
        try:
            pid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = runs.pop(pid, None)
        if rid is not None:
            s.send(("e%s %d %d %d %d" % (rid, status, ru.ru_utime * 1e6, ru.ru_stime * 1e6, ru.ru_maxrss)).encode())
while True:
    ready = select.select([s, r], [], [])[0]
    if r in ready:
        while True:
            try:
                os.read(r, 512)
            except BlockingIOError:
                break
        reap()
    if s not in ready:
        continue
    msg, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(12))
    if not msg:
        os._exit(0)
    fds = fds_of(anc)
    rid, cwd, code, *env = msg.decode("utf-8", "surrogateescape").split("\0")
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setpgid(0, 0)
        s.close()
        os.close(r)
        os.close(w)
        run(cwd, code, env, fds)
    for fd in fds:
        os.close(fd)
    runs[pid] = rid
    s.send(("p%s %d" % (rid, pid)).encode())
    reap()
)PY";

}  // namespace

WarmPython warm_python;

Result<WarmPython> start_python(WarmPythonRole role, const std::vector<std::string>& preload) {
    const char* script = role == WarmPythonRole::session ? kPythonZygote : kPythonOnce;
    bool own_group = role == WarmPythonRole::session;  // beside the session's runs
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
    unique_fd ours(sv[0]), theirs(sv[1]);
    if (::fcntl(theirs.get(), F_SETFD, 0) < 0) return sys_error("fcntl");
    Release r;
    // The script comes in the environment (which each request replaces), so that the
    // sandbox's process list shows a short command line.
    r.argv = {"python3", "-c", "import os; exec(os.environ.pop('FORKBOX_WARM_PYTHON'))", std::to_string(theirs.get())};
    r.argv.insert(r.argv.end(), preload.begin(), preload.end());
    r.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
             "FORKBOX_WARM_PYTHON=" + std::string(kPythonStart) + script};
    Command c = prepare(r);
    c.own_group = own_group;
    unique_fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    int stdio[3] = {null.get(), null.get(), null.get()};
    ::umask(022);
    pid_t pid = spawn(c, stdio);
    if (pid < 0) return sys_error("start python3");
    if (exec_errno) return fail(exec_errno, "exec python3");
    theirs.reset();
    char buf[4096];
    ssize_t n;
    do n = ::recv(ours.get(), buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0 || buf[0] != 'R') {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        if (n > 1 && buf[0] == 'F') return fail(EINVAL, "python3: " + std::string(buf + 1, static_cast<size_t>(n - 1)));
        return fail(EIO, "python3 exited before it was ready");
    }
    WarmPython w;
    w.pid = pid;
    w.socket = std::move(ours);
    if (auto stat = read_file("/proc/" + std::to_string(pid) + "/schedstat")) w.cpu_ns = std::strtoull(stat->c_str(), nullptr, 10);
    return w;
}

std::string python_request(const Release& r) {
    std::string m = r.cwd + '\0' + (r.argv.size() > 2 ? r.argv[2] : std::string());
    for (const auto& e : r.env) m += '\0' + e;
    return m;
}

[[noreturn]] void run_warm_python(int control, const Release& r, const int* stdio) {
    pid_t pid = warm_python.pid;
    limit_started(control, pid, r);
    int64_t used = stage_used();
    auto sent = send_with_fds(warm_python.socket.get(), python_request(r), std::span<const int>(stdio, 3), "warm python");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);
    if (!sent) {
        send_text(control, "X" + std::to_string(sent.error().errnum()) + " " + sent.error().what());
        ::kill(pid, SIGKILL);
    }
    warm_python.socket.reset();
    report_end(control, pid, used);
}

}  // namespace forkbox::sandbox::embryo
