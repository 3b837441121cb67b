#include "oci/spec_template.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "libforkbox/base/json.hpp"
#include "libforkbox/features.hpp"
#include "oci/linux_names.hpp"
#include "oci/parse.hpp"
#include "oci/validate.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

Spec parse_template(const SpecTemplateOptions& o) {
    auto s = parse_config(default_spec_json(o));
    EXPECT_TRUE(s) << (s ? "" : s.error().context());
    return s ? std::move(*s) : Spec{};
}

SpecTemplateOptions rootless_options() {
    SpecTemplateOptions o;
    o.rootless = true;
    o.host_uid = 1000;
    o.host_gid = 1001;
    return o;
}

std::vector<std::string> namespace_types(const Spec& s) {
    std::vector<std::string> v;
    for (const auto& ns : s.linux->namespaces) v.push_back(ns.type);
    return v;
}

const Mount* find_mount(const Spec& s, const std::string& dest) {
    for (const auto& m : s.mounts)
        if (m.destination == dest) return &m;
    return nullptr;
}

}  // namespace

TEST(SpecTemplate, RoundTripsThroughParseAndValidate) {
    Spec s = parse_template({});
    auto v = validate(s);
    EXPECT_TRUE(v) << v.error().context();
}

TEST(SpecTemplate, RootlessRoundTripsThroughParseAndValidate) {
    Spec s = parse_template(rootless_options());
    auto v = validate(s);
    EXPECT_TRUE(v) << v.error().context();
}

TEST(SpecTemplate, HostVariantRoundTrips) {
    for (bool rootless : {false, true}) {
        auto s = parse_config(default_spec_json(rootless));
        ASSERT_TRUE(s) << s.error().context();
        EXPECT_TRUE(validate(*s));
    }
}

TEST(SpecTemplate, IndentsWithTabsLikeRunc) {
    std::string j = default_spec_json(SpecTemplateOptions{});
    EXPECT_TRUE(j.starts_with("{\n\t\"ociVersion\": \"1.3.0\",\n\t\"process\": {\n\t\t\"terminal\": true"))
        << j.substr(0, 80);
    EXPECT_EQ(j.find("\n "), std::string::npos);
    EXPECT_TRUE(j.ends_with("}\n"));
}

TEST(SpecTemplate, ProcessMatchesRunc) {
    Spec s = parse_template({});
    const Process& p = *s.process;
    EXPECT_TRUE(p.terminal);
    EXPECT_EQ(p.args, std::vector<std::string>{"sh"});
    EXPECT_EQ(p.cwd, "/");
    EXPECT_TRUE(p.no_new_privileges);
    const std::vector<std::string> caps = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
    EXPECT_EQ(p.capabilities->bounding, caps);
    EXPECT_EQ(p.capabilities->effective, caps);
    EXPECT_EQ(p.capabilities->permitted, caps);
    ASSERT_EQ(p.rlimits.size(), 1u);
    EXPECT_EQ(p.rlimits[0].type, "RLIMIT_NOFILE");
    EXPECT_EQ(p.rlimits[0].hard, 1024u);
    EXPECT_EQ(p.rlimits[0].soft, 1024u);
}

TEST(SpecTemplate, RootIsReadonlyRootfs) {
    Spec s = parse_template({});
    EXPECT_EQ(s.root->path, "rootfs");
    EXPECT_TRUE(s.root->readonly);
}

TEST(SpecTemplate, DefaultMountsInRuncOrder) {
    Spec s = parse_template({});
    std::vector<std::string> dests;
    for (const auto& m : s.mounts) dests.push_back(m.destination);
    EXPECT_EQ(dests, (std::vector<std::string>{"/proc", "/dev", "/dev/pts", "/dev/shm",
                                                "/dev/mqueue", "/sys", "/sys/fs/cgroup"}));
    EXPECT_EQ(find_mount(s, "/sys")->type, "sysfs");
    const auto& pts = find_mount(s, "/dev/pts")->options;
    EXPECT_NE(std::find(pts.begin(), pts.end(), "gid=5"), pts.end());
}

TEST(SpecTemplate, NamespacesWithoutCgroupOnV1) {
    Spec s = parse_template({});
    EXPECT_EQ(namespace_types(s),
              (std::vector<std::string>{"pid", "network", "ipc", "uts", "mount"}));
}

TEST(SpecTemplate, CgroupNamespaceWhenAsked) {
    SpecTemplateOptions o;
    o.cgroup_namespace = true;
    Spec s = parse_template(o);
    EXPECT_EQ(namespace_types(s).back(), "cgroup");
}

TEST(SpecTemplate, DeniesAllDevicesWhenRootful) {
    Spec s = parse_template({});
    ASSERT_TRUE(s.linux->resources);
    ASSERT_EQ(s.linux->resources->devices.size(), 1u);
    EXPECT_FALSE(s.linux->resources->devices[0].allow);
    EXPECT_EQ(s.linux->resources->devices[0].access, "rwm");
}

