// What a create killed at any step relies on: the cgroups it will make are named before it
// makes them, init can tell that create died, and tests can stop a process at a given mark.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "libforkbox/base/trace.hpp"
#include "libforkbox/process/sync.hpp"

using namespace forkbox;

namespace {

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
