#include "libforkbox/plan/plan.hpp"

#include <sched.h>
#include <sys/personality.h>
#include <sys/mount.h>

#include <array>
#include <charconv>
#include <string_view>

#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/systemd.hpp"
#include "oci/linux_names.hpp"

namespace forkbox {

namespace {

struct FlagOption {
    std::string_view name;
    bool clear;
    unsigned long flag;
};

// runc's vocabulary (libcontainer/specconv mountFlags): words that set or clear MS_* flags.
constexpr std::array kFlagOptions{
    FlagOption{"async", true, MS_SYNCHRONOUS},
    FlagOption{"atime", true, MS_NOATIME},
    FlagOption{"bind", false, MS_BIND},
    FlagOption{"defaults", false, 0},
    FlagOption{"dev", true, MS_NODEV},
    FlagOption{"diratime", true, MS_NODIRATIME},
    FlagOption{"dirsync", false, MS_DIRSYNC},
    FlagOption{"exec", true, MS_NOEXEC},
    FlagOption{"iversion", false, MS_I_VERSION},
    FlagOption{"lazytime", false, MS_LAZYTIME},
    FlagOption{"loud", true, MS_SILENT},
    FlagOption{"mand", false, MS_MANDLOCK},
    FlagOption{"noatime", false, MS_NOATIME},
    FlagOption{"nodev", false, MS_NODEV},
    FlagOption{"nodiratime", false, MS_NODIRATIME},
    FlagOption{"noexec", false, MS_NOEXEC},
    FlagOption{"noiversion", true, MS_I_VERSION},
    FlagOption{"nolazytime", true, MS_LAZYTIME},
    FlagOption{"nomand", true, MS_MANDLOCK},
    FlagOption{"norelatime", true, MS_RELATIME},
    FlagOption{"nostrictatime", true, MS_STRICTATIME},
    FlagOption{"nosuid", false, MS_NOSUID},
    FlagOption{"nosymfollow", false, MS_NOSYMFOLLOW},
    FlagOption{"rbind", false, MS_BIND | MS_REC},
    FlagOption{"relatime", false, MS_RELATIME},
    FlagOption{"remount", false, MS_REMOUNT},
    FlagOption{"ro", false, MS_RDONLY},
    FlagOption{"rw", true, MS_RDONLY},
    FlagOption{"silent", false, MS_SILENT},
    FlagOption{"strictatime", false, MS_STRICTATIME},
    FlagOption{"suid", true, MS_NOSUID},
    FlagOption{"symfollow", true, MS_NOSYMFOLLOW},
    FlagOption{"sync", false, MS_SYNCHRONOUS},
};

struct PropagationOption {
    std::string_view name;
    unsigned long flags;
};

constexpr std::array kPropagationOptions{
    PropagationOption{"private", MS_PRIVATE},
    PropagationOption{"rprivate", MS_PRIVATE | MS_REC},
    PropagationOption{"shared", MS_SHARED},
    PropagationOption{"rshared", MS_SHARED | MS_REC},
    PropagationOption{"slave", MS_SLAVE},
    PropagationOption{"rslave", MS_SLAVE | MS_REC},
    PropagationOption{"unbindable", MS_UNBINDABLE},
    PropagationOption{"runbindable", MS_UNBINDABLE | MS_REC},
};

struct RecursiveOption {
    std::string_view name;
    bool clear;
    uint64_t attr;
};

// Recursive variants applied with mount_setattr(AT_RECURSIVE) (runc 1.1+ "rro" and friends).
constexpr std::array kRecursiveOptions{
    RecursiveOption{"rro", false, MOUNT_ATTR_RDONLY},
    RecursiveOption{"rrw", true, MOUNT_ATTR_RDONLY},
    RecursiveOption{"rnosuid", false, MOUNT_ATTR_NOSUID},
    RecursiveOption{"rsuid", true, MOUNT_ATTR_NOSUID},
    RecursiveOption{"rnodev", false, MOUNT_ATTR_NODEV},
    RecursiveOption{"rdev", true, MOUNT_ATTR_NODEV},
    RecursiveOption{"rnoexec", false, MOUNT_ATTR_NOEXEC},
    RecursiveOption{"rexec", true, MOUNT_ATTR_NOEXEC},
    RecursiveOption{"rnodiratime", false, MOUNT_ATTR_NODIRATIME},
    RecursiveOption{"rdiratime", true, MOUNT_ATTR_NODIRATIME},
    RecursiveOption{"rrelatime", false, MOUNT_ATTR_RELATIME},
    RecursiveOption{"rnorelatime", true, MOUNT_ATTR_RELATIME},
    RecursiveOption{"rnoatime", false, MOUNT_ATTR_NOATIME},
    RecursiveOption{"ratime", true, MOUNT_ATTR_NOATIME},
    RecursiveOption{"rstrictatime", false, MOUNT_ATTR_STRICTATIME},
    RecursiveOption{"rnostrictatime", true, MOUNT_ATTR_STRICTATIME},
    RecursiveOption{"rnosymfollow", false, MOUNT_ATTR_NOSYMFOLLOW},
    RecursiveOption{"rsymfollow", true, MOUNT_ATTR_NOSYMFOLLOW},
};


std::string join_path(const std::string& base, const std::string& rel) {
    if (rel.empty() || rel[0] == '/') return rel;
    if (base.empty() || base.back() == '/') return base + rel;
    return base + "/" + rel;
}

// The maps of an idmapped bind (spec 1.2): its own uidMappings and gidMappings, both or
// neither; without them, the container's user namespace's.
Result<MountStep::IdMap> plan_idmap(const oci::Mount& m, const MountStep& step, const Plan& plan, size_t index) {
    std::string where = "mounts[" + std::to_string(index) + "]";
    if (step.kind != MountKind::Bind) return fail(EINVAL, where + ": idmapped mounts are supported only for bind mounts");
    if (m.uid_mappings.empty() != m.gid_mappings.empty())
        return fail(EINVAL, where + ": uidMappings and gidMappings go together (give both or neither)");
    MountStep::IdMap idmap;
    // Mappings alone idmap the top mount, as "idmap" does.
    idmap.recursive = step.flags.idmap_recursive;
    if (!m.uid_mappings.empty()) {
        idmap.uids = m.uid_mappings;
        idmap.gids = m.gid_mappings;
        return idmap;
    }
    if (plan.new_namespaces & CLONE_NEWUSER) {
        idmap.uids = plan.uid_mappings;
        idmap.gids = plan.gid_mappings;
        return idmap;
    }
    for (const auto& j : plan.joins)
        if (j.clone_flag == CLONE_NEWUSER) {
            idmap.userns_path = j.path;
            return idmap;
        }
    return fail(EINVAL, where + ": " + (step.flags.idmap_recursive ? "ridmap" : "idmap") +
                            " without uidMappings and gidMappings of its own takes the container's user "
                            "namespace, and linux.namespaces has none");
}

}  // namespace

MountFlags parse_mount_options(const std::vector<std::string>& options) {
    MountFlags f;
    for (const auto& opt : options) {
        bool matched = false;
        for (const auto& o : kFlagOptions) {
            if (opt != o.name) continue;
            if (o.clear) {
                f.set &= ~o.flag;
                f.clear |= o.flag;
            } else {
                f.set |= o.flag;
                f.clear &= ~o.flag;
            }
            matched = true;
            break;
        }
        if (matched) continue;
        for (const auto& o : kPropagationOptions) {
            if (opt != o.name) continue;
            f.propagation = o.flags;
            matched = true;
            break;
        }
        if (matched) continue;
        for (const auto& o : kRecursiveOptions) {
            if (opt != o.name) continue;
            // The atime modes are one field, not independent bits: a mode replaces the last.
            bool atime_mode = o.attr == MOUNT_ATTR_NOATIME || o.attr == MOUNT_ATTR_STRICTATIME ||
                              o.attr == MOUNT_ATTR_RELATIME;
            if (atime_mode && !o.clear) {
                f.recursive_set &= ~static_cast<uint64_t>(MOUNT_ATTR__ATIME);
                f.recursive_clear |= MOUNT_ATTR__ATIME;
            }
            // Last word wins, as with the plain flags ("rro,rrw" is read-write).
            if (o.clear) {
                f.recursive_set &= ~o.attr;
                f.recursive_clear |= atime_mode ? MOUNT_ATTR__ATIME : o.attr;
            } else {
                f.recursive_set |= o.attr;
                if (!atime_mode) f.recursive_clear &= ~o.attr;
            }
            matched = true;
            break;
        }
        if (matched) continue;
        if (opt == "tmpcopyup") {
            f.tmpcopyup = true;
        } else if (opt == "idmap" || opt == "ridmap") {
            f.idmap = true;
            f.idmap_recursive = opt == "ridmap";
        } else {
            if (!f.data.empty()) f.data += ',';
            f.data += opt;
        }
    }
    return f;
}

Result<unsigned long> parse_propagation(const std::string& name) {
    for (const auto& o : kPropagationOptions)
        if (name == o.name) return o.flags;
    return fail(EINVAL, "unknown propagation \"" + name + "\"");
}

std::string clean_container_path(const std::string& path) {
    std::vector<std::string_view> parts;
    std::string_view s(path);
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find('/', i);
        if (j == std::string_view::npos) j = s.size();
        std::string_view part = s.substr(i, j - i);
        if (part == "..") {
            if (!parts.empty()) parts.pop_back();
        } else if (!part.empty() && part != ".") {
            parts.push_back(part);
        }
        i = j + 1;
    }
    std::string out;
    for (auto p : parts) {
        out += '/';
        out += p;
    }
    return out.empty() ? "/" : out;
}

