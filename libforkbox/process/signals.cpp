#include "libforkbox/process/signals.hpp"

#include <sys/signalfd.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

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

// The 16 hex digits after `key` in /proc/self/status text: a mask of signals, bit N-1 for N.
bool status_mask(const char* text, const char* key, uint64_t& mask) {
    const char* at = std::strstr(text, key);
    if (!at) return false;
    at += std::strlen(key);
    while (*at == ' ' || *at == '\t') ++at;
    mask = 0;
    int digits = 0;
    for (; digits < 16; ++digits, ++at) {
        char c = *at;
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) break;
        mask = mask << 4 | static_cast<uint64_t>(v);
    }
    return digits == 16;
}

// The signals this process ignores or catches (SigIgn | SigCgt of /proc/self/status): one
// read, not a sigaction for each of the 64. All of them when the file cannot be read.
uint64_t non_default_signals() {
    char text[4096];
    int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ~uint64_t{0};
    ssize_t n = ::read(fd, text, sizeof text - 1);
    ::close(fd);
    uint64_t ignored = 0, caught = 0;
    if (n <= 0) return ~uint64_t{0};
    text[n] = '\0';
    if (!status_mask(text, "SigIgn:", ignored) || !status_mask(text, "SigCgt:", caught)) return ~uint64_t{0};
    return ignored | caught;
}

}  // namespace

void reset_signal_dispositions(UntilExec mode) {
    KernelSigaction dfl{};
    dfl.handler = SIG_DFL;
    struct sigaction exit_on{};
    exit_on.sa_handler = exit_as_killed_by;
    sigfillset(&exit_on.sa_mask);
    uint64_t not_default = non_default_signals();
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        bool was_default = sig > 64 || !((not_default >> (sig - 1)) & 1);
        // glibc's sigaction supplies the restorer x86_64 requires for a handler.
        if (mode == UntilExec::ExitOnTermination && forkbox_signal_ends_waiting_init(sig) &&
            ::sigaction(sig, &exit_on, nullptr) == 0)
            continue;
        if (!was_default) ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
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
