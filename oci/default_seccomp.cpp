#include "oci/default_seccomp.hpp"

#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

namespace forkbox::oci {

namespace {

// ---- the table ----
// Names are separated by spaces. A name an architecture lacks (chown32 on x86_64) is left
// out for that architecture by libseccomp, so the 32-bit names serve the i386 ABI.

// Every container: these act on the caller's own files, memory, processes and sockets, or
// the kernel checks a capability itself (adjtimex only reads without CAP_SYS_TIME).
constexpr std::string_view kEveryone[] = {
    // files and file descriptors
    "access chdir chmod chown chown32 close close_range copy_file_range creat dup dup2 dup3 "
    "faccessat faccessat2 fadvise64 fadvise64_64 fallocate fchdir fchmod fchmodat fchown "
    "fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fremovexattr "
    "fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futimesat "
    "getcwd getdents getdents64 getxattr ioctl lchown lchown32 lgetxattr link linkat listxattr "
    "llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 mkdir mkdirat mknod mknodat "
    "name_to_handle_at newfstatat open openat openat2 pipe pipe2 pread64 preadv preadv2 "
    "pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv removexattr rename "
    "renameat renameat2 rmdir sendfile sendfile64 setxattr splice stat stat64 statfs statfs64 "
    "statx symlink symlinkat sync sync_file_range syncfs tee truncate truncate64 umask unlink "
    "unlinkat utime utimensat utimensat_time64 utimes vmsplice write writev",
    // waiting for events; asynchronous I/O (io_uring stays out, as in Docker and containerd:
    // it has been a steady source of kernel exploits)
    "epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait "
    "epoll_wait_old eventfd eventfd2 fanotify_mark inotify_add_watch inotify_init "
    "inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents "
    "io_pgetevents_time64 io_setup io_submit _newselect poll ppoll ppoll_time64 pselect6 "
    "pselect6_time64 select signalfd signalfd4 timerfd_create timerfd_gettime "
    "timerfd_gettime64 timerfd_settime timerfd_settime64",
    // memory
    "brk madvise membarrier memfd_create memfd_secret mincore mlock mlock2 mlockall mmap mmap2 "
    "mprotect mremap msync munlock munlockall munmap pkey_alloc pkey_free pkey_mprotect "
    "remap_file_pages",
    // processes and threads (clone and clone3: see the argument rules)
    "capget capset execve execveat exit exit_group fork futex futex_time64 futex_waitv "
    "get_robust_list get_thread_area getcpu getpgid getpgrp getpid getppid getpriority "
    "getrlimit getrusage getsid gettid ioprio_get ioprio_set landlock_add_rule "
    "landlock_create_ruleset landlock_restrict_self pidfd_open pidfd_send_signal prctl "
    "prlimit64 process_mrelease restart_syscall rseq sched_get_priority_max "
    "sched_get_priority_min sched_getaffinity sched_getattr sched_getparam sched_getscheduler "
    "sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr "
    "sched_setparam sched_setscheduler sched_yield seccomp set_robust_list set_thread_area "
    "set_tid_address setpgid setpriority setrlimit setsid times ugetrlimit vfork wait4 waitid "
    "waitpid",
    // user and group ids
    "getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getresgid "
    "getresgid32 getresuid getresuid32 getuid getuid32 setfsgid setfsgid32 setfsuid setfsuid32 "
    "setgid setgid32 setgroups setgroups32 setregid setregid32 setresgid setresgid32 setresuid "
    "setresuid32 setreuid setreuid32 setuid setuid32",
    // signals
    "alarm kill pause rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn "
    "rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sigaltstack "
    "sigprocmask sigreturn tgkill tkill",
    // clocks and timers
    "adjtimex clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime "
    "clock_gettime64 clock_nanosleep clock_nanosleep_time64 getitimer gettimeofday nanosleep "
    "setitimer time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64 "
    "timer_settime timer_settime64",
    // sockets (socket itself: see the argument rules)
    "accept accept4 bind connect getpeername getsockname getsockopt listen recv recvfrom "
    "recvmmsg recvmmsg_time64 recvmsg send sendmmsg sendmsg sendto setsockopt shutdown "
    "socketcall socketpair",
    // System V and POSIX IPC (in the container's IPC namespace)
    "ipc mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend "
    "mq_timedsend_time64 mq_unlink msgctl msgget msgrcv msgsnd semctl semget semop semtimedop "
    "semtimedop_time64 shmat shmctl shmdt shmget",
    // the system
    "getrandom sysinfo uname",
};

struct CapabilityGroup {
    std::string_view capability;
    std::string_view names;
};

// Syscalls that do nothing useful without a capability: allowed only with it. kexec_load,
// kexec_file_load, keyctl, add_key, request_key, userfaultfd, swapon, swapoff and io_uring_*
// are in no table, so no capability set allows them.
constexpr CapabilityGroup kWithCapability[] = {
    {"CAP_SYS_ADMIN",
     "bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick lookup_dcookie mount "
     "mount_setattr move_mount open_tree perf_event_open pivot_root quotactl quotactl_fd "
     "setdomainname sethostname setns syslog umount umount2 unshare"},
    {"CAP_BPF", "bpf"},
    {"CAP_DAC_READ_SEARCH", "open_by_handle_at"},  // CVE-2014-3519 ("shocker")
    {"CAP_PERFMON", "perf_event_open"},
    {"CAP_SYS_BOOT", "reboot"},
    {"CAP_SYS_CHROOT", "chroot"},
    {"CAP_SYS_MODULE", "delete_module finit_module init_module"},
    {"CAP_SYS_NICE", "get_mempolicy mbind set_mempolicy set_mempolicy_home_node"},
    {"CAP_SYS_PACCT", "acct"},
    {"CAP_SYS_PTRACE", "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace"},
    {"CAP_SYS_RAWIO", "ioperm iopl"},
    {"CAP_SYS_TIME", "clock_settime clock_settime64 settimeofday stime"},
    {"CAP_SYS_TTY_CONFIG", "vhangup"},
    {"CAP_SYSLOG", "syslog"},
};

struct ArchGroup {
    SeccompArchFamily family;
    std::string_view names;
};

// What one family's C library needs besides the common calls.
constexpr ArchGroup kArchSpecific[] = {
    {SeccompArchFamily::X86_64, "arch_prctl modify_ldt"},
    {SeccompArchFamily::AArch64,
     "arm_fadvise64_64 arm_sync_file_range breakpoint cacheflush set_tls"},
};

// personality(2) values that only change what uname reports or query the current one.
constexpr uint64_t kPersonalities[] = {
    0x0,         // PER_LINUX
    0x8,         // PER_LINUX32
    0x20000,     // UNAME26
    0x20008,     // UNAME26 | PER_LINUX32
    0xffffffff,  // query
};

// clone(2) flags that create namespaces: without CAP_SYS_ADMIN, clone is allowed only when
// none is set (the kernel would refuse them anyway, except CLONE_NEWUSER, which needs no
// capability and opens the kernel's namespaced-root attack surface).
constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                     CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

// ---- building the profile ----

void append_names(std::vector<std::string>& out, std::string_view names) {
    size_t i = 0;
    while (i < names.size()) {
        size_t end = names.find(' ', i);
        if (end == std::string_view::npos) end = names.size();
        if (end > i) out.emplace_back(names.substr(i, end - i));
        i = end + 1;
    }
}

bool has(const std::vector<std::string>& caps, std::string_view cap) {
    return std::find(caps.begin(), caps.end(), cap) != caps.end();
}

SeccompSyscall allow_if(std::string name, uint32_t index, std::string op, uint64_t value,
                        uint64_t value_two = 0) {
    SeccompSyscall s;
    s.names = {std::move(name)};
    s.action = "SCMP_ACT_ALLOW";
    s.args = {SeccompArg{index, value, value_two, std::move(op)}};
    return s;
}

std::vector<std::string> architectures(SeccompArchFamily arch) {
    switch (arch) {
        case SeccompArchFamily::X86_64:
            return {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
        case SeccompArchFamily::AArch64:
            return {"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"};
        case SeccompArchFamily::Other:
            break;
    }
    return {};  // the native architecture only
}

}  // namespace

SeccompArchFamily native_seccomp_arch_family() {
#if defined(__x86_64__)
    return SeccompArchFamily::X86_64;
#elif defined(__aarch64__)
    return SeccompArchFamily::AArch64;
#else
    return SeccompArchFamily::Other;
#endif
}

Seccomp default_seccomp(const std::vector<std::string>& caps, SeccompArchFamily arch) {
    Seccomp sc;
    sc.default_action = "SCMP_ACT_ERRNO";
    sc.default_errno_ret = EPERM;
    sc.architectures = architectures(arch);

    std::vector<std::string> allowed;
    for (auto names : kEveryone) append_names(allowed, names);
    for (const auto& g : kArchSpecific)
        if (g.family == arch) append_names(allowed, g.names);
    for (const auto& g : kWithCapability)
        if (has(caps, g.capability)) append_names(allowed, g.names);
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    SeccompSyscall allow;
    allow.names = std::move(allowed);
    allow.action = "SCMP_ACT_ALLOW";
    sc.syscalls.push_back(std::move(allow));

    // One entry per value: runtimes differ in how they read repeated indexes in one entry.
    for (uint64_t p : kPersonalities)
        sc.syscalls.push_back(allow_if("personality", 0, "SCMP_CMP_EQ", p));
    // AF_VSOCK reaches the host's hypervisor services, past the network namespace.
    sc.syscalls.push_back(allow_if("socket", 0, "SCMP_CMP_NE", AF_VSOCK));

    if (!has(caps, "CAP_SYS_ADMIN")) {
        // s390 passes the flags second; the families here all pass them first.
        sc.syscalls.push_back(allow_if("clone", 0, "SCMP_CMP_MASKED_EQ", kNamespaceFlags, 0));
        // clone3 takes its flags in a struct a filter cannot read: ENOSYS makes the C library
        // fall back to clone, which the rule above can check.
        SeccompSyscall clone3;
        clone3.names = {"clone3"};
        clone3.action = "SCMP_ACT_ERRNO";
        clone3.errno_ret = ENOSYS;
        sc.syscalls.push_back(std::move(clone3));
    }
    return sc;
}

void write_seccomp_json(json::Writer& w, const Seccomp& sc) {
    w.begin_object();
    w.key("defaultAction").value(sc.default_action);
    if (sc.default_errno_ret) w.key("defaultErrnoRet").value(*sc.default_errno_ret);
    if (!sc.architectures.empty()) {
        w.key("architectures").begin_array();
        for (const auto& a : sc.architectures) w.value(a);
        w.end_array();
    }
    if (!sc.flags.empty()) {
        w.key("flags").begin_array();
        for (const auto& f : sc.flags) w.value(f);
        w.end_array();
    }
    if (!sc.listener_path.empty()) w.key("listenerPath").value(sc.listener_path);
    if (!sc.listener_metadata.empty()) w.key("listenerMetadata").value(sc.listener_metadata);
    w.key("syscalls").begin_array();
    for (const auto& s : sc.syscalls) {
        w.begin_object();
        w.key("names").begin_array();
        for (const auto& n : s.names) w.value(n);
        w.end_array();
        w.key("action").value(s.action);
        if (s.errno_ret) w.key("errnoRet").value(*s.errno_ret);
        if (!s.args.empty()) {
            w.key("args").begin_array();
            for (const auto& a : s.args) {
                w.begin_object().key("index").value(a.index).key("value").value(a.value);
                if (a.op == "SCMP_CMP_MASKED_EQ" || a.value_two != 0)
                    w.key("valueTwo").value(a.value_two);
                w.key("op").value(a.op).end_object();
            }
            w.end_array();
        }
        w.end_object();
    }
    w.end_array();
    w.end_object();
}

}  // namespace forkbox::oci
