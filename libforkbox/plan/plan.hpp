// The Plan: a validated Spec translated into the exact, ordered work the executor does.
// Pure: building a Plan makes no syscall, so every decision here is unit-tested without root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// mount(2) flags and data parsed from an OCI option list, runc's vocabulary.
struct MountFlags {
    unsigned long set = 0;          // MS_* to set
    unsigned long clear = 0;        // MS_* the options explicitly cleared ("rw", "suid", ...)
    unsigned long propagation = 0;  // MS_SHARED / MS_SLAVE / MS_PRIVATE / MS_UNBINDABLE (| MS_REC)
    uint64_t recursive_set = 0;     // MOUNT_ATTR_* for mount_setattr(AT_RECURSIVE) ("rro", ...)
    uint64_t recursive_clear = 0;
    std::string data;               // comma-joined filesystem options ("size=64m,mode=755")
    bool tmpcopyup = false;
    bool idmap = false;            // "idmap" or "ridmap"
    bool idmap_recursive = false;  // "ridmap"
};

// Parses OCI/runc mount options. Unknown words become filesystem data, as in runc.
MountFlags parse_mount_options(const std::vector<std::string>& options);

// Parses a propagation name as used by linux.rootfsPropagation ("rslave" -> MS_SLAVE|MS_REC).
Result<unsigned long> parse_propagation(const std::string& name);

enum class MountKind {
    Bind,    // bind or rbind of a host path
    Proc,
    Sysfs,
    Cgroup,  // "cgroup" / "cgroup2": the executor mounts what the host layout needs
    Other,   // any filesystem: tmpfs, devpts, mqueue, overlay, ...
};

struct MountStep {
    MountKind kind = MountKind::Other;
    std::string source;       // host path for binds (absolute), fs source otherwise
    std::string destination;  // absolute, inside the container
    std::string fstype;
    MountFlags flags;
    bool recursive_bind = false;
    // A bind mount whose flags need a second remount to apply (ro, nosuid, ...).
    bool bind_needs_remount = false;
    // An idmapped bind: `create` clones its source and gives the clone these maps
    // (mount_setattr MOUNT_ATTR_IDMAP) before init attaches it.
    struct IdMap {
        std::vector<oci::IdMapping> uids, gids;  // the mount's own, else the container's
        std::string userns_path;  // else: the user namespace the container joins, its maps
        bool recursive = false;   // "ridmap": every mount of the cloned tree, not its top only
    };
    std::optional<IdMap> idmap;
};

struct NamespaceJoin {
    int clone_flag = 0;  // CLONE_NEW*
    std::string type;    // spec type, for messages
    std::string path;
};

struct DeviceNode {
    std::string path;  // absolute inside the container
    char type = 'c';   // c, b, u, p
    uint32_t major = 0, minor = 0;
    uint32_t mode = 0666;
    uint32_t uid = 0, gid = 0;
};

// A host network device and its name in the container (linux.netDevices).
struct NetDeviceMove {
    std::string host_name, container_name;
};

// set_mempolicy(2)'s arguments from linux.memoryPolicy.
struct MemoryPolicyPlan {
    int mode = 0;                 // MPOL_* | MPOL_F_*
    std::vector<uint64_t> nodes;  // the node mask, 64 nodes a word; empty: none given
};

// sched_setattr(2)'s fields from process.scheduler (the validated names as numbers).
struct SchedulerAttr {
    uint32_t policy = 0;
    uint64_t flags = 0;
    int32_t nice = 0;
    uint32_t priority = 0;
    uint64_t runtime = 0, deadline = 0, period = 0;
};

struct HookPlan {
    std::vector<oci::Hook> prestart, create_runtime, create_container, start_container,
        poststart, poststop;
};

struct Plan {
    std::string id;  // the container id
    // Namespaces.
    int new_namespaces = 0;  // CLONE_NEW* flags to create (time included)
    std::vector<NamespaceJoin> joins;  // user first
    std::vector<oci::IdMapping> uid_mappings, gid_mappings;
    bool own_pid_namespace() const;
    bool needs_intermediate() const { return !joins.empty(); }

