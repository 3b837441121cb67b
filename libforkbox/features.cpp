#include "libforkbox/features.hpp"

#include <string_view>
#include <vector>

#include "libforkbox/base/json.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/linux_names.hpp"

#ifndef FORKBOX_VERSION
#define FORKBOX_VERSION "unknown"
#endif

namespace forkbox {

namespace {

void string_array(json::Writer& w, std::string_view key, const std::vector<std::string_view>& v) {
    w.key(key).begin_array();
    for (auto s : v) w.value(s);
    w.end_array();
}

void enabled(json::Writer& w, std::string_view key, bool on) {
    w.key(key).begin_object().key("enabled").value(on).end_object();
}

}  // namespace

std::string features_json() {
    json::Writer w(true);
    w.begin_object();
    w.key("ociVersionMin").value("1.0.0");
    w.key("ociVersionMax").value("1.3.0");
    string_array(w, "hooks", oci::hook_names());
    string_array(w, "mountOptions", oci::known_mount_options());

    w.key("linux").begin_object();
    std::vector<std::string_view> namespaces;
    for (const auto& ns : oci::all_namespace_kinds()) namespaces.push_back(ns.spec_type);
    string_array(w, "namespaces", namespaces);
    string_array(w, "capabilities", oci::all_capability_names());
    w.key("cgroup").begin_object();
    w.key("v1").value(true).key("v2").value(true);
    w.key("systemd").value(true).key("systemdUser").value(false).key("rdma").value(false);
    w.end_object();
    // runtime-spec features-linux.md: knownFlags are the flags the runtime recognizes,
    // supportedFlags the subset that this libseccomp and the running kernel can apply.
    w.key("seccomp").begin_object();
    w.key("enabled").value(true);
    string_array(w, "actions", seccomp_supported_actions());
    string_array(w, "operators", oci::seccomp_operator_names());
    string_array(w, "archs", seccomp_supported_arches());
    string_array(w, "knownFlags", oci::seccomp_flag_names());
    string_array(w, "supportedFlags", seccomp_supported_flags());
    w.end_object();
    enabled(w, "apparmor", false);
    enabled(w, "selinux", false);
    enabled(w, "intelRdt", false);
    w.key("mountExtensions").begin_object();
    enabled(w, "idmap", true);  // binds only, as root of the initial user namespace
    w.end_object();
    w.key("memoryPolicy").begin_object();
    string_array(w, "modes", oci::memory_policy_mode_names());
    string_array(w, "flags", oci::memory_policy_flag_names());
    w.end_object();
    enabled(w, "netDevices", true);
    w.end_object();

    w.key("annotations").begin_object();
    w.key("run.forkbox.version").value(FORKBOX_VERSION);
    // Rootless: what an unprivileged caller gets (README "Rootless").
    w.key("run.forkbox.rootless").value("true");
    w.key("run.forkbox.rootless.idmaps").value("own-id,newuidmap");
    w.key("run.forkbox.rootless.cgroups").value("delegated-only");
    w.end_object();
    w.end_object();
    return w.take() + "\n";
}

}  // namespace forkbox
