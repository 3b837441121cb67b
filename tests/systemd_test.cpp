// The systemd cgroup driver's pure half: cgroupsPath, slices, and the unit properties.
#include "libforkbox/cgroup/systemd.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace forkbox;
using namespace forkbox::systemd;
using dbus::Value;

namespace {

const Property* find(const Properties& p, const std::string& name) {
    for (const auto& prop : p)
        if (prop.name == name) return &prop;
    return nullptr;
}

std::vector<std::string> names(const Properties& p) {
    std::vector<std::string> out;
    for (const auto& prop : p) out.push_back(prop.name);
    return out;
}

constexpr uint64_t kInfinity = std::numeric_limits<uint64_t>::max();

}  // namespace

TEST(SystemdCgroupsPath, EmptyIsForkboxPrefixAndTheIdInSystemSlice) {
    auto u = parse_cgroups_path("", "c1", false);
    ASSERT_TRUE(u) << u.error().what();
    EXPECT_EQ(*u, (Unit{"system.slice", "forkbox-c1.scope", "/system.slice/forkbox-c1.scope"}));
    auto rootless = parse_cgroups_path("", "c1", true);
    ASSERT_TRUE(rootless);
    EXPECT_EQ(rootless->slice, "user.slice");
}

TEST(SystemdCgroupsPath, WhatManagersSend) {
    auto podman = parse_cgroups_path("machine.slice:libpod:abc", "abc", false);
    ASSERT_TRUE(podman);
    EXPECT_EQ(*podman, (Unit{"machine.slice", "libpod-abc.scope", "/machine.slice/libpod-abc.scope"}));
    auto cri = parse_cgroups_path("kubepods-besteffort-pod12.slice:cri-containerd:abc", "abc", false);
    ASSERT_TRUE(cri);
    EXPECT_EQ(cri->unit, "cri-containerd-abc.scope");
    EXPECT_EQ(cri->path,
              "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/cri-containerd-abc.scope");
    auto empty_slice = parse_cgroups_path(":fbx:t1", "t1", false);
    ASSERT_TRUE(empty_slice);
    EXPECT_EQ(empty_slice->path, "/system.slice/fbx-t1.scope");
    // A name that is a slice is the unit itself.
    auto slice = parse_cgroups_path("system.slice:x:app.slice", "id", false);
    ASSERT_TRUE(slice);
    EXPECT_EQ(slice->unit, "app.slice");
    auto root = parse_cgroups_path("-.slice:fbx:t1", "t1", false);
    ASSERT_TRUE(root);
    EXPECT_EQ(root->path, "/fbx-t1.scope");
}

TEST(SystemdCgroupsPath, OtherFormsAreRuncsError) {
    for (const char* bad : {"/foo/bar", "system.slice:fbx", "a:b:c:d", "foo"}) {
        auto u = parse_cgroups_path(bad, "id", false);
        ASSERT_FALSE(u) << bad;
        EXPECT_EQ(u.error().what(), std::string("expected cgroupsPath to be of format \"slice:prefix:name\" for systemd "
                                                "cgroups, got \"") + bad + "\" instead");
    }
    auto bad_slice = parse_cgroups_path("machine:libpod:x", "x", false);
    ASSERT_FALSE(bad_slice);
    EXPECT_EQ(bad_slice.error().what(), "invalid slice name: machine");
}