bool Plan::own_pid_namespace() const { return (new_namespaces & CLONE_NEWPID) != 0; }

std::vector<DeviceNode> default_devices() {
    return {
        {"/dev/null", 'c', 1, 3, 0666, 0, 0},    {"/dev/zero", 'c', 1, 5, 0666, 0, 0},
        {"/dev/full", 'c', 1, 7, 0666, 0, 0},    {"/dev/random", 'c', 1, 8, 0666, 0, 0},
        {"/dev/urandom", 'c', 1, 9, 0666, 0, 0}, {"/dev/tty", 'c', 5, 0, 0666, 0, 0},
    };
}

Result<Plan> make_plan(const oci::Spec& spec, const PlanOptions& options) {
    Plan plan;
    plan.id = options.id;
    const oci::Linux empty_linux;
    const oci::Linux& linux = spec.linux ? *spec.linux : empty_linux;

    // Namespaces: new ones become clone flags, paths become joins with the user namespace
    // first, since joining it changes which other namespaces we may enter.
    for (const auto& ns : linux.namespaces) {
        auto kind = oci::namespace_kind(ns.type);
        if (!kind) return fail(EINVAL, "linux.namespaces: unknown namespace type \"" + ns.type + "\"");
        if (ns.path.empty()) {
            plan.new_namespaces |= kind->clone_flag;
        } else {
            NamespaceJoin j{kind->clone_flag, ns.type, ns.path};
            if (kind->clone_flag == CLONE_NEWUSER)
                plan.joins.insert(plan.joins.begin(), j);
            else
                plan.joins.push_back(j);
        }
    }
    // Not built: refused rather than silently left out (README, "Not built yet").
    for (const auto& [host, device] : linux.net_devices)
        plan.net_devices.push_back(NetDeviceMove{host, device.name.empty() ? host : device.name});
    if (linux.intel_rdt) return fail(EOPNOTSUPP, "linux.intelRdt: Intel RDT (resctrl) is not supported");
    plan.uid_mappings = linux.uid_mappings;
    plan.gid_mappings = linux.gid_mappings;
    plan.has_mount_namespace = (plan.new_namespaces & CLONE_NEWNS) != 0;
    for (const auto& j : plan.joins)
        if (j.clone_flag == CLONE_NEWNS) plan.has_mount_namespace = true;

    // Root filesystem.
    if (!spec.root) return fail(EINVAL, "root: missing");
    plan.bundle = options.bundle;
    plan.rootfs = clean_container_path(join_path(options.bundle, spec.root->path));
    plan.rootfs_readonly = spec.root->readonly;
    plan.root_propagation = MS_SLAVE | MS_REC;
    if (!linux.rootfs_propagation.empty()) {
        FB_ASSIGN(unsigned long prop, parse_propagation(linux.rootfs_propagation));
        // Building the rootfs under a shared "/" would leak our mounts to the host, so
        // shared propagation is applied to the container's "/" only after pivot_root.
        // Likewise an unbindable "/" could not be bound onto the rootfs.
        if (prop & (MS_SHARED | MS_UNBINDABLE))
            plan.rootfs_propagation_after = prop;
        else
            plan.root_propagation = prop;
    }

    for (size_t i = 0; i < spec.mounts.size(); ++i) {
        const auto& m = spec.mounts[i];
        MountStep step;
        step.destination = clean_container_path(m.destination);
        step.flags = parse_mount_options(m.options);
        step.fstype = m.type;
        step.source = m.source;
        bool bind = (step.flags.set & MS_BIND) != 0 || m.type == "bind" || m.type == "rbind";
        if (bind) {
            step.kind = MountKind::Bind;
            step.recursive_bind = (step.flags.set & MS_REC) != 0 || m.type == "rbind";
            if (m.type == "rbind") step.flags.set |= MS_REC;
            step.flags.set |= MS_BIND;
            // Relative bind sources are relative to the bundle, as in runc.
            step.source = join_path(options.bundle, m.source);
            unsigned long extra = step.flags.set & ~(MS_BIND | MS_REC | MS_REMOUNT);
            // A plain "rw" changes nothing on a fresh bind: no remount for it alone.
            step.bind_needs_remount = extra != 0 || (step.flags.clear & ~MS_RDONLY) != 0;
        } else if (m.type == "proc") {
            step.kind = MountKind::Proc;
        } else if (m.type == "sysfs") {
            step.kind = MountKind::Sysfs;
        } else if (m.type == "cgroup" || m.type == "cgroup2") {
            step.kind = MountKind::Cgroup;
        } else {
            step.kind = MountKind::Other;
            if (step.fstype.empty()) step.fstype = m.source;
            if (step.fstype.empty())
                return fail(EINVAL, "mounts[" + std::to_string(i) + "]: no type for " + m.destination);
        }
        if (step.flags.idmap || !m.uid_mappings.empty() || !m.gid_mappings.empty()) {
            FB_ASSIGN(step.idmap, plan_idmap(m, step, plan, i));
        }
        if (step.kind == MountKind::Bind && step.destination == "/dev") plan.dev_is_bind_mounted = true;
        plan.mounts.push_back(std::move(step));
    }

    // Devices: the defaults, unless the config names the same path itself.
    std::vector<DeviceNode> devices;
    for (const auto& d : linux.devices) {
        DeviceNode n;
        n.path = clean_container_path(d.path);
        n.type = d.type.empty() ? 'c' : d.type[0];
        n.major = static_cast<uint32_t>(d.major);
        n.minor = static_cast<uint32_t>(d.minor);
        n.mode = d.file_mode.value_or(0666);
        n.uid = d.uid.value_or(0);
        n.gid = d.gid.value_or(0);
        devices.push_back(n);
    }
    for (const auto& def : default_devices()) {
        bool overridden = false;
        for (const auto& d : devices) overridden |= d.path == def.path;
        if (!overridden) plan.devices.push_back(def);
    }
    plan.devices.insert(plan.devices.end(), devices.begin(), devices.end());

    for (const auto& p : linux.masked_paths) plan.masked_paths.push_back(clean_container_path(p));
    for (const auto& p : linux.readonly_paths) plan.readonly_paths.push_back(clean_container_path(p));

    plan.hostname = spec.hostname;
    plan.domainname = spec.domainname;
    plan.set_hostname = !spec.hostname.empty();
    plan.set_domainname = !spec.domainname.empty();
    for (const auto& [k, v] : linux.sysctl) plan.sysctl.emplace_back(k, v);
    for (const auto& [k, v] : linux.time_offsets) plan.time_offsets.emplace_back(k, v);
    // The domain is validated (LINUX or LINUX32); the spec defines no flags yet.
    if (linux.personality) plan.personality = linux.personality->domain == "LINUX32" ? PER_LINUX32 : PER_LINUX;
    if (linux.memory_policy) {
        FB_ASSIGN(plan.memory_policy, memory_policy_plan(*linux.memory_policy));
    }

    if (spec.process) plan.process = *spec.process;
    if (plan.process.cwd.empty()) plan.process.cwd = "/";

    // cgroupsPath: absolute as given; relative under "/forkbox"; absent: "/forkbox/<id>".
    // With the systemd driver, a unit in a slice (systemd.hpp).
    if (options.systemd_cgroup) {
        FB_ASSIGN(systemd::Unit unit, systemd::parse_cgroups_path(linux.cgroups_path, options.id, options.rootless));
        plan.cgroups_path = unit.path;
        plan.systemd_unit = unit.unit;
        plan.systemd_slice = unit.slice;
    } else if (linux.cgroups_path.empty())
        plan.cgroups_path = std::string(kDefaultCgroupParent) + "/" + options.id;
    else if (linux.cgroups_path[0] == '/')
        plan.cgroups_path = clean_container_path(linux.cgroups_path);
    else
        plan.cgroups_path = clean_container_path(std::string(kDefaultCgroupParent) + "/" + linux.cgroups_path);
    if (linux.resources) plan.resources = *linux.resources;
    if (!options.restrict_devices)
        plan.resources.devices.clear();
    else if (plan.resources.devices.empty())
        plan.resources.devices.push_back(oci::DeviceRule{false, "a", std::nullopt, std::nullopt, "rwm"});

    if (spec.hooks) {
        plan.hooks.prestart = spec.hooks->prestart;
        plan.hooks.create_runtime = spec.hooks->create_runtime;
        plan.hooks.create_container = spec.hooks->create_container;
        plan.hooks.start_container = spec.hooks->start_container;
        plan.hooks.poststart = spec.hooks->poststart;
        plan.hooks.poststop = spec.hooks->poststop;
    }
    return plan;
}

