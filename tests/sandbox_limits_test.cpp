#include "libforkbox/sandbox/limits.hpp"

#include <gtest/gtest.h>

using namespace forkbox;
using namespace forkbox::sandbox;

namespace {

CgroupLayout v2_with(const char* controllers) {
    return CgroupLayout{CgroupMode::V2, {CgroupHierarchy{"/sys/fs/cgroup", true, controllers}}};
}

}  // namespace

TEST(SandboxLimitMechanisms, EveryControllerThere) {
    LimitMechanisms m = limit_mechanisms(v2_with("cpu,io,memory,pids"));
    EXPECT_TRUE(m.cgroups && m.memory && m.pids && m.cpu);
    Enforcement e = m.enforcement(true);
    EXPECT_EQ(e.memory, "cgroup");
    EXPECT_EQ(e.pids, "cgroup");
    EXPECT_EQ(e.cpu, "cgroup");
    EXPECT_EQ(m.enforcement(false).cpu, "none");  // not asked for: not enforced
}

TEST(SandboxLimitMechanisms, AV1HostWithoutAMemoryHierarchy) {
    CgroupLayout v1{CgroupMode::V1, {CgroupHierarchy{"/sys/fs/cgroup/pids", false, "pids"},
                                     CgroupHierarchy{"/sys/fs/cgroup/cpu,cpuacct", false, "cpu,cpuacct"}}};
    LimitMechanisms m = limit_mechanisms(v1);
    EXPECT_TRUE(m.cgroups);
    EXPECT_FALSE(m.memory);
    EXPECT_TRUE(m.pids && m.cpu);
    EXPECT_EQ(m.enforcement(true).memory, "rlimit");
}

TEST(SandboxLimitMechanisms, AV2HierarchyWithoutTheControllersStillPlacesSandboxes) {
    // A hybrid host's cgroup2, or a delegation without them: cgroups for the kill and the
    // freezer, rlimits for the limits.
    LimitMechanisms m = limit_mechanisms(v2_with("hugetlb"));
    EXPECT_TRUE(m.cgroups);
    Enforcement e = m.enforcement(true);
    EXPECT_EQ(e.memory, "rlimit");
    EXPECT_EQ(e.pids, "rlimit");
    EXPECT_EQ(e.cpu, "none");
}

TEST(SandboxLimitMechanisms, NoHierarchyNoCgroups) {
    LimitMechanisms m = limit_mechanisms(CgroupLayout{});
    EXPECT_FALSE(m.cgroups || m.memory || m.pids || m.cpu);
}

TEST(SandboxCgroupLimits, OnlyWhatTheControllersHold) {
    LimitMechanisms all = limit_mechanisms(v2_with("cpu,memory,pids"));
    oci::Resources r = cgroup_limits(all, 64, 32, 0.5);
    ASSERT_TRUE(r.memory && r.memory->limit);
    EXPECT_EQ(*r.memory->limit, 64 << 20);
    EXPECT_EQ(r.pids_limit, 33);  // the sandbox's init counts too
    ASSERT_TRUE(r.cpu);
    EXPECT_EQ(r.cpu->quota, 50000);
    EXPECT_EQ(r.cpu->period, 100000u);

    oci::Resources pids_only = cgroup_limits(limit_mechanisms(v2_with("pids")), 64, 32, 0.5);
    EXPECT_FALSE(pids_only.memory);
    EXPECT_FALSE(pids_only.cpu);
    EXPECT_EQ(pids_only.pids_limit, 33);

    oci::Resources none_asked = cgroup_limits(all, 0, 0, 0);
    EXPECT_FALSE(none_asked.memory || none_asked.pids_limit || none_asked.cpu);
}

TEST(SandboxRlimits, StandInForTheMissingControllers) {
    Rlimits both = rlimits_for(limit_mechanisms(CgroupLayout{}), 64, 32);
    EXPECT_EQ(both.address, 64u << 20);
    EXPECT_EQ(both.nproc, 33u);
    Rlimits memory_only = rlimits_for(limit_mechanisms(v2_with("pids")), 64, 32);
    EXPECT_EQ(memory_only.address, 64u << 20);
    EXPECT_EQ(memory_only.nproc, 0u);
    Rlimits none = rlimits_for(limit_mechanisms(v2_with("memory,pids")), 64, 32);
    EXPECT_EQ(none.address, 0u);
    EXPECT_EQ(none.nproc, 0u);
}

// The host root's processes are never counted against RLIMIT_NPROC: a sandbox whose root is
// that root (a daemon in a container without CAP_SYS_ADMIN) has no process limit to claim.
TEST(SandboxRlimits, NoProcessLimitIsClaimedWhereRlimitNprocDoesNotHold) {
    LimitMechanisms m = limit_mechanisms(CgroupLayout{});
    m.nproc_rlimit_holds = false;
    EXPECT_EQ(m.enforcement(true).pids, "none");
    EXPECT_EQ(m.enforcement(true).memory, "rlimit");
    EXPECT_EQ(rlimits_for(m, 64, 32).nproc, 0u);
    LimitMechanisms with_pids = limit_mechanisms(v2_with("pids"));
    with_pids.nproc_rlimit_holds = false;
    EXPECT_EQ(with_pids.enforcement(true).pids, "cgroup");  // the controller holds regardless
}
