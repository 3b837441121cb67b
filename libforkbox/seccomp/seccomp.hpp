// linux.seccomp: the spec's profile -> a plan of libseccomp rules (pure) -> a BPF program
// compiled in the parent before clone -> seccomp(2) in init right before execve.
// Compiling in the parent keeps libseccomp's allocations and its kernel probes out of the
// child, which then only makes one syscall on a program that is already built.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// One libseccomp rule: the syscall matches when every condition holds (AND).
struct SeccompRule {
    std::string name;  // as the spec wrote it, for messages
    // libseccomp's number for the native arch; a negative pseudo number for a syscall that
    // exists only on other arches (socketcall on x86_64), which libseccomp maps per arch.
    int syscall = 0;
    uint32_t action = 0;  // SCMP_ACT_*
    std::vector<scmp_arg_cmp> conditions;
};

// A validated profile translated into exactly what is handed to libseccomp.
struct SeccompPlan {
    uint32_t default_action = 0;  // SCMP_ACT_*
    std::vector<uint32_t> arches;  // SCMP_ARCH_* tokens to add besides the native one
    // Filter flags, twice: as SCMP_FLTATR_CTL_* attributes (so libseccomp checks that the
    // kernel supports them) and as SECCOMP_FILTER_FLAG_* bits for seccomp(2).
    std::vector<scmp_filter_attr> attributes;
    unsigned filter_flags = 0;
    std::vector<SeccompRule> rules;  // in spec order
};

// runc's translation, with no libseccomp context and no syscall:
//  * actions: ERRNO and TRACE take errnoRet (default EPERM); KILL is KILL_THREAD;
//    SCMP_ACT_NOTIFY rules make the program ask for a listener fd (SECCOMP_FILTER_FLAG_NEW_LISTENER);
//  * syscall names libseccomp does not know are skipped (older or other kernels);
//  * a rule whose action is the default action is skipped (libseccomp would reject it);
//  * args: when two args name the same index, each arg becomes a rule of its own (OR);
//    otherwise all args form one rule (AND);
//  * architectures libseccomp does not know are skipped.
Result<SeccompPlan> plan_seccomp(const oci::Seccomp& seccomp);

// A BPF program ready for seccomp(2).
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (linux 6.0), which glibc 2.36's headers lack.
inline constexpr unsigned kWaitKillableRecv = 1U << 5;

struct SeccompProgram {
    std::vector<sock_filter> bpf;
    unsigned flags = 0;  // SECCOMP_FILTER_FLAG_* for seccomp(2)
    // SCMP_ACT_NOTIFY rules: loading returns a listener fd for the agent at listenerPath.
    bool wants_listener() const { return (flags & SECCOMP_FILTER_FLAG_NEW_LISTENER) != 0; }
};

// What compile_seccomp hands on: libseccomp's program made shorter by
// compact_seccomp_program (the kernel loads it faster), or as libseccomp exported it.
enum class SeccompLayout { Compact, Exported };

// Runs in the parent (create), before clone: plan, build a libseccomp filter and export it.
// libseccomp 2.5 can loop forever on some profiles with range comparisons (two rules
// comparing the same syscall's arguments with GT and GE/LE): those are compiled in a child
// given `deadline_ms`, and fail with ETIMEDOUT past it instead of hanging create.
constexpr int kSeccompCompileDeadlineMs = 5000;
Result<SeccompProgram> compile_seccomp(const oci::Seccomp& seccomp, SeccompLayout layout = SeccompLayout::Compact,
                                       int deadline_ms = kSeccompCompileDeadlineMs);

// Runs in the container's init: installs the program. Allocates nothing unless it fails.
// Without no_new_privs the caller needs CAP_SYS_ADMIN (in its user namespace).
// Returns the notify listener fd when the program wants one, else an empty fd.
Result<unique_fd> load_seccomp(const SeccompProgram& program);

// For `features`: the actions and architectures this build can put in a filter, and the
// flags both it and the running kernel support.
std::vector<std::string_view> seccomp_supported_actions();
std::vector<std::string_view> seccomp_supported_arches();
std::vector<std::string_view> seccomp_supported_flags();

}  // namespace forkbox
