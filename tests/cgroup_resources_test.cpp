#include "libforkbox/cgroup/resources.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace forkbox;

namespace {

// Hand-built layouts: index 0.. as the hierarchies appear.
CgroupLayout v1_layout() {
    CgroupLayout l;
    l.mode = CgroupMode::V1;
    for (const char* c : {"name=systemd", "cpu,cpuacct", "memory", "cpuset", "pids", "devices", "blkio",
                          "net_cls,net_prio", "hugetlb"})
        l.hierarchies.push_back({std::string("/sys/fs/cgroup/") + c, false, c});
    return l;
}

CgroupLayout v2_layout() {
    CgroupLayout l;
    l.mode = CgroupMode::V2;
    l.hierarchies.push_back({"/sys/fs/cgroup", true, "cpuset,cpu,io,memory,hugetlb,pids,rdma"});
    return l;
}

// This machine: v1 controllers, and a cgroup2 mount offering only hugetlb.
CgroupLayout hybrid_layout() {
    CgroupLayout l = parse_cgroup_layout(
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
        "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    for (auto& h : l.hierarchies)
        if (h.unified) h.controllers = "hugetlb";
    return l;
}

std::vector<CgroupWrite> plan(const oci::Resources& r, const CgroupLayout& l) {
    auto w = plan_cgroup_writes(r, l);
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().what());
    return w ? *w : std::vector<CgroupWrite>{};
}

std::string error_of(const oci::Resources& r, const CgroupLayout& l) {
    auto w = plan_cgroup_writes(r, l);
    EXPECT_FALSE(w.has_value());
    return w ? "" : w.error().what();
}

oci::DeviceRule rule(bool allow, std::string type, std::optional<int64_t> major, std::optional<int64_t> minor,
                     std::string access) {
    return oci::DeviceRule{allow, std::move(type), major, minor, std::move(access)};
}

oci::DeviceRule deny_all() { return rule(false, "", std::nullopt, std::nullopt, "rwm"); }

}  // namespace

// ---- conversions ----

TEST(CgroupConversions, SharesToWeightUsesRuncFormula) {
    EXPECT_EQ(cpu_shares_to_weight(2), 1u);
    EXPECT_EQ(cpu_shares_to_weight(1024), 39u);  // 1 + 1022*9999/262142
    EXPECT_EQ(cpu_shares_to_weight(262144), 10000u);
    EXPECT_EQ(cpu_shares_to_weight(1), 1u);  // clamped, no unsigned wrap
}

TEST(CgroupConversions, BlkioWeightToIoWeight) {
    EXPECT_EQ(blkio_weight_to_io_weight(10), 1u);
    EXPECT_EQ(blkio_weight_to_io_weight(500), 4950u);  // 1 + 490*9999/990
    EXPECT_EQ(blkio_weight_to_io_weight(1000), 10000u);
}

TEST(CgroupConversions, SwapOnV2IsSwapMinusLimit) {
    EXPECT_EQ(*memory_swap_to_v2(200, 100), 100);
    EXPECT_EQ(*memory_swap_to_v2(-1, 100), -1);
    EXPECT_EQ(*memory_swap_to_v2(0, -1), -1);  // unlimited memory, swap unset: both unlimited
    EXPECT_EQ(*memory_swap_to_v2(0, 100), 0);
    EXPECT_FALSE(memory_swap_to_v2(50, 100));   // below the limit
    EXPECT_FALSE(memory_swap_to_v2(200, 0));    // swap without a limit
}

// ---- update's size flags ----

TEST(MemorySize, BytesOrANumberWithAUnit) {
    EXPECT_EQ(*parse_memory_size("67108864"), 67108864);
    EXPECT_EQ(*parse_memory_size("64m"), 64 << 20);
    EXPECT_EQ(*parse_memory_size("64MB"), 64 << 20);
    EXPECT_EQ(*parse_memory_size("1G"), 1 << 30);
    EXPECT_EQ(*parse_memory_size("512k"), 512 << 10);
    EXPECT_EQ(*parse_memory_size("1.5g"), 3 << 29);
    EXPECT_EQ(*parse_memory_size("10b"), 10);
    EXPECT_EQ(*parse_memory_size("-1"), -1);
}

