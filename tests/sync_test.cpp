#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "libforkbox/process/sync.hpp"

using namespace forkbox;

namespace {

struct SocketPair {
    unique_fd a, b;
    SocketPair() {
        int sp[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0) {
            a.reset(sp[0]);
            b.reset(sp[1]);
        }
    }
};

ino_t inode_of(int fd) {
    struct stat st {};
    ::fstat(fd, &st);
    return st.st_ino;
}

}  // namespace

TEST(Sync, AMessageCarriesItsPayloadAndNoFds) {
    SocketPair s;
    ASSERT_TRUE(sync_send(s.a.get(), SyncType::Go, 7, "state"));
    auto m = sync_recv(s.b.get());
    ASSERT_TRUE(m) << m.error().what();
    EXPECT_EQ(m->type, SyncType::Go);
    EXPECT_EQ(m->value, 7);
    EXPECT_EQ(m->payload, "state");
    EXPECT_TRUE(m->fds.empty());
}

TEST(Sync, FdsPassWithAMessageInOrderAndCloseOnExec) {
    SocketPair s;
    std::vector<unique_fd> pipes;
    std::vector<int> sent;
    for (int i = 0; i < 5; ++i) {
        int p[2];
        ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
        pipes.emplace_back(p[0]);
        pipes.emplace_back(p[1]);
        sent.push_back(p[i % 2]);
    }
    ASSERT_TRUE(sync_send(s.a.get(), SyncType::CgroupsPlaced, 0, {}, sent));
    auto m = sync_expect(s.b.get(), SyncType::CgroupsPlaced);
    ASSERT_TRUE(m) << m.error().what();
    ASSERT_EQ(m->fds.size(), sent.size());
    for (size_t i = 0; i < sent.size(); ++i) {
        EXPECT_EQ(inode_of(m->fds[i].get()), inode_of(sent[i]));
        EXPECT_TRUE(::fcntl(m->fds[i].get(), F_GETFD) & FD_CLOEXEC);
    }
}

TEST(Sync, MoreFdsThanAMessageCarriesAreRefusedAndNothingIsSent) {
    SocketPair s;
    std::vector<int> many(kSyncMaxFds + 1, STDIN_FILENO);
    auto r = sync_send(s.a.get(), SyncType::CgroupsPlaced, 0, {}, many);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().errnum(), E2BIG);
    EXPECT_TRUE(sync_send(s.a.get(), SyncType::Go));
    auto m = sync_recv(s.b.get());
    ASSERT_TRUE(m);
    EXPECT_EQ(m->type, SyncType::Go);  // the refused message never went
}