TEST(SpecTemplate, MaskedAndReadonlyPaths) {
    Spec s = parse_template({});
    const auto& m = s.linux->masked_paths;
    EXPECT_NE(std::find(m.begin(), m.end(), "/proc/kcore"), m.end());
    EXPECT_NE(std::find(m.begin(), m.end(), "/sys/firmware"), m.end());
    EXPECT_EQ(s.linux->readonly_paths,
              (std::vector<std::string>{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                        "/proc/sysrq-trigger"}));
}

TEST(SpecTemplate, RootlessAddsUserNamespaceAndDropsNetwork) {
    Spec s = parse_template(rootless_options());
    EXPECT_EQ(namespace_types(s), (std::vector<std::string>{"pid", "ipc", "uts", "mount", "user"}));
}

TEST(SpecTemplate, RootlessMapsCallerToRoot) {
    Spec s = parse_template(rootless_options());
    ASSERT_EQ(s.linux->uid_mappings.size(), 1u);
    EXPECT_EQ(s.linux->uid_mappings[0].container_id, 0u);
    EXPECT_EQ(s.linux->uid_mappings[0].host_id, 1000u);
    EXPECT_EQ(s.linux->uid_mappings[0].size, 1u);
    ASSERT_EQ(s.linux->gid_mappings.size(), 1u);
    EXPECT_EQ(s.linux->gid_mappings[0].host_id, 1001u);
}

TEST(SpecTemplate, RootlessBindsSysAndDropsIdOptions) {
    Spec s = parse_template(rootless_options());
    const Mount* sys = find_mount(s, "/sys");
    EXPECT_EQ(sys->type, "none");
    EXPECT_EQ(sys->source, "/sys");
    EXPECT_EQ(sys->options,
              (std::vector<std::string>{"rbind", "nosuid", "noexec", "nodev", "ro", "rro", "rnosuid", "rnodev", "rnoexec"}));
    const auto& pts = find_mount(s, "/dev/pts")->options;
    EXPECT_EQ(std::find(pts.begin(), pts.end(), "gid=5"), pts.end());
}

TEST(SpecTemplate, RootlessHasNoCgroupResources) {
    Spec s = parse_template(rootless_options());
    EXPECT_FALSE(s.linux->resources);
}

// ---- features ----

TEST(Features, IsValidJsonWithVersionRange) {
    auto d = json::Document::parse(features_json());
    ASSERT_TRUE(d) << d.error().context();
    EXPECT_EQ(*d->root().get("ociVersionMin")->as_string(), "1.0.0");
    EXPECT_EQ(*d->root().get("ociVersionMax")->as_string(), "1.3.0");
    EXPECT_EQ(d->root().get("hooks")->size(), 6u);
    EXPECT_EQ(d->root().get("mountOptions")->size(), known_mount_options().size());
}

TEST(Features, LinuxSectionListsNamespacesAndCapabilities) {
    auto d = json::Document::parse(features_json());
    ASSERT_TRUE(d);
    auto linux = d->root().get("linux");
    ASSERT_TRUE(linux);
    EXPECT_EQ(linux->get("namespaces")->size(), 8u);
    EXPECT_EQ(linux->get("capabilities")->size(), all_capability_names().size());
    EXPECT_TRUE(*linux->get("cgroup")->get("v1")->as_bool());
    EXPECT_TRUE(*linux->get("cgroup")->get("v2")->as_bool());
    // The systemd driver (--systemd-cgroup) for the system manager; not a user's manager.
    EXPECT_TRUE(*linux->get("cgroup")->get("systemd")->as_bool());
    EXPECT_FALSE(*linux->get("cgroup")->get("systemdUser")->as_bool());
}

TEST(Features, ClaimsSeccompAndIdmapButNotTheSecurityModulesMissingHere) {
    auto d = json::Document::parse(features_json());
    ASSERT_TRUE(d);
    auto linux = d->root().get("linux");
    EXPECT_TRUE(*linux->get("seccomp")->get("enabled")->as_bool());
    EXPECT_FALSE(*linux->get("apparmor")->get("enabled")->as_bool());
    EXPECT_FALSE(*linux->get("selinux")->get("enabled")->as_bool());
    EXPECT_FALSE(*linux->get("intelRdt")->get("enabled")->as_bool());
    // Idmapped binds are built (integration/idmap.bats).
    EXPECT_TRUE(*linux->get("mountExtensions")->get("idmap")->get("enabled")->as_bool());
    EXPECT_TRUE(*linux->get("netDevices")->get("enabled")->as_bool());
    EXPECT_TRUE(linux->get("memoryPolicy")->get("modes"));
}

TEST(Features, AnnotatesTheVersion) {
    auto d = json::Document::parse(features_json());
    ASSERT_TRUE(d);
    EXPECT_EQ(*d->root().get("annotations")->get("run.forkbox.version")->as_string(),
              FORKBOX_VERSION);
}
