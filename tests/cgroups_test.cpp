#include "libforkbox/cgroup/cgroups.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace forkbox;

namespace {

// A cgroup v1 host (CentOS 7 / RHEL 7 style): systemd's named hierarchy with its
// release agent, co-mounted controllers, and the tmpfs that holds them.
constexpr const char* kV1Host =
    "18 62 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw\n"
    "24 18 0:20 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755\n"
    "25 24 0:21 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup "
    "rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd\n"
    "27 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup "
    "rw,cpu,cpuacct\n"
    "28 24 0:24 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:11 - cgroup "
    "cgroup rw,net_cls,net_prio\n"
    "29 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup "
    "rw,memory\n"
    "30 24 0:26 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup "
    "rw,cpuset,clone_children\n"
    "31 24 0:27 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,pids\n";

// A pure cgroup v2 host (Ubuntu 22.04, Fedora): one unified hierarchy at /sys/fs/cgroup.
constexpr const char* kV2Host =
    "22 27 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
    "27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";

// This machine's hybrid layout: v1 controllers each on their own, systemd's named
// hierarchy, and cgroup2 at /sys/fs/cgroup/unified (no optional fields).
constexpr const char* kHybridHost =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

std::vector<std::string> mountpoints(const CgroupLayout& l) {
    std::vector<std::string> out;
    for (const auto& h : l.hierarchies) out.push_back(h.mountpoint);
    return out;
}

std::vector<std::string> controllers(const CgroupLayout& l) {
    std::vector<std::string> out;
    for (const auto& h : l.hierarchies) out.push_back(h.controllers);
    return out;
}

}  // namespace

// ---- cgroup v1 ----

TEST(CgroupLayout, V1HostIsV1) { EXPECT_EQ(parse_cgroup_layout(kV1Host).mode, CgroupMode::V1); }

TEST(CgroupLayout, V1HostHasOneHierarchyPerCgroupMountInOrder) {
    EXPECT_EQ(mountpoints(parse_cgroup_layout(kV1Host)),
              (std::vector<std::string>{"/sys/fs/cgroup/systemd", "/sys/fs/cgroup/cpu,cpuacct",
                                        "/sys/fs/cgroup/net_cls,net_prio", "/sys/fs/cgroup/memory",
                                        "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/pids"}));
}

TEST(CgroupLayout, V1ControllersAreTheSuperOptionsWithoutMountNoise) {
    EXPECT_EQ(controllers(parse_cgroup_layout(kV1Host)),
              (std::vector<std::string>{"name=systemd", "cpu,cpuacct", "net_cls,net_prio", "memory", "cpuset",
                                        "pids"}));
}

TEST(CgroupLayout, V1HostHasNoUnifiedHierarchy) {
    auto l = parse_cgroup_layout(kV1Host);
    EXPECT_EQ(l.unified(), nullptr);
    for (const auto& h : l.hierarchies) EXPECT_FALSE(h.unified) << h.mountpoint;
}

TEST(CgroupLayout, V1SuperOptionsNoiseIsDropped) {
    auto l = parse_cgroup_layout(
        "40 31 0:40 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup "
        "ro,noprefix,cpuset,cpuset_v2_mode,favordynmods,xattr\n");
    ASSERT_EQ(l.hierarchies.size(), 1u);
    EXPECT_EQ(l.hierarchies[0].controllers, "cpuset");
}

