// landlock: a scoped process reaches only its own domain's abstract Unix sockets and
// signal targets (in a forked child; no root needed).
#include "libforkbox/process/landlock.hpp"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "libforkbox/base/fd.hpp"

using namespace forkbox;

namespace {

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return a;
}

unique_fd listen_abstract(const std::string& name) {
    socklen_t len;
    sockaddr_un a = abstract_address(name, len);
    unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s || ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), len) < 0 || ::listen(s.get(), 4) < 0) return {};
    return s;
}

// 0 when connected, else errno.
int connect_abstract(const std::string& name) {
    socklen_t len;
    sockaddr_un a = abstract_address(name, len);
    unique_fd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    return ::connect(c.get(), reinterpret_cast<sockaddr*>(&a), len) == 0 ? 0 : errno;
}

}  // namespace

TEST(Landlock, AbiIsReported) { EXPECT_EQ(landlock_scopes_supported(), landlock_abi() >= 6); }

TEST(Landlock, ScopedChildReachesOnlyItsOwnSocketsAndProcesses) {
    if (!landlock_scopes_supported()) GTEST_SKIP() << "the kernel has no Landlock scopes (6.12+)";
    std::string outside = "fb-landlock-test-" + std::to_string(::getpid());
    unique_fd listener = listen_abstract(outside);
    ASSERT_TRUE(listener);
    ASSERT_EQ(connect_abstract(outside), 0);  // the control: unscoped, it connects
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Exit codes say which step failed.
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) ::_exit(10);
        auto scoped = scope_to_own_domain();
        if (!scoped || !*scoped) ::_exit(11);
        if (connect_abstract(outside) != EPERM) ::_exit(12);
        if (::kill(::getppid(), 0) == 0 || errno != EPERM) ::_exit(13);
        unique_fd own = listen_abstract(outside + "-own");  // made inside: reachable
        if (!own || connect_abstract(outside + "-own") != 0) ::_exit(14);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}
