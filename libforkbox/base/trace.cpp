#include "libforkbox/base/trace.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace forkbox::trace {

namespace {
int trace_fd = -1;
pid_t opener = 0;  // the forkbox process that opened the file
}

void open_from_env() {
    const char* path = std::getenv("FORKBOX_TRACE");
    if (!path || !*path) return;
    int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    // Far above the fds a caller passes on (--preserve-fds, LISTEN_FDS).
    trace_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 900);
    ::close(fd);
    opener = ::getpid();
}

int fd() { return trace_fd; }

void mark(const char* label) {
    if (trace_fd < 0) return;
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

}  // namespace forkbox::trace