TEST(CgroupLayout, V1HierarchyMountedTwiceIsListedOnce) {
    auto l = parse_cgroup_layout(
        "29 24 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "90 60 0:25 / /mnt/memory rw,relatime - cgroup cgroup rw,memory\n");
    EXPECT_EQ(mountpoints(l), (std::vector<std::string>{"/sys/fs/cgroup/memory"}));
}

// Inside a container without a cgroup namespace, /sys/fs/cgroup/* are binds of sub-cgroups.
TEST(CgroupLayout, BindOfASubCgroupIsNotAHierarchyRoot) {
    auto l = parse_cgroup_layout(
        "700 690 0:25 /docker/0123abcd /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:12 - "
        "cgroup cgroup rw,memory\n"
        "701 690 0:38 /docker/0123abcd /sys/fs/cgroup/unified ro,relatime - cgroup2 cgroup2 rw\n");
    EXPECT_EQ(l.mode, CgroupMode::None);
    EXPECT_TRUE(l.hierarchies.empty());
}

// A fixture's (or a nested container's) view: /sys bound over /sys hides the host's cgroup
// mounts, which mountinfo still lists; the cgroup2 mount on the new /sys is the layout.
TEST(CgroupLayout, MountsCoveredByAMountAboveThemAreNotHierarchies) {
    auto l = parse_cgroup_layout(
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "18 1 0:17 / /sys rw - sysfs sysfs rw\n"
        "24 18 0:20 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "29 24 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 24 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "90 18 0:17 / /sys ro - sysfs sysfs rw\n"
        "91 90 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    EXPECT_EQ(l.mode, CgroupMode::V2);
    EXPECT_EQ(mountpoints(l), (std::vector<std::string>{"/sys/fs/cgroup"}));
    // A mount on a hierarchy's own root hides it too (the later one is the hierarchy).
    l = parse_cgroup_layout(
        "24 18 0:20 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "29 24 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "30 29 0:26 / /sys/fs/cgroup/memory rw - tmpfs tmpfs rw\n"
        "31 24 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n");
    EXPECT_EQ(mountpoints(l), (std::vector<std::string>{"/sys/fs/cgroup/pids"}));
}

// ---- cgroup v2 ----

TEST(CgroupLayout, PureV2HostIsV2) { EXPECT_EQ(parse_cgroup_layout(kV2Host).mode, CgroupMode::V2); }

TEST(CgroupLayout, PureV2HostHasOnlyTheUnifiedHierarchy) {
    auto l = parse_cgroup_layout(kV2Host);
    ASSERT_EQ(l.hierarchies.size(), 1u);
    EXPECT_TRUE(l.hierarchies[0].unified);
    EXPECT_EQ(l.hierarchies[0].mountpoint, "/sys/fs/cgroup");
    EXPECT_EQ(l.hierarchies[0].controllers, "");
}

TEST(CgroupLayout, PureV2HostUnifiedPointsAtSysFsCgroup) {
    auto l = parse_cgroup_layout(kV2Host);
    ASSERT_NE(l.unified(), nullptr);
    EXPECT_EQ(l.unified()->mountpoint, "/sys/fs/cgroup");
}

TEST(CgroupLayout, SecondCgroup2MountIsIgnored) {
    auto l = parse_cgroup_layout(
        "26 22 0:23 / /sys/fs/cgroup rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
        "80 70 0:23 / /run/extra/cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n");
    EXPECT_EQ(mountpoints(l), (std::vector<std::string>{"/sys/fs/cgroup"}));
}

// ---- hybrid ----

TEST(CgroupLayout, HybridHostIsHybrid) {
    EXPECT_EQ(parse_cgroup_layout(kHybridHost).mode, CgroupMode::Hybrid);
}

TEST(CgroupLayout, HybridHostListsEveryV1ControllerAndTheUnifiedHierarchy) {
    auto l = parse_cgroup_layout(kHybridHost);
    EXPECT_EQ(controllers(l), (std::vector<std::string>{"cpu", "cpuacct", "cpuset", "memory", "devices",
                                                        "freezer", "blkio", "pids", "name=systemd", ""}));
}

TEST(CgroupLayout, HybridHostUnifiedIsSysFsCgroupUnified) {
    auto l = parse_cgroup_layout(kHybridHost);
    ASSERT_NE(l.unified(), nullptr);
    EXPECT_EQ(l.unified()->mountpoint, "/sys/fs/cgroup/unified");
}

TEST(CgroupLayout, TmpfsHoldingTheHierarchiesIsNotOne) {
    for (const auto& m : mountpoints(parse_cgroup_layout(kHybridHost))) EXPECT_NE(m, "/sys/fs/cgroup");
}

// ---- degenerate input ----

TEST(CgroupLayout, NoCgroupMountsIsNone) {
    auto l = parse_cgroup_layout("27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n");
    EXPECT_EQ(l.mode, CgroupMode::None);
    EXPECT_TRUE(l.hierarchies.empty());
    EXPECT_EQ(l.unified(), nullptr);
}

TEST(CgroupLayout, EmptyTextIsNone) { EXPECT_EQ(parse_cgroup_layout("").mode, CgroupMode::None); }

TEST(CgroupLayout, LastLineWithoutNewlineIsRead) {
    auto l = parse_cgroup_layout("41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw");
    EXPECT_EQ(l.mode, CgroupMode::V2);
}

TEST(CgroupLayout, MalformedLinesAreSkipped) {
    auto l = parse_cgroup_layout(
        "garbage\n"
        "1 2 - cgroup\n"
        "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n");
    EXPECT_EQ(mountpoints(l), (std::vector<std::string>{"/sys/fs/cgroup"}));
}

// ---- cgroup_dirs_of_process: the cgroups a process is in, per hierarchy ----

TEST(ProcessCgroups, EachHierarchyGetsItsLineOfProcCgroup) {
    auto layout = parse_cgroup_layout(kHybridHost);
    auto dirs = cgroup_dirs_of_process(layout,
                                       "9:name=systemd:/user.slice\n4:memory:/jobs/42\n1:cpu:/\n0::/jobs/42\n");
    ASSERT_EQ(dirs.size(), layout.hierarchies.size());
    for (size_t i = 0; i < dirs.size(); ++i) {
        const auto& mp = layout.hierarchies[i].mountpoint;
        if (mp == "/sys/fs/cgroup/memory") EXPECT_EQ(dirs[i], "/sys/fs/cgroup/memory/jobs/42");
        else if (mp == "/sys/fs/cgroup/systemd") EXPECT_EQ(dirs[i], "/sys/fs/cgroup/systemd/user.slice");
        else if (mp == "/sys/fs/cgroup/cpu") EXPECT_EQ(dirs[i], "/sys/fs/cgroup/cpu");
        else if (mp == "/sys/fs/cgroup/unified") EXPECT_EQ(dirs[i], "/sys/fs/cgroup/unified/jobs/42");
        else EXPECT_EQ(dirs[i], "") << mp;
    }
}

TEST(ProcessCgroups, CombinedControllersMatchInAnyOrder) {
    auto layout = parse_cgroup_layout("32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
    EXPECT_EQ(cgroup_dirs_of_process(layout, "2:cpuacct,cpu:/a\n"), std::vector<std::string>{"/sys/fs/cgroup/cpu,cpuacct/a"});
}

// ---- what delete removes ----

TEST(RemovableCgroups, KeepTheDefaultParentInEveryHierarchyOfAHybridHost) {
    auto l = parse_cgroup_layout(kHybridHost);
    std::vector<std::string> created = {
        "/sys/fs/cgroup/cpuset/forkbox",  "/sys/fs/cgroup/cpuset/forkbox/web-1",
        "/sys/fs/cgroup/unified/forkbox", "/sys/fs/cgroup/unified/forkbox/web-1",
    };
    EXPECT_EQ(removable_cgroups(l, created),
              (std::vector<std::string>{"/sys/fs/cgroup/cpuset/forkbox/web-1", "/sys/fs/cgroup/unified/forkbox/web-1"}));
}

TEST(RemovableCgroups, KeepTheDefaultParentOfAPureV2Host) {
    auto l = parse_cgroup_layout(kV2Host);
    EXPECT_EQ(removable_cgroups(l, {"/sys/fs/cgroup/forkbox", "/sys/fs/cgroup/forkbox/a", "/sys/fs/cgroup/forkbox/a/b"}),
              (std::vector<std::string>{"/sys/fs/cgroup/forkbox/a", "/sys/fs/cgroup/forkbox/a/b"}));
}

TEST(RemovableCgroups, RemoveEveryParentOfAPathTheConfigGave) {
    auto l = parse_cgroup_layout(kHybridHost);
    std::vector<std::string> created = {"/sys/fs/cgroup/pids/pod", "/sys/fs/cgroup/pids/pod/forkbox",
                                        "/sys/fs/cgroup/pids/pod/forkbox/c1", "/sys/fs/cgroup/pids/forkboxes"};
    EXPECT_EQ(removable_cgroups(l, created), created);
}

TEST(V2ControllerList, SpacesBecomeCommasAndTheNewlineGoes) {
    EXPECT_EQ(v2_controller_list("cpuset cpu io memory pids\n"), "cpuset,cpu,io,memory,pids");
    EXPECT_EQ(v2_controller_list("hugetlb"), "hugetlb");
    EXPECT_EQ(v2_controller_list("\n"), "");
    EXPECT_EQ(v2_controller_list(""), "");
}

TEST(LayoutOffers, AV1HierarchyMountedWithTheController) {
    CgroupLayout v1 = parse_cgroup_layout(kV1Host);
    EXPECT_TRUE(layout_offers(v1, "memory"));
    EXPECT_TRUE(layout_offers(v1, "cpuacct"));  // co-mounted with cpu
    EXPECT_FALSE(layout_offers(v1, "freezer"));
    EXPECT_FALSE(layout_offers(v1, "systemd"));  // its hierarchy is "name=systemd"
}

TEST(LayoutOffers, TheV2HierarchyWhenItListsTheController) {
    CgroupLayout v2 = parse_cgroup_layout(kV2Host);
    EXPECT_FALSE(layout_offers(v2, "memory"));  // nothing loaded: offers nothing
    v2.hierarchies[0].controllers = v2_controller_list("memory pids\n");
    EXPECT_TRUE(layout_offers(v2, "memory"));
    EXPECT_TRUE(layout_offers(v2, "pids"));
    EXPECT_FALSE(layout_offers(v2, "cpu"));
    EXPECT_FALSE(layout_offers(v2, "mem"));
}

namespace {

// The container's dirs on a layout: MOUNTPOINT/c1 in every hierarchy.
std::vector<std::string> container_dirs(const CgroupLayout& l) {
    std::vector<std::string> out;
    for (const auto& h : l.hierarchies) out.push_back(h.mountpoint + "/c1");
    return out;
}

}  // namespace

TEST(ExecCgroupDirs, NoValueIsTheContainersOwnCgroups) {
    auto l = parse_cgroup_layout(kHybridHost);
    auto dirs = exec_cgroup_dirs(l, container_dirs(l), {});
    ASSERT_TRUE(dirs);
    EXPECT_EQ(*dirs, container_dirs(l));
}

TEST(ExecCgroupDirs, APathWithoutControllersAppliesToEveryHierarchy) {
    auto l = parse_cgroup_layout(kV2Host);
    auto dirs = exec_cgroup_dirs(l, container_dirs(l), {"sub/leaf"});
    ASSERT_TRUE(dirs);
    EXPECT_EQ(*dirs, std::vector<std::string>{"/sys/fs/cgroup/c1/sub/leaf"});
}

TEST(ExecCgroupDirs, EachControllerGetsItsPathTheOthersTheContainersOwn) {
    auto l = parse_cgroup_layout(kV1Host);
    auto dirs = exec_cgroup_dirs(l, container_dirs(l), {"memory,pids:mem", "systemd:/sd", "cpu:c/d"});
    ASSERT_TRUE(dirs);
    EXPECT_EQ(*dirs, (std::vector<std::string>{"/sys/fs/cgroup/systemd/c1/sd", "/sys/fs/cgroup/cpu,cpuacct/c1/c/d",
                                               "/sys/fs/cgroup/net_cls,net_prio/c1",
                                               "/sys/fs/cgroup/memory/c1/mem", "/sys/fs/cgroup/cpuset/c1",
                                               "/sys/fs/cgroup/pids/c1/mem"}));
}

TEST(ExecCgroupDirs, APathWithoutControllersMustBeTheOnlyValue) {
    auto l = parse_cgroup_layout(kV1Host);
    EXPECT_FALSE(exec_cgroup_dirs(l, container_dirs(l), {"all", "memory:mem"}));
    auto dirs = exec_cgroup_dirs(l, container_dirs(l), {"/all"});
    ASSERT_TRUE(dirs);
    for (const auto& d : *dirs) EXPECT_TRUE(d.ends_with("/c1/all")) << d;
}

TEST(ExecCgroupDirs, OnlyTheNamedControllersMoveWithoutAPathForAll) {
    auto l = parse_cgroup_layout(kHybridHost);
    auto dirs = exec_cgroup_dirs(l, container_dirs(l), {"cpu:x"});
    ASSERT_TRUE(dirs);
    auto want = container_dirs(l);
    want[0] += "/x";
    EXPECT_EQ(*dirs, want);
}

TEST(ExecCgroupDirs, AHierarchyWithoutAContainerDirStaysWithout) {
    auto l = parse_cgroup_layout(kHybridHost);
    auto mine = container_dirs(l);
    mine[1].clear();  // rootless: no cgroup in cpuacct
    auto dirs = exec_cgroup_dirs(l, mine, {"sub"});
    ASSERT_TRUE(dirs);
    EXPECT_EQ((*dirs)[1], "");
    EXPECT_EQ((*dirs)[0], "/sys/fs/cgroup/cpu/c1/sub");
}

TEST(ExecCgroupDirs, PathsThatLeaveTheContainersCgroupAreRefused) {
    auto l = parse_cgroup_layout(kV2Host);
    for (std::string bad : {"/", "..", "a/../../b", "", "memory:"}) {
        auto dirs = exec_cgroup_dirs(l, container_dirs(l), {bad});
        ASSERT_FALSE(dirs) << bad;
        EXPECT_EQ(dirs.error().errnum(), EINVAL);
    }
}

TEST(ExecCgroupDirs, BadControllerListsAreRefused) {
    auto v1 = parse_cgroup_layout(kV1Host);
    EXPECT_FALSE(exec_cgroup_dirs(v1, container_dirs(v1), {"nosuch:x"}));
    EXPECT_FALSE(exec_cgroup_dirs(v1, container_dirs(v1), {"memory:x", "memory:y"}));
    EXPECT_FALSE(exec_cgroup_dirs(v1, container_dirs(v1), {"x", "y"}));
    EXPECT_FALSE(exec_cgroup_dirs(v1, container_dirs(v1), {"memory,:x"}));
    auto v2 = parse_cgroup_layout(kV2Host);
    auto dirs = exec_cgroup_dirs(v2, container_dirs(v2), {"memory:x"});
    ASSERT_FALSE(dirs);
    EXPECT_NE(dirs.error().what().find("cgroup v2"), std::string::npos);
}
