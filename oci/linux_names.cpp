#include "oci/linux_names.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>

namespace forkbox::oci {

namespace {

// Index = kernel capability number (include/uapi/linux/capability.h).
const std::vector<std::string_view> kCapabilities = {
    "CAP_CHOWN",            // 0
    "CAP_DAC_OVERRIDE",     // 1
    "CAP_DAC_READ_SEARCH",  // 2
    "CAP_FOWNER",           // 3
    "CAP_FSETID",           // 4
    "CAP_KILL",             // 5
    "CAP_SETGID",           // 6
    "CAP_SETUID",           // 7
    "CAP_SETPCAP",          // 8
    "CAP_LINUX_IMMUTABLE",  // 9
    "CAP_NET_BIND_SERVICE", // 10
    "CAP_NET_BROADCAST",    // 11
    "CAP_NET_ADMIN",        // 12
    "CAP_NET_RAW",          // 13
    "CAP_IPC_LOCK",         // 14
    "CAP_IPC_OWNER",        // 15
    "CAP_SYS_MODULE",       // 16
    "CAP_SYS_RAWIO",        // 17
    "CAP_SYS_CHROOT",       // 18
    "CAP_SYS_PTRACE",       // 19
    "CAP_SYS_PACCT",        // 20
    "CAP_SYS_ADMIN",        // 21
    "CAP_SYS_BOOT",         // 22
    "CAP_SYS_NICE",         // 23
    "CAP_SYS_RESOURCE",     // 24
    "CAP_SYS_TIME",         // 25
    "CAP_SYS_TTY_CONFIG",   // 26
    "CAP_MKNOD",            // 27
    "CAP_LEASE",            // 28
    "CAP_AUDIT_WRITE",      // 29
    "CAP_AUDIT_CONTROL",    // 30
    "CAP_SETFCAP",          // 31
    "CAP_MAC_OVERRIDE",     // 32
    "CAP_MAC_ADMIN",        // 33
    "CAP_SYSLOG",           // 34
    "CAP_WAKE_ALARM",       // 35
    "CAP_BLOCK_SUSPEND",    // 36
    "CAP_AUDIT_READ",       // 37
    "CAP_PERFMON",          // 38
    "CAP_BPF",              // 39
    "CAP_CHECKPOINT_RESTORE", // 40
};

struct NamedNumber {
    std::string_view name;
    int number;
};

const std::vector<NamedNumber> kRlimits = {
    {"RLIMIT_CPU", RLIMIT_CPU},
    {"RLIMIT_FSIZE", RLIMIT_FSIZE},
    {"RLIMIT_DATA", RLIMIT_DATA},
    {"RLIMIT_STACK", RLIMIT_STACK},
    {"RLIMIT_CORE", RLIMIT_CORE},
    {"RLIMIT_RSS", RLIMIT_RSS},
    {"RLIMIT_NPROC", RLIMIT_NPROC},
    {"RLIMIT_NOFILE", RLIMIT_NOFILE},
    {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK},
    {"RLIMIT_AS", RLIMIT_AS},
    {"RLIMIT_LOCKS", RLIMIT_LOCKS},
    {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING},
    {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE},
    {"RLIMIT_NICE", RLIMIT_NICE},
    {"RLIMIT_RTPRIO", RLIMIT_RTPRIO},
    {"RLIMIT_RTTIME", RLIMIT_RTTIME},
};

// Order matters to the engine only as a default: user first, so that the other namespaces
// are owned by it when created together.
const std::vector<NamespaceKind> kNamespaces = {
    {"user", CLONE_NEWUSER, "user"},     {"mount", CLONE_NEWNS, "mnt"},
    {"pid", CLONE_NEWPID, "pid"},        {"network", CLONE_NEWNET, "net"},
    {"ipc", CLONE_NEWIPC, "ipc"},        {"uts", CLONE_NEWUTS, "uts"},
    {"cgroup", CLONE_NEWCGROUP, "cgroup"}, {"time", CLONE_NEWTIME, "time"},
};

// Names without the SIG prefix; aliases after the canonical name of the same number.
const std::vector<NamedNumber> kSignals = {
    {"HUP", SIGHUP},       {"INT", SIGINT},       {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},     {"IOT", SIGIOT},     {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},     {"USR1", SIGUSR1},   {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CHLD", SIGCHLD},     {"CLD", SIGCHLD},      {"CONT", SIGCONT},   {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},   {"URG", SIGURG},
    {"XCPU", SIGXCPU},     {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
    {"WINCH", SIGWINCH},   {"IO", SIGIO},         {"POLL", SIGPOLL},   {"PWR", SIGPWR},
    {"SYS", SIGSYS},
};

const std::vector<std::string_view> kMountOptions = {
    "async",      "atime",        "bind",        "defaults",     "dev",
    "diratime",   "dirsync",      "exec",        "iversion",     "lazytime",
    "loud",       "mand",         "noatime",     "nodev",        "nodiratime",
    "noexec",     "noiversion",   "nolazytime",  "nomand",       "norelatime",
    "nostrictatime", "nosuid",    "nosymfollow", "private",      "ratime",
    "rbind",      "rdev",         "rdiratime",   "relatime",     "remount",
    "rexec",      "rnoatime",     "rnodev",      "rnodiratime",  "rnoexec",
    "rnorelatime", "rnostrictatime", "rnosuid",  "rnosymfollow", "ro",
    "rprivate",   "rrelatime",    "rro",         "rrw",          "rshared",
    "rslave",     "rstrictatime", "rsuid",       "rsymfollow",   "runbindable",
    "rw",         "shared",       "silent",      "slave",        "strictatime",
    "suid",       "symfollow",    "sync",        "tmpcopyup",    "unbindable",
    "idmap",      "ridmap",
};

const std::vector<std::string_view> kSeccompActions = {
    "SCMP_ACT_KILL",  "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_TRAP",  "SCMP_ACT_ERRNO",        "SCMP_ACT_TRACE",
    "SCMP_ACT_ALLOW", "SCMP_ACT_LOG",          "SCMP_ACT_NOTIFY",
};

const std::vector<std::string_view> kSeccompOperators = {
    "SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE",        "SCMP_CMP_EQ",
    "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ",
};

const std::vector<std::string_view> kSeccompArchs = {
    "SCMP_ARCH_X86",       "SCMP_ARCH_X86_64",      "SCMP_ARCH_X32",
    "SCMP_ARCH_ARM",       "SCMP_ARCH_AARCH64",     "SCMP_ARCH_MIPS",
    "SCMP_ARCH_MIPS64",    "SCMP_ARCH_MIPS64N32",   "SCMP_ARCH_MIPSEL",
    "SCMP_ARCH_MIPSEL64",  "SCMP_ARCH_MIPSEL64N32", "SCMP_ARCH_PPC",
    "SCMP_ARCH_PPC64",     "SCMP_ARCH_PPC64LE",     "SCMP_ARCH_S390",
    "SCMP_ARCH_S390X",     "SCMP_ARCH_PARISC",      "SCMP_ARCH_PARISC64",
    "SCMP_ARCH_RISCV64",   "SCMP_ARCH_LOONGARCH64", "SCMP_ARCH_M68K",
    "SCMP_ARCH_SH",        "SCMP_ARCH_SHEB",
};

const std::vector<std::string_view> kSeccompFlags = {
    "SECCOMP_FILTER_FLAG_TSYNC",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
};

const std::vector<std::string_view> kHooks = {
    "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
};

const std::vector<std::string_view> kSchedulerPolicies = {
    "SCHED_OTHER", "SCHED_FIFO", "SCHED_RR", "SCHED_BATCH",
    "SCHED_ISO",   "SCHED_IDLE", "SCHED_DEADLINE",
};

const std::vector<std::string_view> kSchedulerFlags = {
    "SCHED_FLAG_RESET_ON_FORK", "SCHED_FLAG_RECLAIM",        "SCHED_FLAG_DL_OVERRUN",
    "SCHED_FLAG_KEEP_POLICY",   "SCHED_FLAG_KEEP_PARAMS",    "SCHED_FLAG_UTIL_CLAMP_MIN",
    "SCHED_FLAG_UTIL_CLAMP_MAX",
};

const std::vector<std::string_view> kIoPriorityClasses = {
    "IOPRIO_CLASS_RT", "IOPRIO_CLASS_BE", "IOPRIO_CLASS_IDLE",
};

const std::vector<std::string_view> kMemoryPolicyModes = {
    "MPOL_DEFAULT",   "MPOL_BIND",           "MPOL_INTERLEAVE", "MPOL_WEIGHTED_INTERLEAVE",
    "MPOL_PREFERRED", "MPOL_PREFERRED_MANY", "MPOL_LOCAL",
};

const std::vector<std::string_view> kMemoryPolicyFlags = {
    "MPOL_F_NUMA_BALANCING", "MPOL_F_RELATIVE_NODES", "MPOL_F_STATIC_NODES",
};

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

// Parses a non-empty run of decimal digits; nullopt on anything else or overflow past `max`.
std::optional<int> parse_small_uint(std::string_view s, int max) {
    if (s.empty() || s.size() > 9) return std::nullopt;
    int n = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + (c - '0');
    }
    if (n > max) return std::nullopt;
    return n;
}

}  // namespace

std::optional<int> capability_from_name(std::string_view name) {
    for (size_t i = 0; i < kCapabilities.size(); ++i)
        if (kCapabilities[i] == name) return static_cast<int>(i);
    return std::nullopt;
}

std::string_view capability_name(int cap) {
    if (cap < 0 || static_cast<size_t>(cap) >= kCapabilities.size()) return {};
    return kCapabilities[static_cast<size_t>(cap)];
}

int last_known_capability() { return static_cast<int>(kCapabilities.size()) - 1; }

const std::vector<std::string_view>& all_capability_names() { return kCapabilities; }

std::optional<int> rlimit_from_name(std::string_view name) {
    for (const auto& r : kRlimits)
        if (r.name == name) return r.number;
    return std::nullopt;
}

const std::vector<std::string_view>& all_rlimit_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<NamedNumber> sorted = kRlimits;
        std::sort(sorted.begin(), sorted.end(),
                  [](const NamedNumber& a, const NamedNumber& b) { return a.number < b.number; });
        std::vector<std::string_view> v;
        for (const auto& r : sorted) v.push_back(r.name);
        return v;
    }();
    return names;
}

