// The OCI runtime-spec 1.3 configuration model for Linux (config.md, config-linux.md).
// Plain data: parsing lives in parse.cpp, checks in validate.cpp. Optional fields that the
// spec leaves unset stay std::nullopt so "absent" and "zero" never get confused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace forkbox::oci {

inline constexpr const char* kSpecVersion = "1.3.0";

struct Root {
    std::string path;
    bool readonly = false;
};

struct IdMapping {
    uint32_t container_id = 0;
    uint32_t host_id = 0;
    uint32_t size = 0;
    bool operator==(const IdMapping&) const = default;
};

struct Mount {
    std::string destination;
    std::string type;    // may be empty: then options decide (bind) or type = source fs
    std::string source;  // may be empty
    std::vector<std::string> options;
    std::vector<IdMapping> uid_mappings;  // idmapped mounts
    std::vector<IdMapping> gid_mappings;
};

struct Rlimit {
    std::string type;  // "RLIMIT_NOFILE"
    uint64_t hard = 0;
    uint64_t soft = 0;
};

struct Capabilities {
    std::vector<std::string> bounding, effective, inheritable, permitted, ambient;
};

struct User {
    uint32_t uid = 0;
    uint32_t gid = 0;
    std::optional<uint32_t> umask;
    std::vector<uint32_t> additional_gids;
    std::string username;  // Windows only; parsed and ignored
};

struct ConsoleSize {
    uint32_t height = 0;
    uint32_t width = 0;
};

struct Scheduler {
    std::string policy;  // SCHED_OTHER, ...
    std::optional<int32_t> nice;
    std::optional<int32_t> priority;
    std::vector<std::string> flags;
    std::optional<uint64_t> runtime, deadline, period;
};

struct IoPriority {
    std::string klass;  // IOPRIO_CLASS_RT / BE / IDLE
    int32_t priority = 0;
};

struct ExecCPUAffinity {
    std::string initial;
    std::string final;
};

struct Process {
    bool terminal = false;
    std::optional<ConsoleSize> console_size;
    User user;
    std::vector<std::string> args;
    std::string command_line;  // Windows only
    std::vector<std::string> env;
    std::string cwd;
    std::optional<Capabilities> capabilities;
    std::vector<Rlimit> rlimits;
    bool no_new_privileges = false;
    std::string apparmor_profile;
    std::optional<int> oom_score_adj;
    std::optional<Scheduler> scheduler;
    std::string selinux_label;
    std::optional<IoPriority> io_priority;
    std::optional<ExecCPUAffinity> exec_cpu_affinity;
};

struct Hook {
    std::string path;
    std::vector<std::string> args;
    std::vector<std::string> env;
    std::optional<int> timeout;  // seconds, > 0
};

struct Hooks {
    std::vector<Hook> prestart, create_runtime, create_container, start_container, poststart,
        poststop;
    bool empty() const {
        return prestart.empty() && create_runtime.empty() && create_container.empty() &&
               start_container.empty() && poststart.empty() && poststop.empty();
    }
};

struct Namespace {
    std::string type;  // pid network mount ipc uts user cgroup time
    std::string path;  // empty: create a new one
};

struct Device {
    std::string type;  // c, b, u, p
    std::string path;
    int64_t major = 0;
    int64_t minor = 0;
    std::optional<uint32_t> file_mode;
    std::optional<uint32_t> uid;
    std::optional<uint32_t> gid;
};

struct DeviceRule {
    bool allow = false;
    std::string type;  // a, c, b (empty = a)
    std::optional<int64_t> major;
    std::optional<int64_t> minor;
    std::string access;  // rwm
};

struct MemoryResources {
    std::optional<int64_t> limit, reservation, swap, kernel, kernel_tcp;
    std::optional<uint64_t> swappiness;
    std::optional<bool> disable_oom_killer, use_hierarchy, check_before_update;
};

struct CpuResources {
    std::optional<uint64_t> shares;
    std::optional<int64_t> quota;
    std::optional<uint64_t> burst;
    std::optional<uint64_t> period;
    std::optional<int64_t> realtime_runtime;
    std::optional<uint64_t> realtime_period;
    std::string cpus, mems;
    std::optional<int64_t> idle;
};

