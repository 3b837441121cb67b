#include "libforkbox/cgroup/stats.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "libforkbox/base/clock.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/cgroup/oom.hpp"
#include "libforkbox/container/events.hpp"

namespace forkbox {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(CgroupUint, ReadsANumberWithItsNewline) { EXPECT_EQ(*parse_cgroup_uint("67108864\n"), 67108864u); }

TEST(CgroupUint, MaxIsTheLargestValue) { EXPECT_EQ(*parse_cgroup_uint("max\n"), kMax); }

TEST(CgroupUint, ANegativeValueReadsAsZero) { EXPECT_EQ(*parse_cgroup_uint("-1\n"), 0u); }

TEST(CgroupUint, GarbageIsAnError) {
    EXPECT_FALSE(parse_cgroup_uint("12abc"));
    EXPECT_FALSE(parse_cgroup_uint(""));
}

TEST(FlatKeyed, ReadsEveryLine) {
    auto m = parse_flat_keyed("cache 4096\nrss 8192\n\nhierarchical_memory_limit 9223372036854771712\n");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->size(), 3u);
    EXPECT_EQ(m->at("rss"), 8192u);
    EXPECT_EQ(m->at("hierarchical_memory_limit"), 9223372036854771712u);
}

TEST(FlatKeyed, ALineWithoutAValueIsAnError) { EXPECT_FALSE(parse_flat_keyed("cache\n")); }

TEST(CpuacctStat, TicksBecomeNanoseconds) {
    auto uk = parse_cpuacct_stat("user 3\nsystem 12\n");
    ASSERT_TRUE(uk);
    EXPECT_EQ(uk->user, 30000000u);
    EXPECT_EQ(uk->kernel, 120000000u);
}

TEST(CpuacctStat, FieldsOutOfOrderAreAnError) { EXPECT_FALSE(parse_cpuacct_stat("system 1\nuser 2\n")); }

TEST(CpuacctUsageAll, SplitsKernelAndUserPerCpu) {
    auto m = parse_cpuacct_usage_all("cpu user system\n0 100 200\n1 3977338 7474099\n");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->user, (std::vector<uint64_t>{100, 3977338}));
    EXPECT_EQ(m->kernel, (std::vector<uint64_t>{200, 7474099}));
}

TEST(UintList, ReadsPercpuUsage) {
    EXPECT_EQ(*parse_uint_list("1988175 15942748 \n"), (std::vector<uint64_t>{1988175, 15942748}));
    EXPECT_TRUE(parse_uint_list("\n")->empty());
}

TEST(CpuList, ExpandsRanges) {
    EXPECT_EQ(*parse_cpu_list("0-3,8,10-11\n"), (std::vector<uint16_t>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(*parse_cpu_list("0\n"), (std::vector<uint16_t>{0}));
    EXPECT_TRUE(parse_cpu_list("\n")->empty());
}

TEST(CpuList, ABackwardRangeIsAnError) { EXPECT_FALSE(parse_cpu_list("3-1")); }

TEST(BlkioV1, ReadsOpsAndSkipsTheTotalLine) {
    auto e = parse_blkio_v1("8:0 Read 1282048\n8:0 Write 2195456\n8:16 Total 3477504\nTotal 3477504\n");
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 3u);
    EXPECT_EQ((*e)[0], (BlkioEntry{8, 0, "Read", 1282048}));
    EXPECT_EQ((*e)[2], (BlkioEntry{8, 16, "Total", 3477504}));
}

TEST(BlkioV1, ALineWithoutAnOpHasAnEmptyOne) {
    auto e = parse_blkio_v1("8:0 6792\n");
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 1u);
    EXPECT_EQ((*e)[0], (BlkioEntry{8, 0, "", 6792}));
}

TEST(BlkioV1, AMalformedLineIsAnError) { EXPECT_FALSE(parse_blkio_v1("8:0 Read\n")); }

TEST(IoStat, MapsBytesAndIosToV1Tables) {
    BlkioStats b;
    ASSERT_TRUE(parse_io_stat("8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n", b));
    EXPECT_EQ(b.io_service_bytes_recursive,
              (std::vector<BlkioEntry>{{8, 0, "Read", 10}, {8, 0, "Write", 20}}));
    EXPECT_EQ(b.io_serviced_recursive, (std::vector<BlkioEntry>{{8, 0, "Read", 1}, {8, 0, "Write", 2}}));
    EXPECT_TRUE(b.sectors_recursive.empty());
}