// Found by tests/fuzz/resources.cpp: "-1.5g" became -1610612736, and "1e30g" or "nan"
// reached a float-to-integer conversion that overflows (undefined behaviour).
TEST(MemorySize, NegativeNotANumberAndTooLargeAreErrors) {
    for (const char* bad : {"-1.5g", "-2", "-0.5", "1e30g", "1e19", "nan", "inf", "-inf", "9223372036854775808",
                            "8589934592g", "0x10", "", "m", ".", " 1", "1 ", "1x", "+1"})
        EXPECT_FALSE(parse_memory_size(bad)) << bad;
    EXPECT_EQ(*parse_memory_size("9223372036854775807"), INT64_MAX);
    EXPECT_EQ(parse_memory_size("1x").error().what(), "invalid size \"1x\"");
}

// ---- v1 ----

TEST(CgroupPlanV1, MemoryFilesGoToTheMemoryHierarchyLimitBeforeMemsw) {
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->limit = 1 << 20;
    r.memory->swap = 2 << 20;
    r.memory->reservation = 1 << 19;
    r.memory->swappiness = 10;
    r.memory->disable_oom_killer = true;
    EXPECT_EQ(plan(r, v1_layout()),
              (std::vector<CgroupWrite>{{2, "memory.limit_in_bytes", "1048576"},
                                        {2, "memory.soft_limit_in_bytes", "524288"},
                                        {2, "memory.memsw.limit_in_bytes", "2097152"},
                                        {2, "memory.swappiness", "10"},
                                        {2, "memory.oom_control", "1"}}));
}

TEST(CgroupPlanV1, KernelMemoryIsWrittenOnlyWhereTheFileExists) {
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->kernel = 4096;
    auto w = plan(r, v1_layout());
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].file, "memory.kmem.limit_in_bytes");
    EXPECT_TRUE(w[0].if_exists);
}

TEST(CgroupPlanV1, CpuPeriodBeforeQuotaAndCpusetToCpuset) {
    oci::Resources r;
    r.cpu = oci::CpuResources{};
    r.cpu->shares = 512;
    r.cpu->quota = 50000;
    r.cpu->period = 100000;
    r.cpu->cpus = "0";
    EXPECT_EQ(plan(r, v1_layout()),
              (std::vector<CgroupWrite>{{1, "cpu.shares", "512"},
                                        {1, "cpu.cfs_period_us", "100000"},
                                        {1, "cpu.cfs_quota_us", "50000"},
                                        {3, "cpuset.cpus", "0"}}));
}

TEST(CgroupPlanV1, PidsZeroOrNegativeIsMax) {
    oci::Resources r;
    r.pids_limit = -1;
    EXPECT_EQ(plan(r, v1_layout()), (std::vector<CgroupWrite>{{4, "pids.max", "max"}}));
    r.pids_limit = 42;
    EXPECT_EQ(plan(r, v1_layout()), (std::vector<CgroupWrite>{{4, "pids.max", "42"}}));
}

TEST(CgroupPlanV1, DeviceRulesKeepTheirOrderAfterTheInitialDeny) {
    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 10, 229, "rwm"), rule(true, "b", 8, 20, "rw"),
                 rule(false, "c", 10, 229, "w"), rule(true, "c", 4, std::nullopt, "r")};
    auto w = plan(r, v1_layout());
    ASSERT_GE(w.size(), 6u);
    EXPECT_EQ(std::vector<CgroupWrite>(w.begin(), w.begin() + 6),
              (std::vector<CgroupWrite>{{5, "devices.deny", "a"},
                                        {5, "devices.deny", "a *:* rwm"},
                                        {5, "devices.allow", "c 10:229 rwm"},
                                        {5, "devices.allow", "b 8:20 rw"},
                                        {5, "devices.deny", "c 10:229 w"},
                                        {5, "devices.allow", "c 4:* r"}}));
    // Then the defaults every container needs (/dev/null ...), after the configured rules.
    EXPECT_NE(std::find(w.begin() + 6, w.end(), CgroupWrite{5, "devices.allow", "c 1:3 rwm"}), w.end());
}

TEST(CgroupPlanV1, OnlyTheRulesAndTheDefaultDevicesAreAllowed) {
    oci::Resources r;
    r.devices = {deny_all()};
    auto w = plan(r, v1_layout());
    // runc's rule: linux.devices are made, not allowed; /dev/fuse (10:229) is not a default.
    EXPECT_EQ(std::find(w.begin(), w.end(), CgroupWrite{5, "devices.allow", "c 10:229 rwm"}), w.end());
    EXPECT_NE(std::find(w.begin(), w.end(), CgroupWrite{5, "devices.allow", "c 1:3 rwm"}), w.end());
}

