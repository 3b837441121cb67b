// Name tables of the kernel and the runtime spec: capabilities, rlimits, namespaces, signals,
// mount options, seccomp constants. Pure lookups, no syscalls; numbers are the kernel's own.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace forkbox::oci {

// Capabilities, by their spec name ("CAP_CHOWN"). Exact, case-sensitive names, as the spec
// writes them and runc accepts them.
std::optional<int> capability_from_name(std::string_view name);
// "CAP_CHOWN" for 0; empty for a number this table does not know.
std::string_view capability_name(int cap);
// The highest capability number this build knows (CAP_CHECKPOINT_RESTORE = 40).
int last_known_capability();
// Every known capability name, in kernel number order.
const std::vector<std::string_view>& all_capability_names();

// Resource limits, by spec name ("RLIMIT_NOFILE") -> RLIMIT_* resource number.
std::optional<int> rlimit_from_name(std::string_view name);
// Every known rlimit name, in resource number order.
const std::vector<std::string_view>& all_rlimit_names();

// A namespace as the spec, clone(2) and /proc/PID/ns name it.
struct NamespaceKind {
    std::string_view spec_type;  // "network"
    int clone_flag;              // CLONE_NEWNET
    std::string_view proc_name;  // "net"
};
// nullptr when the spec type is unknown.
const NamespaceKind* namespace_kind(std::string_view spec_type);
const NamespaceKind* namespace_kind_by_proc_name(std::string_view proc_name);
const NamespaceKind* namespace_kind_by_flag(int clone_flag);
// All eight, in the order runtimes usually create them.
const std::vector<NamespaceKind>& all_namespace_kinds();

// Signals as `kill` takes them: "KILL", "SIGKILL", "sigkill", "9", "RTMIN+3", "SIGRTMAX-1".
// Case-insensitive. Numbers are accepted from 1 to SIGRTMAX.
std::optional<int> signal_from_string(std::string_view s);
// "SIGKILL" for 9, "SIGRTMIN+3" for a real-time signal; empty for an unknown number.
std::string signal_name(int sig);

// runc's list of recognized mount options (flags and propagation), as `features` reports.
// Filesystem data such as "mode=755" is not in it and is passed to the filesystem.
const std::vector<std::string_view>& known_mount_options();

// Seccomp constants as the spec spells them (libseccomp names).
const std::vector<std::string_view>& seccomp_action_names();    // SCMP_ACT_*
const std::vector<std::string_view>& seccomp_operator_names();  // SCMP_CMP_*
const std::vector<std::string_view>& seccomp_arch_names();      // SCMP_ARCH_*
const std::vector<std::string_view>& seccomp_flag_names();      // SECCOMP_FILTER_FLAG_*

// Other closed sets of the spec.
const std::vector<std::string_view>& hook_names();               // prestart ... poststop
const std::vector<std::string_view>& scheduler_policy_names();   // SCHED_*
const std::vector<std::string_view>& scheduler_flag_names();     // SCHED_FLAG_*
const std::vector<std::string_view>& io_priority_class_names();  // IOPRIO_CLASS_*
const std::vector<std::string_view>& memory_policy_mode_names(); // MPOL_*
const std::vector<std::string_view>& memory_policy_flag_names(); // MPOL_F_*

// True when `list` holds `name`.
bool contains_name(const std::vector<std::string_view>& list, std::string_view name);

}  // namespace forkbox::oci
