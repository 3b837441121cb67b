#include "libforkbox/process/usage.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/process/pidfd.hpp"

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
    // A reaped child's faults are counted there: any child that ran made some.
    auto stat = parse_proc_stat(buf);
    if (!stat || stat->children_faults != 0) return std::nullopt;
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