    // Root filesystem.
    bool has_mount_namespace = false;
    std::string bundle;  // absolute host path
    std::string rootfs;  // absolute host path
    bool rootfs_readonly = false;
    unsigned long root_propagation = 0;        // applied to "/" before building (default rslave)
    unsigned long rootfs_propagation_after = 0;  // applied to the new "/" after pivot, if asked
    std::vector<MountStep> mounts;
    std::vector<DeviceNode> devices;  // defaults + linux.devices
    bool dev_is_bind_mounted = false;  // a bind of /dev: create no device nodes then
    std::vector<std::string> masked_paths, readonly_paths;

    // Identity inside.
    std::string hostname, domainname;
    bool set_hostname = false, set_domainname = false;
    std::vector<std::pair<std::string, std::string>> sysctl;  // name (dots), value
    std::vector<std::pair<std::string, oci::TimeOffset>> time_offsets;
    // linux.personality as the personality(2) persona (PER_LINUX, PER_LINUX32), set by init
    // just before execve; none: inherit the runtime's.
    std::optional<unsigned long> personality;
    std::optional<MemoryPolicyPlan> memory_policy;  // linux.memoryPolicy, set by init
    // linux.netDevices: host devices `create` moves into the container's network namespace.
    std::vector<NetDeviceMove> net_devices;

    // Process.
    oci::Process process;

    // Cgroups.
    std::string cgroups_path;  // resolved: absolute inside each hierarchy
    // linux.resources as create applies them, with the device rules runc's specconv gives a
    // container: the spec's, or a deny-all when it has none (a container never keeps its
    // parent's device access); the cgroup planner allows the default devices after them
    // (effective_device_rules). No device rules when PlanOptions::restrict_devices is false.
    oci::Resources resources;
    // The systemd driver's unit and its slice ("" with cgroupfs); cgroups_path is then the
    // unit's cgroup below systemd's root ("/system.slice/forkbox-ID.scope").
    std::string systemd_unit;
    std::string systemd_slice;

    HookPlan hooks;
};

struct PlanOptions {
    std::string id;
    std::string bundle;  // absolute
    // False for a rootless caller (euid != 0, or in a user namespace): v1's devices.allow and
    // devices.deny and v2's device programs need CAP_SYS_ADMIN in the initial user namespace
    // (EPERM otherwise), and runc ignores the devices controller then. The container's
    // device access is its caller's.
    bool restrict_devices = true;
    // --systemd-cgroup: linux.cgroupsPath is runc's "slice:prefix:name" (systemd.hpp).
    bool systemd_cgroup = false;
    bool rootless = false;  // for the systemd driver's default slice (user.slice)
};

// Spec (already validated) -> Plan. Fails only for values that validation cannot judge alone.
Result<Plan> make_plan(const oci::Spec& spec, const PlanOptions& options);

// The default devices every container gets (null, zero, full, random, urandom, tty).
std::vector<DeviceNode> default_devices();

// process.scheduler, process.ioPriority (ioprio_set's value) and linux.memoryPolicy as the
// kernel takes them. Names are validated already (oci/validate.cpp).
SchedulerAttr scheduler_attr(const oci::Scheduler& s);
int io_priority_value(const oci::IoPriority& io);
Result<MemoryPolicyPlan> memory_policy_plan(const oci::MemoryPolicy& m);

// A CPU or NUMA node list ("0-3,8,10-11") as a bit mask, 64 ids a word; `what` names it in
// errors. Empty text is an empty mask.
Result<std::vector<uint64_t>> parse_id_list(std::string_view list, std::string_view what);

// Cleans a container path: "a//b/../c/" -> "/a/c"; never climbs above "/".
std::string clean_container_path(const std::string& path);

}  // namespace forkbox
