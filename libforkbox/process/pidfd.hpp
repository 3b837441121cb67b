// Process identity and liveness: a pid plus its start time names one process for good,
// and pidfds let us wait for or signal it without racing pid reuse.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

struct ProcStat {
    char state = '?';         // R S D Z T ...
    pid_t parent = 0;
    unsigned flags = 0;       // the kernel's PF_* flags (field 9)
    uint64_t children_faults = 0;  // its reaped children's minor + major faults (11, 13)
    uint64_t start_time = 0;  // clock ticks after boot

    // In do_exit: its namespaces are gone (setns says ESRCH) while it is not yet a zombie,
    // which lasts as long as a pid namespace's init waits for the rest of the namespace.
    bool exiting() const { return flags & 0x4; }  // PF_EXITING
};

// Reads /proc/<pid>/stat; nullopt when the process does not exist.
std::optional<ProcStat> read_proc_stat(pid_t pid);
// The same from that file's text.
std::optional<ProcStat> parse_proc_stat(const char* text);

// The pid behind a pidfd in our pid namespace (its fdinfo), -1 when it has none (reaped).
pid_t pidfd_pid(int pidfd);

// pidfds of parent's children (a thread-group leader's, from /proc/PID/task/PID/children),
// each checked to be the parent's child after it was opened; none when /proc cannot say.
std::vector<unique_fd> open_children(pid_t parent);

// True when pid still names the process that started at start_time and is not a zombie.
bool process_alive(pid_t pid, uint64_t start_time);

// A pidfd for pid, verified against start_time after opening (ESRCH if it is gone or reused).
Result<unique_fd> open_pidfd(pid_t pid, uint64_t start_time);

// runc's --pidfd-socket: sends a pidfd of `pid`, a child of ours not yet reaped, over
// `socket` (SCM_RIGHTS) with `kind` as the payload, as runc does: "standard" for a
// container's init, "setns" for a process `exec` started.
Result<void> send_pidfd(int socket, pid_t pid, std::string_view kind);

// Waits until the process behind a pidfd exits, up to timeout_ms (-1: forever).
// Returns true when it exited.
bool wait_pidfd_exit(int pidfd, int timeout_ms);

// Kills and reaps a child of ours if the scope is left before dismiss().
class ChildGuard {
public:
    ChildGuard() = default;
    explicit ChildGuard(pid_t pid) : pid_(pid) {}
    ChildGuard(const ChildGuard&) = delete;
    ChildGuard& operator=(const ChildGuard&) = delete;
    ~ChildGuard();
    void reset(pid_t pid) { pid_ = pid; }
    pid_t pid() const { return pid_; }
    void dismiss() { pid_ = -1; }
    // Kills and reaps now rather than at scope exit.
    void kill_now();

private:
    pid_t pid_ = -1;
};

// waitpid that retries on EINTR; returns the raw status.
Result<int> wait_child(pid_t pid);

// Exit status as runc reports it: the code, or 128 + signal number.
int exit_code_from_status(int status);

}  // namespace forkbox
