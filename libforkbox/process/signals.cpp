#include "libforkbox/process/signals.hpp"

#include <sys/signalfd.h>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace forkbox {

namespace {

// The kernel's struct sigaction (asm-generic layout; x86_64 and aarch64 share it). glibc's
// sigaction() refuses the real-time signals it keeps for itself (32 and 33) with EINVAL, yet
// an ignored one is inherited across execve like any other: go to the kernel directly.
struct KernelSigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
};

}  // namespace

void reset_signal_dispositions() {
    KernelSigaction dfl{};
    dfl.handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
    }
}

Result<unique_fd> daemon_signalfd() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGPIPE}) sigaddset(&set, s);
    if (sigprocmask(SIG_BLOCK, &set, nullptr) < 0) return sys_error("block signals");
    unique_fd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd) return sys_error("signalfd");
    return fd;
}

}  // namespace forkbox
