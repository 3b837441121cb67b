// Raw syscalls glibc 2.36 does not wrap (clone3, pidfd_*, openat2, pivot_root, ...).
#pragma once

#include <linux/close_range.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>

namespace forkbox::sys {

// Fork-like clone3: no new stack, the child returns 0 and continues where the parent does.
inline pid_t clone3_fork(uint64_t flags, int cgroup_fd = -1, int* pidfd = nullptr) {
    struct clone_args args {};
    args.flags = flags;
    // With CLONE_PARENT the child inherits our exit signal; clone3 refuses one given.
    args.exit_signal = (flags & CLONE_PARENT) ? 0 : SIGCHLD;
    if (pidfd) {
        args.flags |= CLONE_PIDFD;
        args.pidfd = reinterpret_cast<uint64_t>(pidfd);
    }
    if (cgroup_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = static_cast<uint64_t>(cgroup_fd);
    }
    return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

inline int pidfd_open(pid_t pid, unsigned flags = 0) {
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}

inline int pidfd_send_signal(int pidfd, int sig) {
    return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

inline int openat2(int dirfd, const char* path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    struct open_how how {};
    how.flags = flags;
    how.mode = mode;
    how.resolve = resolve;
    return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

inline int pivot_root(const char* new_root, const char* put_old) {
    return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

inline int close_range(unsigned first, unsigned last, unsigned flags) {
    return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

}  // namespace forkbox::sys
