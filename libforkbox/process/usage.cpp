#include "libforkbox/process/usage.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "libforkbox/base/syscalls.hpp"

namespace forkbox {

namespace {

// A whole process's CPU clock (clock_getcpuclockid's, without its clock_getres check): the
// kernel's CPUCLOCK_SCHED of the process, pid in the caller's namespace. Unlike
// /proc/PID/schedstat, reading it brings a running task's time up to date.
clockid_t process_cpu_clock(pid_t pid) {
    return static_cast<clockid_t>((~static_cast<unsigned>(pid) << 3) | 2);
}

ssize_t pread_text(int fd, char* buf, size_t size) {
    ssize_t n = ::pread(fd, buf, size - 1, 0);
    if (n >= 0) buf[n] = 0;
    return n;
}

}  // namespace

pid_t pidfd_pid(int pidfd) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    unique_fd info(::open(path, O_RDONLY | O_CLOEXEC));
    if (!info) return -1;
    char buf[512];
    if (pread_text(info.get(), buf, sizeof buf) <= 0) return -1;
    const char* line = std::strstr(buf, "\nPid:");
    if (!line) return -1;
    long pid = std::strtol(line + 5, nullptr, 10);
    return pid > 0 ? static_cast<pid_t>(pid) : -1;
}

std::optional<LiveProcess> open_live_process(unique_fd pidfd) {
    LiveProcess p;
    p.pid = pidfd_pid(pidfd.get());
    if (p.pid <= 0) return std::nullopt;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", p.pid);
    p.stat.reset(::open(path, O_RDONLY | O_CLOEXEC));
    std::snprintf(path, sizeof path, "/proc/%d/status", p.pid);
    p.status.reset(::open(path, O_RDONLY | O_CLOEXEC));
    // Opened by pid: still the pidfd's process only if it was not reaped meanwhile.
    if (!p.stat || !p.status || sys::pidfd_send_signal(pidfd.get(), 0) < 0) return std::nullopt;
    p.pidfd = std::move(pidfd);
    return p;
}

std::optional<UsageSoFar> usage_so_far(const LiveProcess& p) {
    char buf[2048];
    if (pread_text(p.stat.get(), buf, sizeof buf) <= 0) return std::nullopt;
    // comm may hold spaces and parentheses: the fields start after the last ')'. Field 3 is
    // the state; 11 and 13 the reaped children's minor and major faults, which any child
    // that ran makes.
    char* f = std::strrchr(buf, ')');
    if (!f) return std::nullopt;
    ++f;
    unsigned long long children_faults = 0;
    for (int field = 3; field <= 13; ++field) {
        f = std::strchr(f, ' ');
        if (!f) return std::nullopt;
        ++f;
        if (field == 11 || field == 13) children_faults += std::strtoull(f, nullptr, 10);
    }
    if (children_faults != 0) return std::nullopt;
    if (pread_text(p.status.get(), buf, sizeof buf) <= 0) return std::nullopt;
    const char* hwm = std::strstr(buf, "\nVmHWM:");  // none once its exit dropped its memory
    if (!hwm) return std::nullopt;
    UsageSoFar u;
    u.peak_rss_bytes = std::strtoull(hwm + 7, nullptr, 10) * 1024;
    timespec cpu{};
    if (::clock_gettime(process_cpu_clock(p.pid), &cpu) < 0) return std::nullopt;
    u.cpu_ns = static_cast<uint64_t>(cpu.tv_sec) * 1000000000ull + static_cast<uint64_t>(cpu.tv_nsec);
    // Read by pid: its, only if it was not reaped by now.
    if (sys::pidfd_send_signal(p.pidfd.get(), 0) < 0) return std::nullopt;
    return u;
}

}  // namespace forkbox