namespace {

// The kernel's numbers for the spec's names (uapi sched.h, ioprio.h, mempolicy.h).
constexpr std::pair<std::string_view, uint32_t> kSchedPolicies[] = {
    {"SCHED_OTHER", 0}, {"SCHED_FIFO", 1}, {"SCHED_RR", 2},     {"SCHED_BATCH", 3},
    {"SCHED_ISO", 4},   {"SCHED_IDLE", 5}, {"SCHED_DEADLINE", 6},
};
constexpr std::pair<std::string_view, uint64_t> kSchedFlags[] = {
    {"SCHED_FLAG_RESET_ON_FORK", 0x01},  {"SCHED_FLAG_RECLAIM", 0x02},     {"SCHED_FLAG_DL_OVERRUN", 0x04},
    {"SCHED_FLAG_KEEP_POLICY", 0x08},    {"SCHED_FLAG_KEEP_PARAMS", 0x10}, {"SCHED_FLAG_UTIL_CLAMP_MIN", 0x20},
    {"SCHED_FLAG_UTIL_CLAMP_MAX", 0x40},
};
constexpr std::pair<std::string_view, int> kIoPriorityClasses[] = {
    {"IOPRIO_CLASS_RT", 1}, {"IOPRIO_CLASS_BE", 2}, {"IOPRIO_CLASS_IDLE", 3}};
constexpr std::pair<std::string_view, int> kMemoryPolicyModes[] = {
    {"MPOL_DEFAULT", 0}, {"MPOL_PREFERRED", 1},      {"MPOL_BIND", 2},
    {"MPOL_INTERLEAVE", 3}, {"MPOL_LOCAL", 4},        {"MPOL_PREFERRED_MANY", 5},
    {"MPOL_WEIGHTED_INTERLEAVE", 6},
};
constexpr std::pair<std::string_view, int> kMemoryPolicyFlags[] = {
    {"MPOL_F_STATIC_NODES", 1 << 15}, {"MPOL_F_RELATIVE_NODES", 1 << 14}, {"MPOL_F_NUMA_BALANCING", 1 << 13}};

template <typename Table>
auto value_of(const Table& table, std::string_view name) {
    for (const auto& [n, v] : table)
        if (n == name) return v;
    return decltype(table[0].second){};
}

}  // namespace