TEST(HugepageSizeName, NamesLikeRunc) {
    EXPECT_EQ(hugepage_size_name(2048), "2MB");
    EXPECT_EQ(hugepage_size_name(1048576), "1GB");
    EXPECT_EQ(hugepage_size_name(64), "64KB");
    EXPECT_EQ(hugepage_size_name(32768), "32MB");
}

TEST(KeyedValue, FindsOomKillInMemoryEvents) {
    const char* events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
    EXPECT_EQ(cgroup_keyed_value(events, "oom_kill"), 1u);
    EXPECT_EQ(cgroup_keyed_value(events, "populated"), 0u);
    EXPECT_EQ(cgroup_keyed_value("populated 1\nfrozen 0\n", "populated"), 1u);
}

TEST(StatsJson, ZeroStatsHaveRuncsAlwaysPresentFields) {
    CgroupStats s;
    EXPECT_EQ(cgroup_stats_json(s),
              "{\"cpu\":{\"usage\":{\"kernel\":0,\"user\":0},\"throttling\":{}},"
              "\"cpuset\":{\"cpu_exclusive\":0,\"mem_hardwall\":0,\"mem_exclusive\":0,\"memory_migrate\":0,"
              "\"memory_spread_page\":0,\"memory_spread_slab\":0,\"memory_pressure\":0,\"sched_load_balance\":0,"
              "\"sched_relax_domain_level\":0},"
              "\"memory\":{\"usage\":{\"limit\":0,\"failcnt\":0},\"swap\":{\"limit\":0,\"failcnt\":0},"
              "\"kernel\":{\"limit\":0,\"failcnt\":0},\"kernelTCP\":{\"limit\":0,\"failcnt\":0}},"
              "\"pids\":{},\"blkio\":{},\"hugetlb\":{},\"intel_rdt\":{},\"network_interfaces\":null}");
}

TEST(StatsJson, FilledStatsUseRuncsNames) {
    CgroupStats s;
    s.cpu.usage = {100, {60, 40}, {10, 20}, {50, 20}, 30, 70};
    s.cpu.throttling = {5, 2, 1000};
    s.cpuset.cpus = {0, 1};
    s.cpuset.sched_relax_domain_level = -1;
    s.memory.cache = 4096;
    s.memory.usage = {67108864, 720896, 2797568, 3};
    s.memory.raw = {{"rss", 49152}, {"cache", 4096}};
    s.pids = {1, 100};
    s.blkio.io_service_bytes_recursive = {{8, 0, "Read", 10}};
    s.blkio.io_queued_recursive = {{8, 0, "Write", 0}};
    s.hugetlb["2MB"] = {2097152, 4194304, 1};
    std::string j = cgroup_stats_json(s);
    auto doc = json::Document::parse(j);
    ASSERT_TRUE(doc) << j;
    EXPECT_NE(j.find("\"usage\":{\"total\":100,\"percpu\":[60,40],\"percpu_kernel\":[10,20],"
                     "\"percpu_user\":[50,20],\"kernel\":30,\"user\":70}"),
              std::string::npos)
        << j;
    EXPECT_NE(j.find("\"throttling\":{\"periods\":5,\"throttledPeriods\":2,\"throttledTime\":1000}"),
              std::string::npos);
    EXPECT_NE(j.find("\"cpus\":[0,1]"), std::string::npos);
    EXPECT_NE(j.find("\"sched_relax_domain_level\":-1"), std::string::npos);
    EXPECT_NE(j.find("\"memory\":{\"cache\":4096,\"usage\":{\"limit\":67108864,\"usage\":720896,"
                     "\"max\":2797568,\"failcnt\":3}"),
              std::string::npos);
    EXPECT_NE(j.find("\"raw\":{\"cache\":4096,\"rss\":49152}"), std::string::npos);  // sorted, as Go's maps
    EXPECT_NE(j.find("\"pids\":{\"current\":1,\"limit\":100}"), std::string::npos);
    // Zero values are left out of blkio entries; the queued table is runc's "ioQueueRecursive".
    EXPECT_NE(j.find("\"blkio\":{\"ioServiceBytesRecursive\":[{\"major\":8,\"op\":\"Read\",\"value\":10}],"
                     "\"ioQueueRecursive\":[{\"major\":8,\"op\":\"Write\"}]}"),
              std::string::npos)
        << j;
    EXPECT_NE(j.find("\"hugetlb\":{\"2MB\":{\"usage\":2097152,\"max\":4194304,\"failcnt\":1}}"), std::string::npos);
}

