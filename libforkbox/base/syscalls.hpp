// Raw syscalls glibc 2.36 does not wrap (clone3, pidfd_*, openat2, pivot_root, ...).
#pragma once

#include <linux/close_range.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>

// Debian 12's headers predate them (Linux 5.14).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace forkbox::sys {

// A system call without libc: no errno, no cancellation point, nothing of the thread's
// (TLS) touched, for code that runs where libc cannot: before glibc's start-up
// (prefault.cpp) or in a clone sharing another process's memory (run.cpp's guardian).
// Returns the kernel's answer: -errno on failure.
[[gnu::always_inline]] inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0) {
#if defined(__x86_64__)
    long ret;
    register long r10 asm("r10") = d;
    asm volatile("syscall" : "=a"(ret) : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
#else
    long ret = ::syscall(nr, a, b, c, d);  // errno: the only shared state it may touch
    return ret < 0 ? -errno : ret;
#endif
}

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