SchedulerAttr scheduler_attr(const oci::Scheduler& s) {
    SchedulerAttr a;
    a.policy = value_of(kSchedPolicies, s.policy);
    for (const auto& f : s.flags) a.flags |= value_of(kSchedFlags, f);
    a.nice = s.nice.value_or(0);
    a.priority = static_cast<uint32_t>(s.priority.value_or(0));
    a.runtime = s.runtime.value_or(0);
    a.deadline = s.deadline.value_or(0);
    a.period = s.period.value_or(0);
    return a;
}

int io_priority_value(const oci::IoPriority& io) {
    // IOPRIO_PRIO_VALUE(class, level): the class above 13 bits of level.
    return (value_of(kIoPriorityClasses, io.klass) << 13) | io.priority;
}

Result<std::vector<uint64_t>> parse_id_list(std::string_view list, std::string_view what) {
    std::vector<uint64_t> mask;
    auto bad = [&] { return fail(EINVAL, std::string(what) + ": invalid list \"" + std::string(list) + "\""); };
    auto number = [](std::string_view t) -> std::optional<uint32_t> {
        uint32_t n = 0;
        auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        if (t.empty() || ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
        return n;
    };
    size_t pos = 0;
    while (pos < list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string_view::npos) comma = list.size();
        std::string_view item = list.substr(pos, comma - pos);
        size_t dash = item.find('-');
        auto first = number(item.substr(0, dash));
        auto last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
        // 4096: the kernel's largest CPU and node counts are below it.
        if (!first || !last || *first > *last || *last >= 4096) return bad();
        for (uint32_t id = *first; id <= *last; ++id) {
            if (mask.size() <= id / 64) mask.resize(id / 64 + 1);
            mask[id / 64] |= uint64_t{1} << (id % 64);
        }
        pos = comma + 1;
        if (comma + 1 == list.size()) return bad();  // a trailing comma
    }
    return mask;
}

Result<MemoryPolicyPlan> memory_policy_plan(const oci::MemoryPolicy& m) {
    MemoryPolicyPlan p;
    p.mode = value_of(kMemoryPolicyModes, m.mode);
    for (const auto& f : m.flags) p.mode |= value_of(kMemoryPolicyFlags, f);
    FB_ASSIGN(p.nodes, parse_id_list(m.nodes, "linux.memoryPolicy.nodes"));
    bool wants_nodes = m.mode != "MPOL_DEFAULT" && m.mode != "MPOL_LOCAL" && m.mode != "MPOL_PREFERRED";
    if (wants_nodes && p.nodes.empty()) return fail(EINVAL, "linux.memoryPolicy.nodes: " + m.mode + " needs nodes");
    if ((m.mode == "MPOL_DEFAULT" || m.mode == "MPOL_LOCAL") && !p.nodes.empty())
        return fail(EINVAL, "linux.memoryPolicy.nodes: " + m.mode + " takes no nodes");
    return p;
}

}  // namespace forkbox