const NamespaceKind* namespace_kind(std::string_view spec_type) {
    for (const auto& k : kNamespaces)
        if (k.spec_type == spec_type) return &k;
    return nullptr;
}

const NamespaceKind* namespace_kind_by_proc_name(std::string_view proc_name) {
    for (const auto& k : kNamespaces)
        if (k.proc_name == proc_name) return &k;
    return nullptr;
}

const NamespaceKind* namespace_kind_by_flag(int clone_flag) {
    for (const auto& k : kNamespaces)
        if (k.clone_flag == clone_flag) return &k;
    return nullptr;
}

const std::vector<NamespaceKind>& all_namespace_kinds() { return kNamespaces; }

std::optional<int> signal_from_string(std::string_view s) {
    if (s.empty()) return std::nullopt;
    const int rtmin = SIGRTMIN, rtmax = SIGRTMAX;
    if (s[0] >= '0' && s[0] <= '9') {
        auto n = parse_small_uint(s, rtmax);
        if (!n || *n == 0) return std::nullopt;
        return n;
    }
    std::string name = upper(s);
    std::string_view v = name;
    if (v.starts_with("SIG")) v.remove_prefix(3);
    for (const auto& sig : kSignals)
        if (sig.name == v) return sig.number;
    // Real-time signals: RTMIN, RTMIN+n, RTMAX, RTMAX-n (glibc's numbering, as kill(1)).
    const int span = rtmax - rtmin;
    if (v.starts_with("RTMIN")) {
        v.remove_prefix(5);
        if (v.empty()) return rtmin;
        if (v[0] != '+') return std::nullopt;
        auto n = parse_small_uint(v.substr(1), span);
        if (!n) return std::nullopt;
        return rtmin + *n;
    }
    if (v.starts_with("RTMAX")) {
        v.remove_prefix(5);
        if (v.empty()) return rtmax;
        if (v[0] != '-') return std::nullopt;
        auto n = parse_small_uint(v.substr(1), span);
        if (!n) return std::nullopt;
        return rtmax - *n;
    }
    return std::nullopt;
}

