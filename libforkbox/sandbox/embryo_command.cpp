#include "libforkbox/sandbox/embryo_parts.hpp"

#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "libforkbox/base/trace.hpp"
#include "libforkbox/process/caps.hpp"

// How an embryo starts a command, and reports its end.
namespace forkbox::sandbox::embryo {

void send_text(int control, const std::string& m) { ::send(control, m.data(), m.size(), MSG_NOSIGNAL); }

[[noreturn]] void exec_failed(int control, int err, std::string_view what) {
    send_text(control, "X" + std::to_string(err) + " " + std::string(what) + ": " + std::strerror(err));
    ::_exit(err == ENOENT ? 127 : 126);
}

void limit_started(int control, pid_t pid, const Release& r) {
    rlimit nproc{r.nproc_limit, r.nproc_limit}, address{r.address_limit, r.address_limit};
    if (r.nproc_limit && ::prlimit(pid, RLIMIT_NPROC, &nproc, nullptr) < 0) exec_failed(control, errno, "RLIMIT_NPROC");
    if (r.address_limit && ::prlimit(pid, RLIMIT_AS, &address, nullptr) < 0) exec_failed(control, errno, "RLIMIT_AS");
}

volatile int exec_errno = 0;

Command prepare(const Release& r) {
    Command c;
    for (const auto& a : r.argv) c.argv.push_back(const_cast<char*>(a.c_str()));
    c.argv.push_back(nullptr);
    for (const auto& e : r.env) c.envp.push_back(const_cast<char*>(e.c_str()));
    c.envp.push_back(nullptr);
    const std::string& file = r.argv[0];
    if (file.find('/') != std::string::npos) {
        c.candidates.push_back(file);
    } else {
        // PATH of the command's environment, as a shell would search it.
        std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        for (const auto& e : r.env)
            if (e.starts_with("PATH=")) path = e.substr(5);
        size_t start = 0;
        while (start <= path.size()) {
            size_t end = path.find(':', start);
            if (end == std::string::npos) end = path.size();
            std::string dir = path.substr(start, end - start);
            c.candidates.push_back((dir.empty() ? "." : dir) + "/" + file);
            start = end + 1;
        }
    }
    c.address = rlimit{r.address_limit, r.address_limit};
    c.limit_address = r.address_limit != 0;
    sigemptyset(&c.mask);
    return c;
}

pid_t spawn(const Command& c, const int* stdio) {
    exec_errno = 0;
    pid_t pid = ::vfork();
    if (pid != 0) return pid;
    if (c.own_group) ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &c.mask, nullptr);
    if (c.cwd && ::chdir(c.cwd) < 0) {
        exec_errno = errno;
        ::_exit(errno == ENOENT ? 127 : 126);
    }
    for (int i = 0; i < 3; ++i)
        if (::dup2(stdio[i], i) < 0) {
            exec_errno = errno;
            ::_exit(126);
        }
    if ((c.script_fd >= 0 && ::dup2(c.script_fd, 3) < 0) || (c.line_end_fd >= 0 && ::dup2(c.line_end_fd, 4) < 0)) {
        exec_errno = errno;
        ::_exit(126);
    }
    if (c.batch) {
        sched_param none{};
        ::sched_setscheduler(0, SCHED_BATCH, &none);
    }
    // The address-space limit binds the command, not this process.
    if ((c.limit_address && ::setrlimit(RLIMIT_AS, &c.address) < 0) ||
        (c.limit_nproc && ::setrlimit(RLIMIT_NPROC, &c.nproc) < 0)) {
        exec_errno = errno;
        ::_exit(126);
    }
    int err = ENOENT;
    for (const auto& candidate : c.candidates) {
        ::execve(candidate.c_str(), c.argv.data(), c.envp.data());
        if (errno != ENOENT && errno != ENOTDIR) err = errno;
    }
    exec_errno = err;
    ::_exit(err == ENOENT ? 127 : 126);
}

std::string monotonic_ns_text() {
    auto now = std::chrono::steady_clock::now().time_since_epoch();
    return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

std::string usage_text(int status, const rusage& usage) {
    return std::to_string(status) + " " + std::to_string(usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec) + " " +
           std::to_string(usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec) + " " + std::to_string(usage.ru_maxrss);
}

Result<void> drop_every_capability() {
    FB_TRY(drop_bounding_set(0));
    return apply_capabilities(CapabilitySets{});
}

[[noreturn]] void report_end(int control, pid_t command, int64_t used_before) {
    int status = 0;
    rusage usage{};
    for (;;) {
        pid_t p = ::wait4(-1, &status, 0, &usage);
        if (p == command) break;
        if (p < 0 && errno != EINTR) ::_exit(1);
    }
    std::string reaped_at = monotonic_ns_text();
    trace::mark("embryo: command reaped");
    int64_t used = stage_used();
    send_text(control, "W" + usage_text(status, usage) + " " +
                           std::to_string(used >= 0 && used_before >= 0 ? used - used_before : 0) + " " + reaped_at);
    // The command's code as ours too, for a daemon that reaps us before reading "W".
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

}  // namespace forkbox::sandbox::embryo
