#include "libforkbox/base/unix_socket.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
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

// A release buffer is 256 KiB: made, it must not have been written (a zero-filled one
// faults in all 64 pages in every embryo), and a message received into it comes out whole.
// Checked in a child whose malloc hands the block just freed back: still holding the
// pattern written into it, nothing wrote it.
TEST(ReceiveBuffer, IsNotWrittenUntilAMessageFillsIt) {
    constexpr size_t kBytes = 256 * 1024;
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::mallopt(M_MMAP_THRESHOLD, 16 << 20);  // from the heap, and kept there when freed
        ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
        auto* block = static_cast<unsigned char*>(std::malloc(kBytes + 1));  // the string's own size
        std::memset(block, 0xAA, kBytes + 1);
        asm volatile("" : : "r"(block) : "memory");  // the pattern is written, not optimized out before free
        const auto freed = reinterpret_cast<uintptr_t>(block);  // compared, never used again
        std::free(block);
        std::string buf = receive_buffer(kBytes);
        if (buf.size() != kBytes) ::_exit(2);
        if (reinterpret_cast<uintptr_t>(buf.data()) != freed) ::_exit(3);  // another block: no verdict
        for (size_t i = 4096; i < kBytes; i += 4096)
            if (static_cast<unsigned char>(buf[i]) != 0xAA) ::_exit(4);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "child status " << status;
    if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "this malloc (a sanitizer's?) did not hand the freed block back";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "4: the buffer was written";

    std::string buf = receive_buffer(kBytes);
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

// An embryo that fails sends its error and exits, maybe with the daemon's last message unread:
// the kernel then resets the daemon's end and reports it before the error. The error is read.
TEST(ReceiveMessage, APeerThatExitedWithOurMessageUnreadStillDeliversWhatItSent) {
    int sp[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    ASSERT_TRUE(send_with_fds(sp[1], "M", {}, "test"));  // never read
    ASSERT_TRUE(send_with_fds(sp[0], "Dthe overlay: Permission denied", {}, "test"));
    ::close(sp[0]);
    std::string buf(4096, '\0');
    std::vector<unique_fd> fds;
    auto n = receive_message(sp[1], buf, fds, "test");
    ASSERT_TRUE(n) << n.error().what();
    EXPECT_EQ(buf.substr(0, *n), "Dthe overlay: Permission denied");
    auto eof = receive_message(sp[1], buf, fds, "test");
    ASSERT_TRUE(eof) << eof.error().what();
    EXPECT_EQ(*eof, 0u);
    ::close(sp[1]);
}
