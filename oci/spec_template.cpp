#include "oci/spec_template.hpp"

#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <string_view>
#include <vector>

#include "libforkbox/base/json.hpp"
#include "oci/default_seccomp.hpp"
#include "oci/spec.hpp"

namespace forkbox::oci {

namespace {

void string_array(json::Writer& w, std::string_view key, const std::vector<std::string_view>& v) {
    w.key(key).begin_array();
    for (auto s : v) w.value(s);
    w.end_array();
}

struct MountTemplate {
    std::string_view destination, type, source;
    std::vector<std::string_view> options;
};

std::vector<MountTemplate> default_mounts(bool rootless) {
    std::vector<MountTemplate> mounts = {
        {"/proc", "proc", "proc", {}},
        {"/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}},
        {"/dev/pts",
         "devpts",
         "devpts",
         {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
        {"/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
        {"/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}},
        {"/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}},
        {"/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}},
    };
    if (!rootless) return mounts;
    // runc's ToRootless: an unprivileged user namespace cannot mount sysfs without its own
    // network namespace, so /sys is bind-mounted from the host; uid=/gid= options name ids
    // that are not mapped, so they go.
    for (auto& m : mounts) {
        if (m.destination == "/sys") {
            // Recursively read-only ("rro" and friends): the rbind brings the host's mounts
            // under /sys along (its cgroup hierarchies), which "ro" alone leaves writable
            // (CVE-2023-25809).
            m = {"/sys", "none", "/sys", {"rbind", "nosuid", "noexec", "nodev", "ro", "rro", "rnosuid", "rnodev", "rnoexec"}};
            continue;
        }
        std::vector<std::string_view> kept;
        for (auto o : m.options)
            if (!o.starts_with("uid=") && !o.starts_with("gid=")) kept.push_back(o);
        m.options = kept;
    }
    return mounts;
}

// runc's set: the seccomp profile is resolved against it too.
const std::vector<std::string_view> kCapabilities = {"CAP_AUDIT_WRITE", "CAP_KILL",
                                                     "CAP_NET_BIND_SERVICE"};

void write_process(json::Writer& w) {
    const auto& caps = kCapabilities;
    w.key("process").begin_object();
    w.key("terminal").value(true);
    w.key("user").begin_object().key("uid").value(0).key("gid").value(0).end_object();
    string_array(w, "args", {"sh"});
    string_array(w, "env",
                 {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"});
    w.key("cwd").value("/");
    // Current runc no longer fills the ambient set: ambient capabilities survive execve of
    // any binary, which surprises users who only meant to keep them for root.
    w.key("capabilities").begin_object();
    string_array(w, "bounding", caps);
    string_array(w, "effective", caps);
    string_array(w, "permitted", caps);
    w.end_object();
    w.key("rlimits").begin_array();
    w.begin_object().key("type").value("RLIMIT_NOFILE").key("hard").value(1024);
    w.key("soft").value(1024).end_object();
    w.end_array();
    w.key("noNewPrivileges").value(true);
    w.end_object();
}

void write_mounts(json::Writer& w, bool rootless) {
    w.key("mounts").begin_array();
    for (const auto& m : default_mounts(rootless)) {
        w.begin_object();
        w.key("destination").value(m.destination);
        w.key("type").value(m.type);
        w.key("source").value(m.source);
        if (!m.options.empty()) string_array(w, "options", m.options);
        w.end_object();
    }
    w.end_array();
}

void write_id_map(json::Writer& w, std::string_view key, uint32_t host_id) {
    w.key(key).begin_array().begin_object();
    w.key("containerID").value(0).key("hostID").value(host_id).key("size").value(1);
    w.end_object().end_array();
}

void write_linux(json::Writer& w, const SpecTemplateOptions& o) {
    w.key("linux").begin_object();
    if (o.rootless) {
        write_id_map(w, "uidMappings", o.host_uid);
        write_id_map(w, "gidMappings", o.host_gid);
    } else {
        // Deny every device; runc then allows its default set (null, zero, tty, ...).
        w.key("resources").begin_object().key("devices").begin_array();
        w.begin_object().key("allow").value(false).key("access").value("rwm").end_object();
        w.end_array().end_object();
    }
    // Rootless drops the network namespace: a new one has only lo, useless without root's
    // help to set up anything else.
    std::vector<std::string_view> namespaces = {"pid", "ipc", "uts", "mount"};
    if (!o.rootless) namespaces.insert(namespaces.begin() + 1, "network");
    if (o.cgroup_namespace) namespaces.push_back("cgroup");
    if (o.rootless) namespaces.push_back("user");
    w.key("namespaces").begin_array();
    for (auto ns : namespaces) w.begin_object().key("type").value(ns).end_object();
    w.end_array();
    string_array(w, "maskedPaths",
                 {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                  "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                  "/proc/sched_debug", "/sys/firmware", "/proc/scsi", "/sys/devices/virtual/tpm"});
    string_array(w, "readonlyPaths",
                 {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"});
    // runc's template has none; Docker and podman give every container one like it.
    w.key("seccomp");
    write_seccomp_json(w, default_seccomp({kCapabilities.begin(), kCapabilities.end()}, o.arch));
    w.end_object();
}

// json::Writer indents with two spaces; runc's files use tabs. Only leading indentation is
// rewritten: strings never hold a raw newline, so every line starts with indentation.
std::string tabs_for_indent(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    bool at_line_start = true;
    for (size_t i = 0; i < s.size(); ++i) {
        if (at_line_start && s[i] == ' ' && i + 1 < s.size() && s[i + 1] == ' ') {
            out += '\t';
            ++i;
            continue;
        }
        at_line_start = s[i] == '\n';
        out += s[i];
    }
    return out;
}

bool cgroup2_unified() {
    struct statfs st {};
    if (statfs("/sys/fs/cgroup", &st) != 0) return false;
    return st.f_type == CGROUP2_SUPER_MAGIC;
}

}  // namespace

std::string default_spec_json(const SpecTemplateOptions& o) {
    json::Writer w(true);
    w.begin_object();
    w.key("ociVersion").value(kSpecVersion);
    write_process(w);
    w.key("root").begin_object().key("path").value("rootfs").key("readonly").value(true);
    w.end_object();
    w.key("hostname").value("forkbox");
    write_mounts(w, o.rootless);
    write_linux(w, o);
    w.end_object();
    return tabs_for_indent(w.str()) + "\n";
}

std::string default_spec_json(bool rootless) {
    SpecTemplateOptions o;
    o.rootless = rootless;
    o.cgroup_namespace = cgroup2_unified();
    o.host_uid = static_cast<uint32_t>(geteuid());
    o.host_gid = static_cast<uint32_t>(getegid());
    return default_spec_json(o);
}

}  // namespace forkbox::oci