TEST(CgroupPlanV1, BlkioAndNetwork) {
    oci::Resources r;
    r.block_io = oci::BlockIoResources{};
    r.block_io->weight = 500;
    r.block_io->throttle_read_bps = {{8, 0, 1000}};
    r.network = oci::NetworkResources{};
    r.network->class_id = 0x100001;
    r.network->priorities = {{"eth0", 5}};
    EXPECT_EQ(plan(r, v1_layout()),
              (std::vector<CgroupWrite>{{6, "blkio.weight", "500"},
                                        {6, "blkio.throttle.read_bps_device", "8:0 1000"},
                                        {7, "net_cls.classid", "1048577"},
                                        {7, "net_prio.ifpriomap", "eth0 5"}}));
}

TEST(CgroupPlanV1, HugepagesUseLimitInBytes) {
    oci::Resources r;
    r.hugepage_limits = {{"2MB", 4194304}};
    EXPECT_EQ(plan(r, v1_layout()), (std::vector<CgroupWrite>{{8, "hugetlb.2MB.limit_in_bytes", "4194304"}}));
}

// The page size becomes part of a file name: "2MB/../../../../etc/x" wrote outside the
// container's cgroup (create and update alike). Seen while writing the fuzz targets'
// property that every cgroup write names a plain file (tests/fuzz/cgroup_writes.hpp).
TEST(CgroupPlan, HugepageSizeMustBeASizeNotAPath) {
    for (const char* bad : {"2MB/../../../../etc/x", "../2MB", "2MB/", "2XB", "MB", "2mb", ".", "2MB "}) {
        oci::Resources r;
        r.hugepage_limits.push_back({bad, 1});
        EXPECT_FALSE(plan_cgroup_writes(r, v1_layout())) << bad;
        EXPECT_FALSE(plan_cgroup_writes(r, v2_layout())) << bad;
    }
    oci::Resources r;
    r.hugepage_limits = {{"64KB", 1}, {"2MB", 2}, {"1GB", 3}};
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "hugetlb.64KB.max", "1"},
                                                              {0, "hugetlb.2MB.max", "2"},
                                                              {0, "hugetlb.1GB.max", "3"}}));
}

// ---- v2 ----

TEST(CgroupPlanV2, MemoryMinusOneIsMaxAndSwapIsConverted) {
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->limit = 100;
    r.memory->swap = 300;
    r.memory->reservation = -1;
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "memory.max", "100"},
                                                              {0, "memory.low", "max"},
                                                              {0, "memory.swap.max", "200"}}));
    r.memory->limit = -1;
    r.memory->swap.reset();
    r.memory->reservation.reset();
    auto w = plan(r, v2_layout());
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0], (CgroupWrite{0, "memory.max", "max"}));
    EXPECT_EQ(w[1].file, "memory.swap.max");
    EXPECT_EQ(w[1].value, "max");
    EXPECT_TRUE(w[1].if_exists);  // no swap accounting: nothing to lift
}

TEST(CgroupPlanV2, CpuSharesBecomeWeightAndQuotaIsCpuMax) {
    oci::Resources r;
    r.cpu = oci::CpuResources{};
    r.cpu->shares = 1024;
    r.cpu->quota = 50000;
    r.cpu->period = 100000;
    r.cpu->burst = 1000;
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "cpu.weight", "39"},
                                                              {0, "cpu.max", "50000 100000"},
                                                              {0, "cpu.max.burst", "1000"}}));
    r.cpu->quota = -1;
    r.cpu->period.reset();
    r.cpu->shares.reset();
    r.cpu->burst.reset();
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "cpu.max", "max"}}));
}

TEST(CgroupPlanV2, BlkioWeightBecomesIoWeightAndThrottlesOneIoMaxLinePerDevice) {
    oci::Resources r;
    r.block_io = oci::BlockIoResources{};
    r.block_io->weight = 500;
    r.block_io->throttle_read_bps = {{8, 0, 1000}};
    r.block_io->throttle_write_bps = {{8, 0, 2000}};
    r.block_io->throttle_read_iops = {{8, 16, 10}};
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "io.weight", "4950"},
                                                              {0, "io.max", "8:0 rbps=1000 wbps=2000"},
                                                              {0, "io.max", "8:16 riops=10"}}));
}

TEST(CgroupPlanV2, HugepagesUseMaxAndUnifiedIsVerbatim) {
    oci::Resources r;
    r.hugepage_limits = {{"2MB", 4194304}};
    r.unified = {{"memory.high", "1000000"}};
    EXPECT_EQ(plan(r, v2_layout()), (std::vector<CgroupWrite>{{0, "hugetlb.2MB.max", "4194304"},
                                                              {0, "memory.high", "1000000"}}));
}