TEST(SystemdSlice, ExpandsEachDashIntoAParent) {
    EXPECT_EQ(*expand_slice("a-b.slice"), "/a.slice/a-b.slice");
    EXPECT_EQ(*expand_slice("test-a-b.slice"), "/test.slice/test-a.slice/test-a-b.slice");
    EXPECT_EQ(*expand_slice("system.slice"), "/system.slice");
    EXPECT_EQ(*expand_slice("-.slice"), "/");
    for (const char* bad : {".slice", "a--b.slice", "-a.slice", "a-.slice", "a/b.slice", "a.scope", ""}) {
        auto r = expand_slice(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_EQ(r.error().what(), std::string("invalid slice name: ") + bad);
    }
}

TEST(SystemdProperties, AScopesOwnPropertiesOnV1AndV2) {
    Unit u{"system.slice", "fbx-t1.scope", "/system.slice/fbx-t1.scope"};
    Properties v1 = unit_properties(u, 42, false, "forkbox container t1");
    EXPECT_EQ(names(v1), (std::vector<std::string>{"Description", "Slice", "PIDs", "Delegate", "MemoryAccounting",
                                                   "CPUAccounting", "BlockIOAccounting", "TasksAccounting",
                                                   "DefaultDependencies"}));
    EXPECT_EQ(find(v1, "Slice")->value, Value::string("system.slice"));
    EXPECT_EQ(find(v1, "PIDs")->value, Value::uint32s({42}));
    EXPECT_EQ(find(v1, "Delegate")->value, Value::boolean(true));
    EXPECT_EQ(find(v1, "DefaultDependencies")->value, Value::boolean(false));
    Properties v2 = unit_properties(u, 42, true, "d");
    EXPECT_TRUE(find(v2, "IOAccounting"));
    EXPECT_FALSE(find(v2, "BlockIOAccounting"));
    // A slice is wanted by its parent, holds no delegation.
    Properties slice = unit_properties(Unit{"system.slice", "app.slice", "/system.slice/app.slice"}, 0, false, "d");
    EXPECT_EQ(find(slice, "Wants")->value, Value::strings({"system.slice"}));
    EXPECT_FALSE(find(slice, "Slice"));
    EXPECT_FALSE(find(slice, "Delegate"));
    EXPECT_FALSE(find(slice, "PIDs"));
}

TEST(SystemdProperties, V1ResourceNames) {
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->limit = 64 << 20;
    r.cpu = oci::CpuResources{};
    r.cpu->shares = 512;
    r.cpu->quota = 50000;
    r.cpu->period = 100000;
    r.block_io = oci::BlockIoResources{};
    r.block_io->weight = 300;
    r.pids_limit = 33;
    auto p = resource_properties(r, false, 252);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(names(*p), (std::vector<std::string>{"MemoryLimit", "CPUShares", "CPUQuotaPeriodUSec",
                                                   "CPUQuotaPerSecUSec", "BlockIOWeight", "TasksMax"}));
    EXPECT_EQ(find(*p, "MemoryLimit")->value, Value::uint64(64 << 20));
    EXPECT_EQ(find(*p, "CPUShares")->value, Value::uint64(512));
    EXPECT_EQ(find(*p, "CPUQuotaPerSecUSec")->value, Value::uint64(500000));
    EXPECT_EQ(find(*p, "BlockIOWeight")->value, Value::uint64(300));
    EXPECT_EQ(find(*p, "TasksMax")->value, Value::uint64(33));
}

TEST(SystemdProperties, V2ResourceNames) {
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->limit = 100 << 20;
    r.memory->reservation = 50 << 20;
    r.memory->swap = 150 << 20;
    r.cpu = oci::CpuResources{};
    r.cpu->shares = 1024;
    r.cpu->cpus = "0-1";
    r.cpu->mems = "0";
    r.pids_limit = -1;
    auto p = resource_properties(r, true, 252);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(names(*p), (std::vector<std::string>{"MemoryMax", "MemoryLow", "MemorySwapMax", "CPUWeight",
                                                   "TasksMax", "AllowedCPUs", "AllowedMemoryNodes"}));
    EXPECT_EQ(find(*p, "MemorySwapMax")->value, Value::uint64(50 << 20));
    EXPECT_EQ(find(*p, "CPUWeight")->value, Value::uint64(39));  // runc's conversion of 1024 shares
    EXPECT_EQ(find(*p, "TasksMax")->value, Value::uint64(kInfinity));
    EXPECT_EQ(find(*p, "AllowedCPUs")->value, Value::bytes({0x03}));
    EXPECT_EQ(find(*p, "AllowedMemoryNodes")->value, Value::bytes({0x01}));
}

TEST(SystemdProperties, VersionGatesAndQuotaRounding) {
    oci::Resources r;
    r.cpu = oci::CpuResources{};
    r.cpu->quota = 12345;  // 12.345% of a CPU: rounded up to 13%
    r.cpu->period = 100000;
    r.cpu->cpus = "0";
    EXPECT_TRUE(needs_version(r));
    auto old = resource_properties(r, true, 241);
    ASSERT_TRUE(old);
    EXPECT_EQ(names(*old), (std::vector<std::string>{"CPUQuotaPerSecUSec"}));
    EXPECT_EQ(find(*old, "CPUQuotaPerSecUSec")->value, Value::uint64(130000));
    auto newer = resource_properties(r, true, 244);
    ASSERT_TRUE(newer);
    EXPECT_EQ(names(*newer), (std::vector<std::string>{"CPUQuotaPeriodUSec", "CPUQuotaPerSecUSec", "AllowedCPUs"}));
    // A period alone (or an unlimited quota): an unlimited quota per second.
    oci::Resources unlimited;
    unlimited.cpu = oci::CpuResources{};
    unlimited.cpu->quota = -1;
    auto u = resource_properties(unlimited, false, 252);
    ASSERT_TRUE(u);
    EXPECT_EQ(find(*u, "CPUQuotaPerSecUSec")->value, Value::uint64(kInfinity));
    EXPECT_FALSE(needs_version(unlimited));
}

TEST(SystemdProperties, UnifiedKeysOnV2) {
    oci::Resources r;
    r.unified = {{"cpu.max", "20000 50000"}, {"memory.high", " max "}, {"pids.max", "9"}, {"io.weight", "100"}};
    auto p = resource_properties(r, true, 252);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(names(*p), (std::vector<std::string>{"CPUQuotaPeriodUSec", "CPUQuotaPerSecUSec", "MemoryHigh", "TasksMax"}));
    EXPECT_EQ(find(*p, "CPUQuotaPerSecUSec")->value, Value::uint64(400000));
    EXPECT_EQ(find(*p, "MemoryHigh")->value, Value::uint64(kInfinity));
    r.unified = {{"memory.max", "lots"}};
    EXPECT_FALSE(resource_properties(r, true, 252));
    // On v1 the unified map is cgroupfs's alone.
    auto v1 = resource_properties(r, false, 252);
    ASSERT_TRUE(v1);
    EXPECT_TRUE(v1->empty());
}

TEST(SystemdProperties, DeviceRulesAsDevicePolicyAndDeviceAllow) {
    // runc's spec: deny all, then the defaults (effective_device_rules adds them).
    std::vector<oci::DeviceRule> rules = {{false, "a", std::nullopt, std::nullopt, "rwm"},
                                          {true, "c", 1, 3, "rwm"},
                                          {true, "c", 136, std::nullopt, "rw"},
                                          {true, "b", std::nullopt, std::nullopt, "m"}};
    auto p = device_properties(rules);
    ASSERT_TRUE(p) << p.error().what();
    ASSERT_EQ(names(*p), (std::vector<std::string>{"DevicePolicy", "DeviceAllow", "DeviceAllow"}));
    EXPECT_EQ((*p)[0].value, Value::string("strict"));
    EXPECT_EQ((*p)[1].value, Value::array("(ss)", {}));
    auto entry = [](const char* path, const char* access) {
        return Value::structure({Value::string(path), Value::string(access)});
    };
    EXPECT_EQ((*p)[2].value, Value::array("(ss)", {entry("/dev/char/1:3", "rwm"), entry("char-136", "rw"),
                                                   entry("block-*", "m")}));
    // Allow-all is "auto" with an empty list.
    auto all = device_properties({{true, "a", std::nullopt, std::nullopt, "rwm"}});
    ASSERT_TRUE(all);
    EXPECT_EQ(names(*all), (std::vector<std::string>{"DevicePolicy", "DeviceAllow"}));
    EXPECT_EQ((*all)[0].value, Value::string("auto"));
    // A deny list systemd cannot say: strict and empty, cgroupfs does the rest.
    auto deny = device_properties({{true, "a", std::nullopt, std::nullopt, "rwm"}, {false, "c", 1, 3, "rwm"}});
    ASSERT_TRUE(deny);
    EXPECT_EQ((*deny)[0].value, Value::string("strict"));
    EXPECT_EQ((*deny)[1].value, Value::array("(ss)", {}));
    // "c *:3": no way to say it to systemd.
    auto star = device_properties({{false, "a", std::nullopt, std::nullopt, "rwm"}, {true, "c", std::nullopt, 3, "r"}});
    ASSERT_TRUE(star);
    EXPECT_EQ(star->back().value, Value::array("(ss)", {}));
}

TEST(SystemdProperties, AnnotationsInGVariantTextWithSecondsAsMicroseconds) {
    auto p = annotation_properties({{"org.systemd.property.TimeoutStopSec", "uint64 5"},
                                    {"org.systemd.property.CollectMode", "'inactive-or-failed'"},
                                    {"org.systemd.property.RuntimeMaxUSec", "uint64 7"},
                                    {"org.systemd.property.CPUSec", "3"},
                                    {"other.annotation", "x"}});
    ASSERT_TRUE(p) << p.error().what();
    ASSERT_EQ(p->size(), 4u);
    EXPECT_EQ(*find(*p, "CollectMode"), (Property{"CollectMode", Value::string("inactive-or-failed")}));
    // Only a lowercase letter before "Sec" marks seconds: CPUSec stays as it is.
    EXPECT_EQ(find(*p, "CPUSec")->value, Value::int32(3));
    EXPECT_EQ(find(*p, "RuntimeMaxUSec")->value, Value::uint64(7));
    EXPECT_EQ(find(*p, "TimeoutStopUSec")->value, Value::uint64(5000000));
    auto bad_name = annotation_properties({{"org.systemd.property.Foo-Bar", "1"}});
    ASSERT_FALSE(bad_name);
    EXPECT_EQ(bad_name.error().what(), "annotation org.systemd.property.Foo-Bar name incorrect: contains non-alphabetic character");
    EXPECT_FALSE(annotation_properties({{"org.systemd.property.Ab", "1"}}));
    auto bad_value = annotation_properties({{"org.systemd.property.TimeoutStopSec", "'five'"}});
    ASSERT_FALSE(bad_value);
    EXPECT_NE(bad_value.error().what().find("value parse error: not a number"), std::string::npos);
}

TEST(SystemdProperties, CpuListsAsLittleEndianByteMasks) {
    EXPECT_EQ(*cpu_list_to_mask("0"), (std::vector<uint8_t>{0x01}));
    EXPECT_EQ(*cpu_list_to_mask("1,3-5"), (std::vector<uint8_t>{0x3a}));
    EXPECT_EQ(*cpu_list_to_mask("8"), (std::vector<uint8_t>{0x00, 0x01}));
    EXPECT_EQ(*cpu_list_to_mask(" 0-1 , ,9"), (std::vector<uint8_t>{0x03, 0x02}));
    EXPECT_FALSE(cpu_list_to_mask(""));
    EXPECT_FALSE(cpu_list_to_mask("3-1"));
    EXPECT_FALSE(cpu_list_to_mask("a"));
}

TEST(SystemdVersion, FirstNumberOfTheVersionString) {
    EXPECT_EQ(parse_version("252.38-1~deb12u1"), 252);
    EXPECT_EQ(parse_version("\"v245.4-1.fc32\""), 245);
    EXPECT_EQ(parse_version("252"), 252);
    EXPECT_EQ(parse_version("unknown"), -1);
}

TEST(SystemdHierarchies, WhichSystemdDrivesAndWhereItsRootIs) {
    CgroupLayout layout = parse_cgroup_layout(
        "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        "33 31 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        "34 31 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "35 31 0:32 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
        "36 31 0:33 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"
        "37 31 0:34 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    std::vector<bool> managed;
    for (const auto& h : layout.hierarchies) managed.push_back(manages(h));
    EXPECT_EQ(managed, (std::vector<bool>{true, false, true, false, true, true}));
    EXPECT_EQ(manager_root(layout, "9:name=systemd:/init.scope\n0::/init.scope\n"), "");
    EXPECT_EQ(manager_root(layout, "9:name=systemd:/lxc/c1/init.scope\n"), "/lxc/c1");
    EXPECT_EQ(manager_root(layout, "9:name=systemd:/\n"), "");
    CgroupLayout v2 = parse_cgroup_layout("26 22 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    EXPECT_EQ(manager_root(v2, "0::/init.scope\n"), "");
    EXPECT_EQ(manager_root(v2, "0::/machine.slice/x.scope/init.scope\n"), "/machine.slice/x.scope");
}
