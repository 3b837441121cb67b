#include "libforkbox/process/pidfd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/unix_socket.hpp"

namespace forkbox {

std::optional<ProcStat> read_proc_stat(pid_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    unique_fd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd) return std::nullopt;
    char buf[1024];
    ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
    if (n <= 0) return std::nullopt;
    buf[n] = 0;
    return parse_proc_stat(buf);
}

std::optional<ProcStat> parse_proc_stat(const char* text) {
    // comm may contain spaces and parentheses: fields start after the last ')'.
    const char* p = std::strrchr(text, ')');
    if (!p || p[1] != ' ') return std::nullopt;
    p += 2;
    ProcStat st;
    st.state = *p;
    // Field 3 is state, 4 the parent, 9 the flags, 11 and 13 the reaped children's minor
    // and major faults; start time is field 22.
    for (int field = 3; field < 22; ++field) {
        p = std::strchr(p, ' ');
        if (!p) return std::nullopt;
        ++p;
        if (field == 3) st.parent = static_cast<pid_t>(std::strtol(p, nullptr, 10));
        if (field == 8) st.flags = static_cast<unsigned>(std::strtoul(p, nullptr, 10));
        if (field == 10 || field == 12) st.children_faults += std::strtoull(p, nullptr, 10);
    }
    st.start_time = std::strtoull(p, nullptr, 10);
    return st;
}

pid_t pidfd_pid(int pidfd) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    unique_fd info(::open(path, O_RDONLY | O_CLOEXEC));
    if (!info) return -1;
    char buf[512];
    ssize_t n = ::read(info.get(), buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char* line = std::strstr(buf, "\nPid:");
    if (!line) return -1;
    long pid = std::strtol(line + 5, nullptr, 10);
    return pid > 0 ? static_cast<pid_t>(pid) : -1;
}

std::vector<unique_fd> open_children(pid_t parent) {
    std::vector<unique_fd> fds;
    char path[80];
    std::snprintf(path, sizeof path, "/proc/%d/task/%d/children", parent, parent);
    unique_fd list(::open(path, O_RDONLY | O_CLOEXEC));
    if (!list) return fds;
    char buf[4096];
    ssize_t n = ::read(list.get(), buf, sizeof buf - 1);
    if (n <= 0) return fds;
    buf[n] = 0;
    for (char* p = buf; *p;) {
        char* end;
        long pid = std::strtol(p, &end, 10);
        if (end == p) break;
        p = end;
        unique_fd fd(sys::pidfd_open(static_cast<pid_t>(pid)));
        if (!fd) continue;
        // After the open: a pid reused meanwhile names a process that is not the parent's
        // child, and the pidfd stays that process's whatever happens to the pid later.
        auto st = read_proc_stat(static_cast<pid_t>(pid));
        if (st && st->parent == parent) fds.push_back(std::move(fd));
    }
    return fds;
}

bool process_alive(pid_t pid, uint64_t start_time) {
    if (pid <= 0) return false;
    auto st = read_proc_stat(pid);
    if (!st) return false;
    if (start_time != 0 && st->start_time != start_time) return false;
    return st->state != 'Z' && st->state != 'X';
}

Result<unique_fd> open_pidfd(pid_t pid, uint64_t start_time) {
    unique_fd fd(sys::pidfd_open(pid));
    if (!fd) return sys_error("pidfd_open " + std::to_string(pid));
    // Checked after opening: from here on the pidfd pins the process we verified.
    if (!process_alive(pid, start_time)) return fail(ESRCH, "process " + std::to_string(pid) + " is gone");
    return fd;
}

bool wait_pidfd_exit(int pidfd, int timeout_ms) {
    struct pollfd p {pidfd, POLLIN, 0};
    for (;;) {
        int r = ::poll(&p, 1, timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        return r > 0;
    }
}

ChildGuard::~ChildGuard() { kill_now(); }

void ChildGuard::kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
}

Result<int> wait_child(pid_t pid) {
    int status = 0;
    for (;;) {
        if (::waitpid(pid, &status, 0) >= 0) return status;
        if (errno != EINTR) return sys_error("waitpid " + std::to_string(pid));
    }
}

int exit_code_from_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 255;
}

Result<void> send_pidfd(int socket, pid_t pid, std::string_view kind) {
    unique_fd pidfd(sys::pidfd_open(pid));
    if (!pidfd) return sys_error("pidfd_open");
    int fd = pidfd.get();
    return send_with_fds(socket, kind, std::span<const int>(&fd, 1), "pidfd socket");
}

}  // namespace forkbox