TEST(EventJson, OomHasNoData) { EXPECT_EQ(event_json("oom", "c1"), "{\"type\":\"oom\",\"id\":\"c1\"}"); }

TEST(EventJson, StatsCarryData) {
    CgroupStats s;
    std::string j = event_json("stats", "c1", &s);
    EXPECT_TRUE(j.starts_with("{\"type\":\"stats\",\"id\":\"c1\",\"data\":{\"cpu\":")) << j;
    EXPECT_TRUE(j.ends_with("\"network_interfaces\":null}}")) << j;
}

TEST(ControllerDir, HybridPrefersTheV1HierarchyAndFallsBackToV2) {
    auto layout = parse_cgroup_layout(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    std::vector<std::string> dirs = {"/sys/fs/cgroup/cpu,cpuacct/forkbox/c", "/sys/fs/cgroup/memory/forkbox/c",
                                     "/sys/fs/cgroup/unified/forkbox/c"};
    auto mem = controller_dir(layout, dirs, "memory");
    ASSERT_TRUE(mem);
    EXPECT_EQ(mem->dir, "/sys/fs/cgroup/memory/forkbox/c");
    EXPECT_FALSE(mem->unified);
    auto acct = controller_dir(layout, dirs, "cpuacct");
    ASSERT_TRUE(acct);
    EXPECT_EQ(acct->dir, "/sys/fs/cgroup/cpu,cpuacct/forkbox/c");
    auto huge = controller_dir(layout, dirs, "hugetlb");
    ASSERT_TRUE(huge);
    EXPECT_EQ(huge->dir, "/sys/fs/cgroup/unified/forkbox/c");
    EXPECT_TRUE(huge->unified);
}

TEST(ControllerDir, NoDirsMeansNone) {
    auto layout = parse_cgroup_layout("31 23 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    EXPECT_FALSE(controller_dir(layout, {}, "memory"));
}

using std::chrono::nanoseconds;

TEST(GoDuration, ReadsEveryUnit) {
    EXPECT_EQ(*parse_go_duration("5s"), nanoseconds(5000000000));
    EXPECT_EQ(*parse_go_duration("100ms"), nanoseconds(100000000));
    EXPECT_EQ(*parse_go_duration("1m"), nanoseconds(60000000000));
    EXPECT_EQ(*parse_go_duration("2h"), nanoseconds(7200000000000));
    EXPECT_EQ(*parse_go_duration("10us"), nanoseconds(10000));
    EXPECT_EQ(*parse_go_duration("10\u00b5s"), nanoseconds(10000));
    EXPECT_EQ(*parse_go_duration("7ns"), nanoseconds(7));
}

TEST(GoDuration, CombinesComponentsAndFractions) {
    EXPECT_EQ(*parse_go_duration("1m30s"), nanoseconds(90000000000));
    EXPECT_EQ(*parse_go_duration("1.5s"), nanoseconds(1500000000));
    EXPECT_EQ(*parse_go_duration(".5ms"), nanoseconds(500000));
    EXPECT_EQ(*parse_go_duration("1h2m3.25s"), nanoseconds(3723250000000));
}

TEST(GoDuration, SignsAndZero) {
    EXPECT_EQ(*parse_go_duration("0"), nanoseconds(0));
    EXPECT_EQ(*parse_go_duration("-1s"), nanoseconds(-1000000000));
    EXPECT_EQ(*parse_go_duration("+2s"), nanoseconds(2000000000));
}

TEST(GoDuration, RejectsWhatGoRejects) {
    for (const char* bad : {"", "5", "s", "1x", "1.s.", "-", ".s", "5 s", "10000000000000h"})
        EXPECT_FALSE(parse_go_duration(bad)) << bad;
}

}  // namespace
}  // namespace forkbox
