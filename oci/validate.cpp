#include "oci/validate.hpp"

#include <cerrno>
#include <charconv>
#include <optional>
#include <set>
#include <string>

#include "oci/linux_names.hpp"

namespace forkbox::oci {

namespace {

std::unexpected<Error> invalid(std::string message) { return fail(EINVAL, std::move(message)); }

std::string quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string at(std::string_view path, size_t i) {
    return std::string(path) + "[" + std::to_string(i) + "]";
}

bool is_abs(std::string_view p) { return !p.empty() && p[0] == '/'; }

Result<void> require_abs(std::string_view path, std::string_view value) {
    if (!is_abs(value))
        return invalid(std::string(path) + ": must be an absolute path, got " + quote(value));
    return {};
}

bool has_namespace(const Spec& s, const char* type) { return s.find_namespace(type) != nullptr; }

// ---- root and process ----

Result<void> check_root(const Spec& s) {
    if (!s.root) return invalid("root: required to create a container");
    if (s.root->path.empty()) return invalid("root.path: must not be empty");
    return {};
}

Result<void> check_capability_set(std::string_view path, const std::vector<std::string>& caps) {
    for (const auto& c : caps)
        if (!capability_from_name(c))
            return invalid(std::string(path) + ": unknown capability " + quote(c));
    return {};
}

Result<void> check_capabilities(std::string_view path, const Capabilities& c) {
    const std::string p(path);
    FB_TRY(check_capability_set(p + ".bounding", c.bounding));
    FB_TRY(check_capability_set(p + ".effective", c.effective));
    FB_TRY(check_capability_set(p + ".inheritable", c.inheritable));
    FB_TRY(check_capability_set(p + ".permitted", c.permitted));
    FB_TRY(check_capability_set(p + ".ambient", c.ambient));
    return {};
}

// Like runc, soft <= hard is left to the kernel (setrlimit fails with EINVAL).
Result<void> check_rlimits(std::string_view path, const std::vector<Rlimit>& rlimits) {
    std::set<std::string> seen;
    for (size_t i = 0; i < rlimits.size(); ++i) {
        const auto& r = rlimits[i];
        if (!rlimit_from_name(r.type))
            return invalid(at(path, i) + ".type: unknown rlimit " + quote(r.type));
        if (!seen.insert(r.type).second)
            return invalid(at(path, i) + ".type: duplicate rlimit " + quote(r.type));
    }
    return {};
}

// The checks runc makes (sched_setattr(2) rules), plus known names.
Result<void> check_scheduler(std::string_view path, const Scheduler& s) {
    const std::string p(path);
    if (s.policy.empty()) return invalid(p + ".policy: must not be empty");
    if (!contains_name(scheduler_policy_names(), s.policy))
        return invalid(p + ".policy: unknown scheduler policy " + quote(s.policy));
    for (const auto& f : s.flags)
        if (!contains_name(scheduler_flag_names(), f))
            return invalid(p + ".flags: unknown scheduler flag " + quote(f));
    if (s.nice && (*s.nice < -20 || *s.nice > 19))
        return invalid(p + ".nice: must be between -20 and 19, got " + std::to_string(*s.nice));
    if (s.priority && *s.priority != 0 && s.policy != "SCHED_FIFO" && s.policy != "SCHED_RR")
        return invalid(p + ".priority: can only be set for SCHED_FIFO or SCHED_RR");
    bool deadline_params = (s.runtime && *s.runtime) || (s.deadline && *s.deadline) ||
                           (s.period && *s.period);
    if (deadline_params && s.policy != "SCHED_DEADLINE")
        return invalid(p + ": runtime/deadline/period can only be set for SCHED_DEADLINE");
    return {};
}

Result<void> check_io_priority(std::string_view path, const IoPriority& io) {
    const std::string p(path);
    if (!contains_name(io_priority_class_names(), io.klass))
        return invalid(p + ".class: unknown I/O priority class " + quote(io.klass));
    if (io.priority < 0 || io.priority > 7)
        return invalid(p + ".priority: must be between 0 and 7, got " +
                       std::to_string(io.priority));
    return {};
}

Result<void> check_cpu_list(std::string_view path, const std::string& list) {
    for (char c : list)
        if (!((c >= '0' && c <= '9') || c == ',' || c == '-' || c == ' '))
            return invalid(std::string(path) + ": invalid CPU list " + quote(list));
    return {};
}

// runc refuses environment entries without '=' or with an empty name at exec time.
Result<void> check_env(std::string_view path, const std::vector<std::string>& env) {
    for (size_t i = 0; i < env.size(); ++i) {
        auto eq = env[i].find('=');
        if (eq == std::string::npos)
            return invalid(at(path, i) + ": " + quote(env[i]) + " is not of the form NAME=VALUE");
        if (eq == 0) return invalid(at(path, i) + ": variable name must not be empty");
    }
    return {};
}

// ---- namespaces and what depends on them ----

Result<void> check_namespaces(const Linux& l) {
    std::set<std::string> seen;
    for (size_t i = 0; i < l.namespaces.size(); ++i) {
        const auto& ns = l.namespaces[i];
        const std::string p = at("linux.namespaces", i);
        if (!namespace_kind(ns.type))
            return invalid(p + ".type: unknown namespace type " + quote(ns.type));
        if (!seen.insert(ns.type).second)
            return invalid(p + ".type: duplicate namespace type " + quote(ns.type));
        if (!ns.path.empty()) FB_TRY(require_abs(p + ".path", ns.path));
    }
    return {};
}

Result<void> check_id_mappings(std::string_view path, const std::vector<IdMapping>& maps) {
    for (size_t i = 0; i < maps.size(); ++i)
        if (maps[i].size == 0) return invalid(at(path, i) + ".size: must be greater than 0");
    return {};
}

Result<void> check_user_namespace(const Spec& s) {
    const Linux& l = *s.linux;
    const Namespace* user = s.find_namespace("user");
    if (!user) {
        if (!l.uid_mappings.empty() || !l.gid_mappings.empty())
            return invalid(
                "linux.uidMappings: user namespace mappings specified, but no user namespace in "
                "linux.namespaces");
        return {};
    }
    FB_TRY(check_id_mappings("linux.uidMappings", l.uid_mappings));
    FB_TRY(check_id_mappings("linux.gidMappings", l.gid_mappings));
    // A joined user namespace already has its maps; a new one is useless without them.
    if (user->path.empty()) {
        if (l.uid_mappings.empty())
            return invalid("linux.uidMappings: a new user namespace needs uid mappings");
        if (l.gid_mappings.empty())
            return invalid("linux.gidMappings: a new user namespace needs gid mappings");
    }
    return {};
}

Result<void> check_uts(const Spec& s) {
    if (has_namespace(s, "uts")) return {};
    if (!s.hostname.empty())
        return invalid("hostname: unable to set hostname without a private UTS namespace");
    if (!s.domainname.empty())
        return invalid("domainname: unable to set domainname without a private UTS namespace");
    return {};
}

Result<void> check_time_namespace(const Spec& s) {
    const Linux& l = *s.linux;
    if (l.time_offsets.empty()) return {};
    if (!has_namespace(s, "time"))
        return invalid(
            "linux.timeOffsets: time namespace offsets specified, but no time namespace in "
            "linux.namespaces");
    for (const auto& [clock, off] : l.time_offsets) {
        const std::string p = "linux.timeOffsets." + clock;
        if (clock != "monotonic" && clock != "boottime")
            return invalid(p + ": unknown clock (expected monotonic or boottime)");
        if (off.nanosecs >= 1000000000u)
            return invalid(p + ".nanosecs: must be less than 1000000000");
    }
    return {};
}

Result<void> check_masked_readonly(const Spec& s) {
    const Linux& l = *s.linux;
    for (size_t i = 0; i < l.masked_paths.size(); ++i)
        FB_TRY(require_abs(at("linux.maskedPaths", i), l.masked_paths[i]));
    for (size_t i = 0; i < l.readonly_paths.size(); ++i)
        FB_TRY(require_abs(at("linux.readonlyPaths", i), l.readonly_paths[i]));
    if ((!l.masked_paths.empty() || !l.readonly_paths.empty()) && !has_namespace(s, "mount"))
        return invalid(
            "linux.maskedPaths: unable to restrict paths without a private mount namespace");
    return {};
}

// sysctl(8) accepts '/' as the separator; then '.' inside a component is literal
// ("net/ipv4/conf/eno2.100/rp_filter"). Swapping the two gives one form to check, as runc does.
std::string sysctl_dotted(const std::string& key) {
    auto first = key.find_first_of("./");
    if (first == std::string::npos || key[first] == '.') return key;
    std::string out = key;
    for (char& c : out) c = c == '.' ? '/' : c == '/' ? '.' : c;
    return out;
}

// /proc/sys is only partly namespaced: these are the keys runc allows, and with which namespace.
Result<void> check_sysctl(const Spec& s) {
    static const std::set<std::string> ipc_keys = {
        "kernel.msgmax", "kernel.msgmnb", "kernel.msgmni",  "kernel.sem",
        "kernel.shmall", "kernel.shmmax", "kernel.shmmni",  "kernel.shm_rmid_forced",
    };
    for (const auto& [raw, value] : s.linux->sysctl) {
        (void)value;
        const std::string key = sysctl_dotted(raw);
        const std::string p = "linux.sysctl: " + quote(raw);
        if (ipc_keys.count(key) || key.starts_with("fs.mqueue.")) {
            if (!has_namespace(s, "ipc"))
                return invalid(p + " is not allowed without a private IPC namespace");
            continue;
        }
        if (key.starts_with("net.")) {
            // A netns joined by path could be the host's; the engine checks that with stat.
            if (!has_namespace(s, "network"))
                return invalid(p + " is not allowed without a private network namespace");
            continue;
        }
        if (key == "kernel.domainname" || key == "kernel.hostname") {
            if (!has_namespace(s, "uts"))
                return invalid(p + " is not allowed without a private UTS namespace");
            // runc: the hostname has its own OCI field, and two sources would conflict.
            if (key == "kernel.hostname")
                return invalid(p + " conflicts with the OCI \"hostname\" field; use that instead");
            continue;
        }
        return invalid(p + " is not in a separate kernel namespace");
    }
    return {};
}

// ---- filesystem ----

bool has_option(const Mount& m, std::string_view opt) {
    for (const auto& o : m.options)
        if (o == opt) return true;
    return false;
}

Result<void> check_mounts(const Spec& s) {
    for (size_t i = 0; i < s.mounts.size(); ++i) {
        const Mount& m = s.mounts[i];
        const std::string p = at("mounts", i);
        // A relative destination is deprecated but runc takes it as relative to "/".
        if (m.destination.empty()) return invalid(p + ".destination: must not be empty");
        if (!m.uid_mappings.empty() || !m.gid_mappings.empty()) {
            if (!has_option(m, "bind") && !has_option(m, "rbind"))
                return invalid(p + ": uidMappings/gidMappings are supported only for bind mounts");
            FB_TRY(check_id_mappings(p + ".uidMappings", m.uid_mappings));
            FB_TRY(check_id_mappings(p + ".gidMappings", m.gid_mappings));
        }
    }
    return {};
}

Result<void> check_hook_list(std::string_view name, const std::vector<Hook>& hooks) {
    for (size_t i = 0; i < hooks.size(); ++i) {
        const std::string p = at("hooks." + std::string(name), i);
        FB_TRY(require_abs(p + ".path", hooks[i].path));
        if (hooks[i].timeout && *hooks[i].timeout <= 0)
            return invalid(p + ".timeout: must be greater than 0");
    }
    return {};
}

Result<void> check_hooks(const Spec& s) {
    if (!s.hooks) return {};
    const Hooks& h = *s.hooks;
    FB_TRY(check_hook_list("prestart", h.prestart));
    FB_TRY(check_hook_list("createRuntime", h.create_runtime));
    FB_TRY(check_hook_list("createContainer", h.create_container));
    FB_TRY(check_hook_list("startContainer", h.start_container));
    FB_TRY(check_hook_list("poststart", h.poststart));
    FB_TRY(check_hook_list("poststop", h.poststop));
    return {};
}

Result<void> check_devices(const Linux& l) {
    for (size_t i = 0; i < l.devices.size(); ++i) {
        const Device& d = l.devices[i];
        const std::string p = at("linux.devices", i);
        if (d.type != "c" && d.type != "b" && d.type != "u" && d.type != "p")
            return invalid(p + ".type: unknown device type " + quote(d.type) +
                           " (expected c, b, u or p)");
        FB_TRY(require_abs(p + ".path", d.path));
    }
    return {};
}

Result<void> check_rootfs_propagation(const Linux& l) {
    static const std::set<std::string> modes = {
        "", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable",
        "runbindable",
    };
    if (!modes.count(l.rootfs_propagation))
        return invalid("linux.rootfsPropagation: unknown propagation " +
                       quote(l.rootfs_propagation));
    return {};
}

// ---- cgroups ----

Result<void> check_resources(const Linux& l) {
    if (!l.resources) return {};
    const Resources& r = *l.resources;
    for (size_t i = 0; i < r.devices.size(); ++i) {
        const DeviceRule& d = r.devices[i];
        const std::string p = at("linux.resources.devices", i);
        if (!d.type.empty() && d.type != "a" && d.type != "c" && d.type != "b")
            return invalid(p + ".type: unknown device type " + quote(d.type) +
                           " (expected a, c or b)");
        for (char c : d.access)
            if (c != 'r' && c != 'w' && c != 'm')
                return invalid(p + ".access: " + quote(d.access) +
                               " is not a combination of r, w and m");
    }
    if (r.memory && r.memory->swappiness && *r.memory->swappiness > 100)
        return invalid("linux.resources.memory.swappiness: must be between 0 and 100, got " +
                       std::to_string(*r.memory->swappiness));
    if (r.cpu && r.cpu->quota && r.cpu->burst && *r.cpu->quota > 0 &&
        *r.cpu->burst > static_cast<uint64_t>(*r.cpu->quota))
        return invalid("linux.resources.cpu.burst: must not be larger than quota");
    for (size_t i = 0; i < r.hugepage_limits.size(); ++i)
        if (r.hugepage_limits[i].page_size.empty())
            return invalid(at("linux.resources.hugepageLimits", i) +
                           ".pageSize: must not be empty");
    for (const auto& [key, value] : r.unified) {
        (void)value;
        if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..")
            return invalid("linux.resources.unified: " + quote(key) +
                           " must be a cgroup file name (no slashes)");
    }
    return {};
}

// ---- seccomp and the rest of linux ----

bool takes_errno(std::string_view action) {
    return action == "SCMP_ACT_ERRNO" || action == "SCMP_ACT_TRACE";
}

Result<void> check_seccomp(const Linux& l) {
    if (!l.seccomp) return {};
    const Seccomp& sc = *l.seccomp;
    const std::string p = "linux.seccomp";
    if (!contains_name(seccomp_action_names(), sc.default_action))
        return invalid(p + ".defaultAction: unknown action " + quote(sc.default_action));
    // The notify listener is only reached after the filter is installed, by syscalls the
    // runtime itself still makes: a notify default would deadlock the container's setup.
    if (sc.default_action == "SCMP_ACT_NOTIFY")
        return invalid(p + ".defaultAction: SCMP_ACT_NOTIFY cannot be the default action");
    if (sc.default_errno_ret && !takes_errno(sc.default_action))
        return invalid(p + ".defaultErrnoRet: only valid with SCMP_ACT_ERRNO or SCMP_ACT_TRACE");
    for (const auto& a : sc.architectures)
        if (!contains_name(seccomp_arch_names(), a))
            return invalid(p + ".architectures: unknown architecture " + quote(a));
    for (const auto& f : sc.flags)
        if (!contains_name(seccomp_flag_names(), f))
            return invalid(p + ".flags: unknown flag " + quote(f));
    if (!sc.listener_metadata.empty() && sc.listener_path.empty())
        return invalid(p + ".listenerMetadata: requires listenerPath");
    for (size_t i = 0; i < sc.syscalls.size(); ++i) {
        const SeccompSyscall& sys = sc.syscalls[i];
        const std::string sp = at(p + ".syscalls", i);
        if (sys.names.empty()) return invalid(sp + ".names: must contain at least one name");
        for (const auto& n : sys.names)
            if (n.empty()) return invalid(sp + ".names: syscall names must not be empty");
        if (!contains_name(seccomp_action_names(), sys.action))
            return invalid(sp + ".action: unknown action " + quote(sys.action));
        if (sys.action == "SCMP_ACT_NOTIFY" && sc.listener_path.empty())
            return invalid(sp + ".action: SCMP_ACT_NOTIFY requires linux.seccomp.listenerPath");
        if (sys.errno_ret && !takes_errno(sys.action))
            return invalid(sp + ".errnoRet: only valid with SCMP_ACT_ERRNO or SCMP_ACT_TRACE");
        for (size_t j = 0; j < sys.args.size(); ++j) {
            const SeccompArg& a = sys.args[j];
            const std::string ap = at(sp + ".args", j);
            if (a.index >= 6)  // syscalls take at most six arguments
                return invalid(ap + ".index: must be less than 6, got " +
                               std::to_string(a.index));
            if (!contains_name(seccomp_operator_names(), a.op))
                return invalid(ap + ".op: unknown operator " + quote(a.op));
        }
    }
    return {};
}

Result<void> check_personality(const Linux& l) {
    if (!l.personality) return {};
    if (l.personality->domain != "LINUX" && l.personality->domain != "LINUX32")
        return invalid("linux.personality.domain: unknown domain " +
                       quote(l.personality->domain) + " (expected LINUX or LINUX32)");
    return {};
}

Result<void> check_intel_rdt(const Linux& l) {
    if (!l.intel_rdt) return {};
    const std::string& id = l.intel_rdt->clos_id;
    // The closID names a directory under /sys/fs/resctrl.
    if (id == "." || id == ".." || id.find('/') != std::string::npos)
        return invalid("linux.intelRdt.closID: invalid " + quote(id));
    return {};
}

Result<void> check_memory_policy(const Linux& l) {
    if (!l.memory_policy) return {};
    const MemoryPolicy& m = *l.memory_policy;
    if (!contains_name(memory_policy_mode_names(), m.mode))
        return invalid("linux.memoryPolicy.mode: unknown mode " + quote(m.mode));
    for (const auto& f : m.flags)
        if (!contains_name(memory_policy_flag_names(), f))
            return invalid("linux.memoryPolicy.flags: unknown flag " + quote(f));
    return {};
}

// Interface names: at most IFNAMSIZ-1 bytes, no '/', no whitespace, not "." or "..".
bool valid_ifname(std::string_view n) {
    if (n.empty() || n.size() > 15 || n == "." || n == "..") return false;
    for (char c : n)
        if (c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n') return false;
    return true;
}

Result<void> check_net_devices(const Spec& s) {
    const Linux& l = *s.linux;
    if (l.net_devices.empty()) return {};
    if (!has_namespace(s, "network"))
        return invalid(
            "linux.netDevices: unable to move network devices without a private network "
            "namespace");
    std::set<std::string> names;
    for (const auto& [host, dev] : l.net_devices) {
        const std::string p = "linux.netDevices." + host;
        if (!valid_ifname(host)) return invalid(p + ": invalid interface name " + quote(host));
        const std::string& name = dev.name.empty() ? host : dev.name;
        if (!valid_ifname(name)) return invalid(p + ".name: invalid interface name " + quote(name));
        if (!names.insert(name).second)
            return invalid(p + ".name: duplicate interface name " + quote(name));
    }
    return {};
}

Result<void> check_linux(const Spec& s) {
    if (!s.linux) return {};
    const Linux& l = *s.linux;
    FB_TRY(check_namespaces(l));
    FB_TRY(check_user_namespace(s));
    FB_TRY(check_time_namespace(s));
    FB_TRY(check_masked_readonly(s));
    FB_TRY(check_sysctl(s));
    FB_TRY(check_devices(l));
    FB_TRY(check_rootfs_propagation(l));
    FB_TRY(check_resources(l));
    FB_TRY(check_seccomp(l));
    FB_TRY(check_personality(l));
    FB_TRY(check_intel_rdt(l));
    FB_TRY(check_memory_policy(l));
    FB_TRY(check_net_devices(s));
    return {};
}

}  // namespace

Result<void> validate_process(const Process& proc, std::string_view path) {
    const std::string p(path);
    if (proc.args.empty()) return invalid(p + ".args: must not be empty");
    if (proc.args[0].empty()) return invalid(p + ".args[0]: must not be empty");
    FB_TRY(require_abs(p + ".cwd", proc.cwd));
    FB_TRY(check_env(p + ".env", proc.env));
    if (proc.capabilities) FB_TRY(check_capabilities(p + ".capabilities", *proc.capabilities));
    FB_TRY(check_rlimits(p + ".rlimits", proc.rlimits));
    if (proc.scheduler) FB_TRY(check_scheduler(p + ".scheduler", *proc.scheduler));
    if (proc.io_priority) FB_TRY(check_io_priority(p + ".ioPriority", *proc.io_priority));
    if (proc.exec_cpu_affinity) {
        FB_TRY(check_cpu_list(p + ".execCPUAffinity.initial", proc.exec_cpu_affinity->initial));
        FB_TRY(check_cpu_list(p + ".execCPUAffinity.final", proc.exec_cpu_affinity->final));
    }
    return {};
}

Result<void> validate(const Spec& spec) {
    FB_TRY(check_root(spec));
    if (!spec.process) return invalid("process: required to create a container");
    FB_TRY(validate_process(*spec.process));
    FB_TRY(check_uts(spec));
    FB_TRY(check_mounts(spec));
    FB_TRY(check_hooks(spec));
    FB_TRY(check_linux(spec));
    return {};
}

namespace {

bool id_is_mapped(uint32_t id, const std::vector<IdMapping>& maps) {
    for (const auto& m : maps)
        if (id >= m.container_id && id - m.container_id < m.size) return true;
    return false;
}

// The id of a mount option "uid=N" ("gid=N"), when it is one.
std::optional<uint32_t> id_option(std::string_view option, std::string_view key) {
    if (!option.starts_with(key)) return std::nullopt;
    std::string_view digits = option.substr(key.size());
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return v;
}

}  // namespace

Result<void> validate_rootless(const Spec& spec) {
    const Namespace* user = nullptr;
    if (spec.linux)
        for (const auto& ns : spec.linux->namespaces)
            if (ns.type == "user") user = &ns;
    if (!user) return fail(EINVAL, "rootless container requires user namespaces");
    // A namespace joined by path comes with its mappings.
    if (!user->path.empty()) return {};
    if (spec.linux->uid_mappings.empty()) return fail(EINVAL, "rootless containers requires at least one UID mapping");
    if (spec.linux->gid_mappings.empty()) return fail(EINVAL, "rootless containers requires at least one GID mapping");
    for (const auto& m : spec.mounts) {
        for (const auto& o : m.options) {
            if (auto uid = id_option(o, "uid="); uid && !id_is_mapped(*uid, spec.linux->uid_mappings))
                return fail(EINVAL, "cannot specify uid= mount options for unmapped uid in rootless containers");
            if (auto gid = id_option(o, "gid="); gid && !id_is_mapped(*gid, spec.linux->gid_mappings))
                return fail(EINVAL, "cannot specify gid= mount options for unmapped gid in rootless containers");
        }
    }
    if (spec.process)
        for (uint32_t gid : spec.process->user.additional_gids)
            if (!id_is_mapped(gid, spec.linux->gid_mappings))
                return fail(EINVAL, "cannot specify unmapped additional gid " + std::to_string(gid) +
                                        " in rootless containers");
    return {};
}

}  // namespace forkbox::oci
