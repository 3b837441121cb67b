#include "libforkbox/signals.hpp"

#include <signal.h>

namespace forkbox {

void reset_signal_dispositions() {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        // EINVAL for the real-time signals glibc keeps for itself: nothing to reset there.
        ::sigaction(sig, &dfl, nullptr);
    }
}

}  // namespace forkbox
