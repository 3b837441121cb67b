// `run`: create + start + wait, forwarding signals to init, then delete unless --keep.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libforkbox/container.hpp"
#include "libforkbox/log.hpp"
#include "libforkbox/pidfd.hpp"

namespace forkbox {

namespace {
// Signals forwarded to the container rather than acted on by forkbox itself.
sigset_t forwarded_signals() {
    sigset_t set;
    sigfillset(&set);
    for (int s : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS})
        sigdelset(&set, s);
    return set;
}
}  // namespace

Result<int> run_container(const StateStore& store, const RunOptions& opt) {
    const std::string& id = opt.create.id;
    FB_ASSIGN(pid_t init, create_container(store, opt.create));
    if (opt.detach) {
        auto r = start_container(store, id);
        if (!r) {
            (void)delete_container(store, id, true);
            return std::unexpected(r.error());
        }
        return 0;
    }

    // Blocked before start, so no signal meant for the container is lost or acts on us.
    sigset_t set = forwarded_signals(), old;
    sigprocmask(SIG_BLOCK, &set, &old);
    unique_fd sfd(::signalfd(-1, &set, SFD_CLOEXEC));
    if (!sfd) return sys_error("signalfd");

    auto started = start_container(store, id);
    if (!started) {
        (void)delete_container(store, id, true);
        return std::unexpected(started.error());
    }
    int code = -1;
    while (code < 0) {
        struct signalfd_siginfo si;
        ssize_t n = ::read(sfd.get(), &si, sizeof si);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("read signalfd");
        }
        if (n != sizeof si) continue;
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGCHLD) {
            int status;
            pid_t p;
            while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
                if (p == init) code = exit_code_from_status(status);
            }
            continue;
        }
        if (sig == SIGWINCH || sig == SIGURG) continue;
        ::kill(init, sig);
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (!opt.keep) {
        if (auto r = delete_container(store, id, true); !r) log::warn("delete " + id + ": " + r.error().what());
    }
    return code;
}

}  // namespace forkbox
