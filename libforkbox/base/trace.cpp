#include "libforkbox/base/trace.hpp"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace forkbox::trace {

namespace {
bool on = false;     // a trace file or a stop label: mark() does something
int trace_fd = -1;
pid_t opener = 0;  // the forkbox process that opened the file
const char* stop_at = nullptr;  // FORKBOX_TEST_STOP_AT
pid_t stopped_in = 0;           // the process that stopped at it already (a fork inherits this)

void on_sigcont(int) {}

// The test hook: this process stops here until a SIGCONT (or dies of a SIGKILL).
void stop_here() {
    stopped_in = ::getpid();
    if (stopped_in != 1) {
        // Not raise(): a child on shared memory (vfork_helper.hpp) has another thread's id.
        ::kill(stopped_in, SIGSTOP);
        return;
    }
    // A pid namespace's init: a handler makes SIGCONT from the host reach us.
    struct sigaction sa {}, old {};
    sa.sa_handler = on_sigcont;
    sigemptyset(&sa.sa_mask);
    sigset_t cont, saved, wait_mask;
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    ::sigprocmask(SIG_BLOCK, &cont, &saved);
    ::sigaction(SIGCONT, &sa, &old);
    wait_mask = saved;
    sigdelset(&wait_mask, SIGCONT);
    ::sigsuspend(&wait_mask);
    ::sigaction(SIGCONT, &old, nullptr);
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);
}
}  // namespace

void open_from_env() {
    if (const char* s = std::getenv("FORKBOX_TEST_STOP_AT"); s && *s) {
        stop_at = s;
        on = true;
    }
    const char* path = std::getenv("FORKBOX_TRACE");
    if (!path || !*path) return;
    int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    // Far above the fds a caller passes on (--preserve-fds, LISTEN_FDS).
    trace_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 900);
    ::close(fd);
    opener = ::getpid();
    on = trace_fd >= 0 || on;
}

int fd() { return trace_fd; }

void mark(const char* label) {
    if (!on) return;
    if (trace_fd >= 0) {
        struct timespec ts;
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        char line[160];
        long long ns = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
        pid_t pid = ::getpid();
        // A child (container init, pid 1 in its own namespace) names the process it came from.
        int n = pid == opener ? std::snprintf(line, sizeof line, "%d %lld %s\n", static_cast<int>(pid), ns, label)
                              : std::snprintf(line, sizeof line, "%d/%d %lld %s\n", static_cast<int>(pid),
                                              static_cast<int>(opener), ns, label);
        if (n > 0) (void)!::write(trace_fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
    }
    // After the line: a test reading the trace knows the process is (about to be) stopped.
    if (stop_at && std::strcmp(label, stop_at) == 0 && stopped_in != ::getpid()) stop_here();
}

}  // namespace forkbox::trace
