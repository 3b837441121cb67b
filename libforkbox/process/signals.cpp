#include "libforkbox/process/signals.hpp"

#include <sys/signalfd.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libforkbox/process/waiting_init_signals.h"

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

void exit_as_killed_by(int sig) { _exit(128 + sig); }

sigset_t termination_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig = 1; sig <= FORKBOX_LAST_WAITING_INIT_SIGNAL; ++sig)
        if (forkbox_signal_ends_waiting_init(sig)) sigaddset(&set, sig);
    return set;
}

}  // namespace

void reset_signal_dispositions(UntilExec mode) {
    KernelSigaction dfl{};
    dfl.handler = SIG_DFL;
    struct sigaction exit_on{};
    exit_on.sa_handler = exit_as_killed_by;
    sigfillset(&exit_on.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        // glibc's sigaction supplies the restorer x86_64 requires for a handler.
        if (mode == UntilExec::ExitOnTermination && forkbox_signal_ends_waiting_init(sig) &&
            ::sigaction(sig, &exit_on, nullptr) == 0)
            continue;
        ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
    }
}

void block_termination_signals(bool block) {
    sigset_t set = termination_signals();
    sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
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

pid_t clone_vm_signals_blocked(int (*fn)(void*), void* stack_top, int flags, void* arg) {
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = ::clone(fn, stack_top, CLONE_VM | flags, arg);
    int clone_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    errno = clone_errno;
    return pid;
}

}  // namespace forkbox