std::string signal_name(int sig) {
    for (const auto& s : kSignals)
        if (s.number == sig) return "SIG" + std::string(s.name);
    const int rtmin = SIGRTMIN, rtmax = SIGRTMAX;
    if (sig < rtmin || sig > rtmax) return {};
    if (sig == rtmin) return "SIGRTMIN";
    if (sig == rtmax) return "SIGRTMAX";
    if (sig - rtmin <= rtmax - sig) return "SIGRTMIN+" + std::to_string(sig - rtmin);
    return "SIGRTMAX-" + std::to_string(rtmax - sig);
}

const std::vector<std::string_view>& known_mount_options() { return kMountOptions; }
const std::vector<std::string_view>& seccomp_action_names() { return kSeccompActions; }
const std::vector<std::string_view>& seccomp_operator_names() { return kSeccompOperators; }
const std::vector<std::string_view>& seccomp_arch_names() { return kSeccompArchs; }
const std::vector<std::string_view>& seccomp_flag_names() { return kSeccompFlags; }
const std::vector<std::string_view>& hook_names() { return kHooks; }
const std::vector<std::string_view>& scheduler_policy_names() { return kSchedulerPolicies; }
const std::vector<std::string_view>& scheduler_flag_names() { return kSchedulerFlags; }
const std::vector<std::string_view>& io_priority_class_names() { return kIoPriorityClasses; }
const std::vector<std::string_view>& memory_policy_mode_names() { return kMemoryPolicyModes; }
const std::vector<std::string_view>& memory_policy_flag_names() { return kMemoryPolicyFlags; }

bool contains_name(const std::vector<std::string_view>& list, std::string_view name) {
    return std::find(list.begin(), list.end(), name) != list.end();
}

}  // namespace forkbox::oci
