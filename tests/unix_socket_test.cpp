#include "libforkbox/base/unix_socket.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

using namespace forkbox;

namespace {

unique_fd listen_at(const std::string& path) {
    unique_fd l(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof a.sun_path - 1);
    if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(l.get(), 16) < 0) return {};
    return l;
}

unique_fd connect_to(const std::string& path) {
    unique_fd c(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof a.sun_path - 1);
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) return {};
    return c;
}

}  // namespace

// The daemons' listeners at RLIMIT_NOFILE: every pending client is told and let go, and
// accept ends with EAGAIN (nothing pending), so a level-triggered loop goes back to sleep
// instead of spinning on EMFILE.
TEST(Acceptor, AtFdExhaustionPendingClientsAreShedNotLeftPending) {
    char dir[] = "/tmp/fb-acceptor.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    std::string path = std::string(dir) + "/s.sock";
    unique_fd listener = listen_at(path);
    ASSERT_TRUE(listener.valid());
    Acceptor acceptor(listener.get());
    std::vector<unique_fd> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(connect_to(path));
    for (const auto& c : clients) ASSERT_TRUE(c.valid());

    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // No fd can be opened from here on: the lowest free one is the limit.
        int lowest = ::fcntl(0, F_DUPFD, 0);
        ::close(lowest);
        rlimit rl{static_cast<rlim_t>(lowest), static_cast<rlim_t>(lowest)};
        if (::setrlimit(RLIMIT_NOFILE, &rl) < 0) ::_exit(100);
        int shed = 0;
        int fd = acceptor.accept([&](int conn) {
            ++shed;
            ::send(conn, "busy", 4, MSG_DONTWAIT | MSG_NOSIGNAL);
        });
        ::_exit(fd < 0 && errno == EAGAIN ? shed : 101);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 4);
    // Each client was told why, then closed.
    for (const auto& c : clients) {
        char buf[8];
        ssize_t n = ::recv(c.get(), buf, sizeof buf, MSG_DONTWAIT);
        EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "busy");
    }
    std::system(("rm -rf '" + std::string(dir) + "'").c_str());
}

TEST(Acceptor, WithRoomItAcceptsAndThenSaysNothingIsPending) {
    char dir[] = "/tmp/fb-acceptor.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    std::string path = std::string(dir) + "/s.sock";
    unique_fd listener = listen_at(path);
    ASSERT_TRUE(listener.valid());
    Acceptor acceptor(listener.get());
    unique_fd client = connect_to(path);
    unique_fd conn(acceptor.accept());
    EXPECT_TRUE(conn.valid());
    EXPECT_EQ(acceptor.accept(), -1);
    EXPECT_EQ(errno, EAGAIN);
    std::system(("rm -rf '" + std::string(dir) + "'").c_str());
}

// A release buffer is 256 KiB: made, it must not have faulted its pages in (only what a
// message fills does), and a message received into it comes out whole.
TEST(ReceiveBuffer, PagesStayUntouchedUntilAMessageFillsThem) {
    constexpr size_t kBytes = 256 * 1024;
    std::string buf = receive_buffer(kBytes);
    ASSERT_EQ(buf.size(), kBytes);
    const long page = ::sysconf(_SC_PAGESIZE);
    auto first = reinterpret_cast<uintptr_t>(buf.data()) + static_cast<uintptr_t>(page) - 1;
    first -= first % static_cast<uintptr_t>(page);
    size_t pages = (reinterpret_cast<uintptr_t>(buf.data()) + kBytes - first) / static_cast<uintptr_t>(page);
    std::vector<unsigned char> resident(pages);
    ASSERT_EQ(::mincore(reinterpret_cast<void*>(first), pages * static_cast<size_t>(page), resident.data()), 0);
    size_t in = 0;
    for (unsigned char r : resident) in += r & 1;
    EXPECT_LE(in, 2u) << in << " of " << pages << " pages resident";

    int sp[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    unique_fd a(sp[0]), b(sp[1]);
    std::string message(10000, 'm');
    ASSERT_TRUE(send_with_fds(a.get(), message, {}, "test"));
    std::vector<unique_fd> fds;
    auto n = receive_message(b.get(), buf, fds, "test");
    ASSERT_TRUE(n) << n.error().what();
    EXPECT_EQ(std::string_view(buf.data(), *n), message);
}
