// What a create killed at any step relies on: the cgroups it will make are named before it
// makes them, init can tell that create died, and tests can stop a process at a given mark.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/process/sync.hpp"

using namespace forkbox;

namespace {

// Two hierarchies in a scratch directory: plain directories stand in for cgroupfs.
class PlannedCgroupsTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/fb-planned-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        base_ = tmpl;
        for (const char* h : {"memory", "unified"}) std::filesystem::create_directory(base_ + "/" + h);
        layout_.mode = CgroupMode::Hybrid;
        layout_.hierarchies = {{base_ + "/memory", false, "memory"}, {base_ + "/unified", true, ""}};
    }
    void TearDown() override { std::filesystem::remove_all(base_); }

    std::string base_;
    CgroupLayout layout_;
};

TEST_F(PlannedCgroupsTest, EveryHierarchyNamesTheContainersDir) {
    auto p = planned_cgroups(layout_, "/forkbox/c1");
    EXPECT_EQ(p.dirs, (std::vector<std::string>{base_ + "/memory/forkbox/c1", base_ + "/unified/forkbox/c1"}));
}

TEST_F(PlannedCgroupsTest, MissingParentsAreToBeMadeParentsFirst) {
    auto p = planned_cgroups(layout_, "/forkbox/c1");
    EXPECT_EQ(p.created, (std::vector<std::string>{base_ + "/memory/forkbox", base_ + "/memory/forkbox/c1",
                                                   base_ + "/unified/forkbox", base_ + "/unified/forkbox/c1"}));
}

TEST_F(PlannedCgroupsTest, AParentThatExistsIsNotOurs) {
    std::filesystem::create_directory(base_ + "/memory/forkbox");
    auto p = planned_cgroups(layout_, "/forkbox/c1");
    EXPECT_EQ(p.created, (std::vector<std::string>{base_ + "/memory/forkbox/c1", base_ + "/unified/forkbox",
                                                   base_ + "/unified/forkbox/c1"}));
}

TEST_F(PlannedCgroupsTest, ALeafThatExistsIsJoinedNotMade) {
    std::filesystem::create_directories(base_ + "/memory/forkbox/c1");
    std::filesystem::create_directories(base_ + "/unified/forkbox/c1");
    EXPECT_TRUE(planned_cgroups(layout_, "/forkbox/c1").created.empty());
}

TEST_F(PlannedCgroupsTest, AManagersHierarchyIsNamedButNeverMadeByUs) {
    auto p = planned_cgroups(layout_, "/forkbox/c1", {false, true});
    EXPECT_EQ(p.dirs.size(), 2u);
    EXPECT_EQ(p.created, (std::vector<std::string>{base_ + "/memory/forkbox", base_ + "/memory/forkbox/c1"}));
}

TEST_F(PlannedCgroupsTest, TheRootCgroupIsTheMountpointAndNothingIsMade) {
    auto p = planned_cgroups(layout_, "/");
    EXPECT_EQ(p.dirs, (std::vector<std::string>{base_ + "/memory", base_ + "/unified"}));
    EXPECT_TRUE(p.created.empty());
}

TEST(SyncPeerGone, AnOpenPeerIsThere) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_FALSE(sync_peer_gone(sv[1]));
    ::close(sv[0]);
    ::close(sv[1]);
}

TEST(SyncPeerGone, AClosedPeerIsGoneEvenWithAMessageQueued) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    ASSERT_TRUE(sync_send(sv[0], SyncType::Go));
    ::close(sv[0]);
    EXPECT_TRUE(sync_peer_gone(sv[1]));
    // The queued message is still read first: Go then EOF.
    auto go = sync_recv(sv[1]);
    ASSERT_TRUE(go);
    EXPECT_EQ(go->type, SyncType::Go);
    auto eof = sync_recv(sv[1]);
    ASSERT_FALSE(eof);
    EXPECT_EQ(eof.error().errnum(), EPIPE);
    ::close(sv[1]);
}

// The init failed and exited with our last message unread: the kernel resets our end and
// reports that before the error the init sent; the error must still be what we read (CI
// saw "sync: receive: Connection reset by peer" in place of a mount error once).
TEST(SyncRecv, APeerThatExitedWithOurMessageUnreadStillDeliversWhatItSent) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    ASSERT_TRUE(sync_send(sv[1], SyncType::Go));  // the parent's, never read
    ASSERT_TRUE(sync_send(sv[0], SyncType::Error, EINVAL, "mount proc: must be mounted on ordinary directory"));
    ::close(sv[0]);
    auto error = sync_recv(sv[1]);
    ASSERT_TRUE(error) << error.error().what();
    EXPECT_EQ(error->type, SyncType::Error);
    EXPECT_EQ(error->payload, "mount proc: must be mounted on ordinary directory");
    auto eof = sync_recv(sv[1]);
    ASSERT_FALSE(eof);
    EXPECT_EQ(eof.error().errnum(), EPIPE);
    ::close(sv[1]);
}

// A child that reads FORKBOX_TEST_STOP_AT, passes `before`, then marks `label` twice.
pid_t child_marking(const char* stop_at, const char* before, const char* label) {
    pid_t pid = ::fork();
    if (pid == 0) {
        ::setenv("FORKBOX_TEST_STOP_AT", stop_at, 1);
        ::unsetenv("FORKBOX_TRACE");
        trace::open_from_env();
        trace::mark(before);
        trace::mark(label);
        trace::mark(label);
        ::_exit(7);
    }
    return pid;
}

TEST(TestStopAt, TheProcessStopsAtItsLabelOnceAndGoesOnAfterSigcont) {
    pid_t pid = child_marking("create: go", "create: clone", "create: go");
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFSTOPPED(status));
    EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
    ::kill(pid, SIGCONT);
    // Not stopped again by the second mark of the same label.
    ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(TestStopAt, OtherLabelsDoNotStop) {
    pid_t pid = child_marking("create: done", "create: clone", "create: go");
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(TestStopAt, SigkillEndsAStoppedProcess) {
    pid_t pid = child_marking("init: ready", "init: first", "init: ready");
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFSTOPPED(status));
    ::kill(pid, SIGKILL);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace
