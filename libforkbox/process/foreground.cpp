#include "libforkbox/process/foreground.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/terminal.hpp"

namespace forkbox {

namespace {

// Signals forwarded to the container rather than acted on by forkbox itself.
sigset_t forwarded_set() {
    sigset_t set;
    sigfillset(&set);
    for (int s : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS})
        sigdelset(&set, s);
    return set;
}

// Writes all of buf; false when the reader is gone.
bool write_all(int fd, const char* buf, size_t len) {
    while (len > 0) {
        ssize_t n = ::write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                pollfd p{fd, POLLOUT, 0};
                ::poll(&p, 1, -1);
                continue;
            }
            return false;
        }
        buf += n;
        len -= static_cast<size_t>(n);
    }
    return true;
}

// Copies what the master has now to stdout; false at EOF/EIO (every slave closed).
bool pump_master(int master) {
    char buf[16384];
    for (;;) {
        ssize_t n = ::read(master, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return true;
        if (n <= 0) return false;
        if (!write_all(1, buf, static_cast<size_t>(n))) return false;
    }
}

// Milliseconds to the deadline for poll(), rounded up so a wake-up is never early; -1 for none.
int poll_timeout(const std::optional<std::chrono::steady_clock::time_point>& deadline) {
    if (!deadline) return -1;
    auto left = *deadline - std::chrono::steady_clock::now();
    if (left <= left.zero()) return 0;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

bool cancels(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

}  // namespace

Result<ForwardedSignals> ForwardedSignals::block(Cancels cancels) {
    ForwardedSignals s;
    sigset_t set = forwarded_set();
    if (cancels == Cancels::Later)
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigdelset(&set, sig);
    if (sigprocmask(SIG_BLOCK, &set, &s.old_) < 0) return sys_error("block signals");
    s.restore_ = true;
    s.fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!s.fd_) return sys_error("signalfd");
    return s;
}

Result<void> ForwardedSignals::block_cancels() {
    sigset_t set = forwarded_set();
    if (sigprocmask(SIG_BLOCK, &set, nullptr) < 0) return sys_error("block signals");
    if (::signalfd(fd_.get(), &set, 0) < 0) return sys_error("signalfd");
    return {};
}

ForwardedSignals::ForwardedSignals(ForwardedSignals&& other) noexcept
    : fd_(std::move(other.fd_)), held_(std::move(other.held_)), old_(other.old_), restore_(other.restore_) {
    other.restore_ = false;
}

ForwardedSignals::~ForwardedSignals() {
    if (restore_) sigprocmask(SIG_SETMASK, &old_, nullptr);
}

Result<bool> ForwardedSignals::wait_readable(int fd, int timeout_ms) {
    for (;;) {
        pollfd fds[2] = {{fd, POLLIN, 0}, {fd_.get(), POLLIN, 0}};
        int ready = ::poll(fds, 2, timeout_ms);
        if (ready < 0) {
            if (errno == EINTR) continue;
            return sys_error("poll");
        }
        if (ready == 0) return false;
        if (fds[0].revents) return true;
        signalfd_siginfo si;
        while (::read(fd_.get(), &si, sizeof si) == sizeof si) {
            int sig = static_cast<int>(si.ssi_signo);
            if (cancels(sig)) return fail(EINTR, std::string("interrupted by SIG") + sigabbrev_np(sig));
            // SIGCHLD is ours: supervision reaps whatever is left when the process runs.
            if (sig != SIGCHLD && sig != SIGURG) held_.push_back(sig);
        }
    }
}

void ForwardedSignals::forward_held(pid_t pid) {
    for (int sig : held_) ::kill(pid, sig);
    held_.clear();
}

Result<int> supervise_foreground(pid_t pid, const ForwardedSignals& signals, int master) {
    FB_ASSIGN(ForegroundExit exit, supervise_foreground(pid, signals, master, Supervision{}));
    return exit.code;
}

Result<ForegroundExit> supervise_foreground(pid_t pid, const ForwardedSignals& signals, int master,
                                            const Supervision& supervision) {
    std::optional<RawTerminal> raw;
    bool stdin_open = false;
    if (master >= 0) {
        raw.emplace(0);
        copy_window_size(0, master);
        ::fcntl(master, F_SETFL, ::fcntl(master, F_GETFL) | O_NONBLOCK);
        stdin_open = true;
    }
    int code = -1;
    bool master_open = master >= 0;
    ForegroundExit exit;
    auto stop = [&] {
        if (supervision.kill_container) supervision.kill_container();
        else ::kill(pid, SIGKILL);
    };
    while (code < 0) {
        pollfd fds[3] = {{signals.fd(), POLLIN, 0}, {master_open ? master : -1, POLLIN, 0},
                         {stdin_open ? 0 : -1, POLLIN, 0}};
        int timeout = exit.timed_out || exit.cancelled_by ? -1 : poll_timeout(supervision.deadline);
        int ready = ::poll(fds, 3, timeout);
        if (ready < 0) {
            if (errno == EINTR) continue;
            return sys_error("poll");
        }
        if (ready == 0) {  // the deadline
            exit.timed_out = true;
            stop();
            continue;
        }
        if (fds[1].revents) master_open = pump_master(master);
        if (fds[2].revents) {
            char buf[4096];
            ssize_t n = ::read(0, buf, sizeof buf);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0 || !write_all(master, buf, static_cast<size_t>(n))) stdin_open = false;
        }
        if (!fds[0].revents) continue;
        signalfd_siginfo si;
        while (::read(signals.fd(), &si, sizeof si) == sizeof si) {
            int sig = static_cast<int>(si.ssi_signo);
            if (sig == SIGCHLD) {
                int status;
                pid_t p;
                while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
                    if (WIFSTOPPED(status)) {
                        // A stop reported without WUNTRACED is a ptrace stop: a container
                        // process that called PTRACE_TRACEME made us, its parent, the tracer.
                        // Let it go with the signal it stopped for, as if untraced.
                        ::ptrace(PTRACE_DETACH, p, nullptr,
                                 reinterpret_cast<void*>(static_cast<long>(WSTOPSIG(status))));
                        continue;
                    }
                    if (p == pid) code = exit_code_from_status(status);
                }
            } else if (sig == SIGWINCH) {
                if (master >= 0) copy_window_size(0, master);
            } else if (supervision.cancel_on_signal && cancels(sig)) {
                if (!exit.cancelled_by && !exit.timed_out) {
                    exit.cancelled_by = sig;
                    stop();
                }
            } else if (sig != SIGURG) {
                ::kill(pid, sig);
            }
        }
    }
    // What the process wrote just before it exited is still in the pty.
    if (master_open) (void)pump_master(master);
    exit.code = exit.timed_out ? 124 : exit.cancelled_by ? 128 + exit.cancelled_by : code;
    return exit;
}

}  // namespace forkbox
