#include "libforkbox/process/signals.hpp"

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

}  // namespace forkbox
