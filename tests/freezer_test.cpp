#include "libforkbox/cgroup/freezer.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace forkbox {
namespace {

const char* kHybrid =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

const char* kV2 = "31 23 0:28 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";

TEST(FindFreezer, HybridUsesTheV1FreezerHierarchy) {
    auto layout = parse_cgroup_layout(kHybrid);
    Freezer f = find_freezer(layout, {"/sys/fs/cgroup/cpu,cpuacct/forkbox/c",
                                      "/sys/fs/cgroup/freezer/forkbox/c", "/sys/fs/cgroup/unified/forkbox/c"});
    EXPECT_EQ(f.kind, Freezer::Kind::V1);
    EXPECT_EQ(f.dir, "/sys/fs/cgroup/freezer/forkbox/c");
}

TEST(FindFreezer, V2UsesTheUnifiedDir) {
    auto layout = parse_cgroup_layout(kV2);
    Freezer f = find_freezer(layout, {"/sys/fs/cgroup/forkbox/c"});
    EXPECT_EQ(f.kind, Freezer::Kind::V2);
    EXPECT_EQ(f.dir, "/sys/fs/cgroup/forkbox/c");
}

TEST(FindFreezer, HybridWithoutAV1FreezerFallsBackToV2) {
    auto layout = parse_cgroup_layout(
        "32 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    Freezer f = find_freezer(layout, {"/sys/fs/cgroup/memory/x", "/sys/fs/cgroup/unified/x"});
    EXPECT_EQ(f.kind, Freezer::Kind::V2);
    EXPECT_EQ(f.dir, "/sys/fs/cgroup/unified/x");
}

TEST(FindFreezer, AV1MountBelowTheV2OneIsNotTakenForIt) {
    auto layout = parse_cgroup_layout(
        "31 23 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        "32 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    Freezer f = find_freezer(layout, {"/sys/fs/cgroup/memory/x", "/sys/fs/cgroup/x"});
    EXPECT_EQ(f.kind, Freezer::Kind::V2);
    EXPECT_EQ(f.dir, "/sys/fs/cgroup/x");
}

TEST(FindFreezer, NoCgroupDirsMeansNoFreezer) {
    auto layout = parse_cgroup_layout(kHybrid);
    EXPECT_EQ(find_freezer(layout, {}).kind, Freezer::Kind::None);
    EXPECT_FALSE(*cgroup_frozen(Freezer{}));
}

TEST(FindFreezer, ADirSharingOnlyAPrefixIsNotUnderTheMountpoint) {
    auto layout = parse_cgroup_layout(kHybrid);
    Freezer f = find_freezer(layout, {"/sys/fs/cgroup/freezer2/x"});
    EXPECT_EQ(f.kind, Freezer::Kind::None);
}

// A scratch directory standing for a cgroup: the tests write its freezer files.
struct FakeCgroup {
    std::string dir;
    FakeCgroup() {
        char tmpl[] = "/tmp/fbx-freezer-XXXXXX";
        dir = ::mkdtemp(tmpl);
    }
    ~FakeCgroup() {
        for (const char* f : {"/freezer.state", "/cgroup.freeze", "/cgroup.events"}) ::unlink((dir + f).c_str());
        ::rmdir(dir.c_str());
    }
    void write(const char* file, const char* text) const { std::ofstream(dir + file) << text; }
};

TEST(FreezerState, V1FreezingIsNeitherFrozenNorThawed) {
    FakeCgroup cg;
    Freezer f{Freezer::Kind::V1, cg.dir};
    cg.write("/freezer.state", "FREEZING\n");
    EXPECT_FALSE(*cgroup_frozen(f));
    EXPECT_FALSE(*cgroup_thawed(f));
    cg.write("/freezer.state", "FROZEN\n");
    EXPECT_TRUE(*cgroup_frozen(f));
    EXPECT_FALSE(*cgroup_thawed(f));
    cg.write("/freezer.state", "THAWED\n");
    EXPECT_FALSE(*cgroup_frozen(f));
    EXPECT_TRUE(*cgroup_thawed(f));
}

TEST(FreezerState, V2AFreezeAskedForIsNotThawedBeforeEveryTaskStopped) {
    FakeCgroup cg;
    Freezer f{Freezer::Kind::V2, cg.dir};
    cg.write("/cgroup.freeze", "1\n");
    cg.write("/cgroup.events", "populated 1\nfrozen 0\n");
    EXPECT_FALSE(*cgroup_frozen(f));
    EXPECT_FALSE(*cgroup_thawed(f));
    cg.write("/cgroup.events", "populated 1\nfrozen 1\n");
    EXPECT_TRUE(*cgroup_frozen(f));
    cg.write("/cgroup.freeze", "0\n");
    EXPECT_TRUE(*cgroup_thawed(f));
}

TEST(FreezerState, NoFreezerIsThawed) { EXPECT_TRUE(*cgroup_thawed(Freezer{})); }

}  // namespace
}  // namespace forkbox