TEST(CgroupPlanV2, UnifiedKeyWithSlashIsRejected) {
    oci::Resources r;
    r.unified = {{"../memory.max", "1"}};
    EXPECT_NE(error_of(r, v2_layout()).find("must be a cgroup file name"), std::string::npos);
}

TEST(CgroupPlanV2, DeviceRulesBecomeAnEbpfProgramNotFileWrites) {
    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 1, 3, "rwm")};
    EXPECT_TRUE(plan(r, v2_layout()).empty());
    auto prog = plan_device_program(r, v2_layout());
    ASSERT_TRUE(prog);
    ASSERT_TRUE(prog->has_value());
    EXPECT_GT((*prog)->size(), 9u);
}

TEST(CgroupPlanV2, NoDeviceRulesNoProgram) {
    oci::Resources r;
    auto prog = plan_device_program(r, v2_layout());
    ASSERT_TRUE(prog);
    EXPECT_FALSE(prog->has_value());
}

TEST(CgroupPlanV2, DefaultDenyAllAloneStillGetsAProgram) {
    // As on v1, where it becomes "deny a" plus the default devices.
    oci::Resources r;
    r.devices = {deny_all()};
    auto prog = plan_device_program(r, v2_layout());
    ASSERT_TRUE(prog);
    EXPECT_TRUE(prog->has_value());
}

TEST(CgroupPlanV2, NetworkHasNoController) {
    oci::Resources r;
    r.network = oci::NetworkResources{};
    r.network->class_id = 1;
    EXPECT_EQ(error_of(r, v2_layout()), "linux.resources.network.classID: no net_cls controller on this host");
}

// ---- hybrid ----

TEST(CgroupPlanHybrid, V1ControllersWinAndHugetlbGoesToTheUnifiedHierarchy) {
    CgroupLayout l = hybrid_layout();
    ASSERT_EQ(l.mode, CgroupMode::Hybrid);
    oci::Resources r;
    r.memory = oci::MemoryResources{};
    r.memory->limit = 67108864;
    r.pids_limit = 42;
    r.hugepage_limits = {{"2MB", 2097152}};
    EXPECT_EQ(plan(r, l), (std::vector<CgroupWrite>{{2, "memory.limit_in_bytes", "67108864"},
                                                    {4, "pids.max", "42"},
                                                    {5, "hugetlb.2MB.max", "2097152"}}));
}

TEST(CgroupPlanHybrid, DeviceRulesGoToTheV1DevicesHierarchy) {
    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 1, 3, "rwm")};
    auto w = plan(r, hybrid_layout());
    ASSERT_GE(w.size(), 3u);
    EXPECT_EQ(w[0], (CgroupWrite{3, "devices.deny", "a"}));
    EXPECT_EQ(w[2], (CgroupWrite{3, "devices.allow", "c 1:3 rwm"}));
    auto prog = plan_device_program(r, hybrid_layout());
    ASSERT_TRUE(prog);
    EXPECT_FALSE(prog->has_value());
}

TEST(CgroupPlanHybrid, MissingControllerIsAnError) {
    oci::Resources r;
    r.block_io = oci::BlockIoResources{};
    r.block_io->weight = 500;
    EXPECT_EQ(error_of(r, hybrid_layout()), "linux.resources.blockIO: no blkio or io controller on this host");
    oci::Resources u;
    u.unified = {{"memory.high", "1"}};
    EXPECT_NE(error_of(u, hybrid_layout()).find("no memory controller"), std::string::npos);
}

TEST(CgroupPlan, NoCgroupsAtAllFailsForALimit) {
    oci::Resources r;
    r.hugepage_limits = {{"2MB", 2097152}};
    EXPECT_EQ(error_of(r, CgroupLayout{}), "linux.resources.hugepageLimits: no hugetlb controller on this host");
}

TEST(CheckBeforeUpdate, ALimitBelowTheUsageIsRefused) {
    auto r = check_memory_limit_above_usage(100 << 20, 200 << 20);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().what(), "linux.resources.memory.limit: 104857600 is below the current usage (209715200 bytes) "
                                "and checkBeforeUpdate is set");
}

TEST(CheckBeforeUpdate, ALimitAtOrAboveTheUsageOrNoLimitPasses) {
    EXPECT_TRUE(check_memory_limit_above_usage(200 << 20, 200 << 20));
    EXPECT_TRUE(check_memory_limit_above_usage(300 << 20, 200 << 20));
    EXPECT_TRUE(check_memory_limit_above_usage(-1, 200 << 20));
    EXPECT_TRUE(check_memory_limit_above_usage(0, 200 << 20));
}