struct WeightDevice {
    int64_t major = 0, minor = 0;
    std::optional<uint16_t> weight, leaf_weight;
};

struct ThrottleDevice {
    int64_t major = 0, minor = 0;
    uint64_t rate = 0;
};

struct BlockIoResources {
    std::optional<uint16_t> weight, leaf_weight;
    std::vector<WeightDevice> weight_device;
    std::vector<ThrottleDevice> throttle_read_bps, throttle_write_bps, throttle_read_iops,
        throttle_write_iops;
};

struct HugepageLimit {
    std::string page_size;  // "2MB"
    uint64_t limit = 0;
};

struct NetworkPriority {
    std::string name;
    uint32_t priority = 0;
};

struct NetworkResources {
    std::optional<uint32_t> class_id;
    std::vector<NetworkPriority> priorities;
};

struct RdmaLimit {
    std::optional<uint32_t> hca_handles, hca_objects;
};

struct Resources {
    std::vector<DeviceRule> devices;
    std::optional<MemoryResources> memory;
    std::optional<CpuResources> cpu;
    std::optional<int64_t> pids_limit;
    std::optional<BlockIoResources> block_io;
    std::vector<HugepageLimit> hugepage_limits;
    std::optional<NetworkResources> network;
    std::map<std::string, RdmaLimit> rdma;
    std::map<std::string, std::string> unified;
};

struct SeccompArg {
    uint32_t index = 0;
    uint64_t value = 0;
    uint64_t value_two = 0;
    std::string op;  // SCMP_CMP_EQ ...
};

struct SeccompSyscall {
    std::vector<std::string> names;
    std::string action;  // SCMP_ACT_...
    std::optional<uint32_t> errno_ret;
    std::vector<SeccompArg> args;
};

struct Seccomp {
    std::string default_action;
    std::optional<uint32_t> default_errno_ret;
    std::vector<std::string> architectures;
    std::vector<std::string> flags;
    std::string listener_path;
    std::string listener_metadata;
    std::vector<SeccompSyscall> syscalls;
};

struct TimeOffset {
    int64_t secs = 0;
    uint32_t nanosecs = 0;
};

struct Personality {
    std::string domain;  // LINUX, LINUX32
    std::vector<std::string> flags;
};

struct IntelRdt {
    std::string clos_id;
    std::string l3_cache_schema, mem_bw_schema;
    bool enable_cmt = false, enable_mbm = false;
};

struct MemoryPolicy {
    std::string mode;
    std::string nodes;
    std::vector<std::string> flags;
};

struct NetDevice {
    std::string name;
};

struct Linux {
    std::vector<Namespace> namespaces;
    std::vector<IdMapping> uid_mappings, gid_mappings;
    std::map<std::string, TimeOffset> time_offsets;  // "monotonic", "boottime"
    std::vector<Device> devices;
    std::string cgroups_path;
    std::optional<Resources> resources;
    std::string rootfs_propagation;
    std::optional<Seccomp> seccomp;
    std::map<std::string, std::string> sysctl;
    std::vector<std::string> masked_paths;
    std::vector<std::string> readonly_paths;
    std::string mount_label;
    std::optional<IntelRdt> intel_rdt;
    std::optional<Personality> personality;
    std::optional<MemoryPolicy> memory_policy;
    std::map<std::string, NetDevice> net_devices;
};

struct Spec {
    std::string oci_version;
    std::optional<Root> root;
    std::vector<Mount> mounts;
    std::optional<Process> process;
    std::string hostname;
    std::string domainname;
    std::optional<Hooks> hooks;
    std::map<std::string, std::string> annotations;
    std::optional<Linux> linux;

    // Convenience lookups used by validation and planning.
    const Namespace* find_namespace(const std::string& type) const {
        if (!linux) return nullptr;
        for (const auto& ns : linux->namespaces)
            if (ns.type == type) return &ns;
        return nullptr;
    }
};

}  // namespace forkbox::oci
