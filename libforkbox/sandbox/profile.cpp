#include "libforkbox/sandbox/profile.hpp"

#include "oci/default_seccomp.hpp"
#include "oci/validate.hpp"

namespace forkbox::sandbox {

namespace {

oci::Mount mount(std::string destination, std::string type, std::string source, std::vector<std::string> options) {
    oci::Mount m;
    m.destination = std::move(destination);
    m.type = std::move(type);
    m.source = std::move(source);
    m.options = std::move(options);
    return m;
}

oci::Namespace fresh(std::string type) {
    oci::Namespace n;
    n.type = std::move(type);
    return n;
}

}  // namespace

const std::vector<std::string>& docker_default_capabilities() {
    static const std::vector<std::string> caps = {
        "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",          "CAP_MKNOD",
        "CAP_NET_RAW", "CAP_SETGID",      "CAP_SETUID", "CAP_SETFCAP",         "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"};
    return caps;
}

oci::Spec sandbox_spec(const SandboxKind& kind, const ProfileOptions& o) {
    oci::Spec spec;
    spec.oci_version = "1.2.0";
    spec.root = oci::Root{o.root, false};
    spec.hostname = "sandbox";

    const std::string small_tmpfs_inodes = "nr_inodes=" + std::to_string(tmpfs_inode_cap(65536));
    spec.mounts = {
        mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
        mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k", small_tmpfs_inodes}),
        mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
        mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k", small_tmpfs_inodes}),
        mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
        // sysfs needs a network namespace the sandbox's user namespace owns.
        // Recursively read-only: the host's mounts under /sys (its cgroup hierarchies) too.
        kind.network ? mount("/sys", "none", "/sys", {"rbind", "nosuid", "noexec", "nodev", "ro", "rro", "rnosuid", "rnodev", "rnoexec"})
                     : mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
        // The host's secrets: sockets and state under /run, root's and users' homes. /tmp,
        // /run and /root are the sandbox's own empty directories in its writable state
        // (embryo_root.cpp), in the stage tmpfs's size cap; /home is empty and read-only.
        mount("/home", "tmpfs", "tmpfs", {"nosuid", "nodev", "ro", "mode=755", "size=4k"}),
    };
    for (const auto& h : o.hidden) spec.mounts.push_back(mount(h, "tmpfs", "tmpfs", {"nosuid", "nodev", "ro", "mode=755", "size=4k"}));
    for (const auto& b : kind.mounts)
        // What is mounted under the source comes along (rbind), as restricted as its top.
        spec.mounts.push_back(mount(b.destination, "bind", b.source,
                                    {"rbind", "nosuid", "nodev", "rnosuid", "rnodev", b.writable ? "rw" : "ro",
                                     b.writable ? "rw" : "rro"}));

    oci::Process p;
    p.args = {"/bin/true"};  // the request's argv replaces it
    p.cwd = "/";
    p.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
    oci::Capabilities caps;
    caps.bounding = caps.effective = caps.permitted = docker_default_capabilities();
    p.capabilities = caps;
    p.no_new_privileges = true;
    spec.process = p;

    oci::Linux linux;
    for (const char* type : {"user", "pid", "mount", "ipc", "uts", "cgroup"}) linux.namespaces.push_back(fresh(type));
    if (!kind.network) linux.namespaces.push_back(fresh("network"));
    // The daemon writes the maps itself; these say what they are (the Plan's user namespace
    // rules, device binds instead of nodes, read them).
    uint32_t size = o.host_is_mapped_root ? 65536 : 1;
    linux.uid_mappings = {oci::IdMapping{0, 0, size}};
    linux.gid_mappings = {oci::IdMapping{0, 0, size}};
    linux.masked_paths = {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                          "/proc/scsi", "/sys/devices/virtual/tpm", "/sys/kernel/debug", "/sys/kernel/tracing"};
    linux.readonly_paths = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"};
    linux.seccomp = oci::default_seccomp(docker_default_capabilities(), oci::native_seccomp_arch_family());
    spec.linux = linux;
    return spec;
}

Result<Plan> sandbox_plan(const SandboxKind& kind, const ProfileOptions& options) {
    oci::Spec spec = sandbox_spec(kind, options);
    FB_TRY_CTX(oci::validate(spec), "sandbox profile");
    return make_plan(spec, PlanOptions{"sandbox", options.root});
}

std::vector<gid_t> member_groups_inside(const HostIdentity& member) {
    std::vector<gid_t> out;
    for (gid_t g : member.groups)
        if (g != 0 && g != member.gid && g < 65536) out.push_back(g);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > 64) out.resize(64);
    return out;
}

}  // namespace forkbox::sandbox
