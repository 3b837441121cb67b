#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <vector>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/process.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/usage.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

constexpr uint64_t bit(int cap) { return uint64_t{1} << cap; }

CapabilitySets sets_of(const Capabilities& c) {
    auto r = capability_sets(c);
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().what());
    return r ? *r : CapabilitySets{};
}

std::string error_of(const Capabilities& c) {
    auto r = capability_sets(c);
    EXPECT_FALSE(r.has_value()) << "accepted";
    return r ? std::string() : r.error().what();
}

}  // namespace

// ---- format_id_mappings ----

TEST(IdMappings, OneMappingIsOneLine) {
    EXPECT_EQ(format_id_mappings({IdMapping{0, 100000, 65536}}), "0 100000 65536\n");
}

TEST(IdMappings, EachMappingIsALineInOrder) {
    EXPECT_EQ(format_id_mappings({IdMapping{0, 1000, 1}, IdMapping{1, 100000, 65535}}),
              "0 1000 1\n1 100000 65535\n");
}

TEST(IdMappings, NoMappingsIsEmptyText) { EXPECT_EQ(format_id_mappings({}), ""); }

TEST(IdMappings, LargestIdsAreWrittenUnsigned) {
    EXPECT_EQ(format_id_mappings({IdMapping{4294967294u, 4294967294u, 1}}), "4294967294 4294967294 1\n");
}

// ---- go_errno_text ----

TEST(GoErrnoText, EnoentIsLowercased) { EXPECT_EQ(go_errno_text(ENOENT), "no such file or directory"); }

TEST(GoErrnoText, EaccesIsPermissionDenied) { EXPECT_EQ(go_errno_text(EACCES), "permission denied"); }

TEST(GoErrnoText, EnoexecIsExecFormatError) { EXPECT_EQ(go_errno_text(ENOEXEC), "exec format error"); }

TEST(GoErrnoText, OnlyTheFirstLetterIsLowercased) {
    EXPECT_EQ(go_errno_text(EREMOTEIO), "remote I/O error");
}

// Go lowercases the first letter only when the second is lowercase
TEST(GoErrnoText, LeadingAcronymStaysUppercaseAsInGo) {
    EXPECT_EQ(go_errno_text(EDOTDOT), "RFS specific error");
}

// ---- capability_sets ----

TEST(Capabilities, NoCapabilitiesAreEmptyMasks) {
    auto s = sets_of(Capabilities{});
    EXPECT_EQ(s.bounding, 0u);
    EXPECT_EQ(s.effective, 0u);
    EXPECT_EQ(s.permitted, 0u);
    EXPECT_EQ(s.inheritable, 0u);
    EXPECT_EQ(s.ambient, 0u);
}

TEST(Capabilities, NamesBecomeTheirKernelBits) {
    Capabilities c;
    c.bounding = {"CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN"};
    EXPECT_EQ(sets_of(c).bounding, bit(0) | bit(5) | bit(21));
}

TEST(Capabilities, HighestKnownCapabilityIsBit40) {
    Capabilities c;
    c.effective = {"CAP_CHECKPOINT_RESTORE"};
    EXPECT_EQ(sets_of(c).effective, bit(40));
}

TEST(Capabilities, EachSetGetsItsOwnMask) {
    Capabilities c;
    c.bounding = {"CAP_CHOWN"};
    c.effective = {"CAP_DAC_OVERRIDE"};
    c.permitted = {"CAP_FOWNER"};
    c.inheritable = {"CAP_FSETID"};
    c.ambient = {"CAP_KILL"};
    auto s = sets_of(c);
    EXPECT_EQ(s.bounding, bit(0));
    EXPECT_EQ(s.effective, bit(1));
    EXPECT_EQ(s.permitted, bit(3));
    EXPECT_EQ(s.inheritable, bit(4));
    EXPECT_EQ(s.ambient, bit(5));
}

TEST(Capabilities, RepeatedNameIsOneBit) {
    Capabilities c;
    c.permitted = {"CAP_NET_RAW", "CAP_NET_RAW"};
    EXPECT_EQ(sets_of(c).permitted, bit(13));
}

TEST(Capabilities, UnknownNameIsAnErrorNamingTheSet) {
    Capabilities c;
    c.bounding = {"CAP_CHOWN"};
    c.ambient = {"CAP_FLY"};
    EXPECT_EQ(error_of(c), "process.capabilities.ambient: unknown capability \"CAP_FLY\"");
}

TEST(Capabilities, UnknownNameInInheritableNamesInheritable) {
    Capabilities c;
    c.inheritable = {"CAP_NOPE"};
    EXPECT_EQ(error_of(c), "process.capabilities.inheritable: unknown capability \"CAP_NOPE\"");
}

TEST(Capabilities, UnknownNameIsEinval) {
    Capabilities c;
    c.effective = {"CAP_NOPE"};
    auto r = capability_sets(c);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().errnum(), EINVAL);
}

// Exact spec names, as runc accepts them.
TEST(Capabilities, LowercaseNameIsUnknown) {
    Capabilities c;
    c.bounding = {"cap_chown"};
    EXPECT_EQ(error_of(c), "process.capabilities.bounding: unknown capability \"cap_chown\"");
}

TEST(Capabilities, NameWithoutCapPrefixIsUnknown) {
    Capabilities c;
    c.permitted = {"CHOWN"};
    EXPECT_EQ(error_of(c), "process.capabilities.permitted: unknown capability \"CHOWN\"");
}

// ---- plan_id_map_writer: who writes a user namespace's maps ----

TEST(IdMapWriter, RootWritesEveryMapDirectly) {
    auto w = plan_id_map_writer({IdMapping{0, 100000, 65536}}, {IdMapping{0, 100000, 65536}}, 0, 0);
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->newuidmap.empty());
    EXPECT_TRUE(w->newgidmap.empty());
    EXPECT_FALSE(w->deny_setgroups);
}

TEST(IdMapWriter, AUserWritesItsOwnSingleMappingAfterDenyingSetgroups) {
    auto w = plan_id_map_writer({IdMapping{0, 23456, 1}}, {IdMapping{0, 23457, 1}}, 23456, 23457);
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->newuidmap.empty());
    EXPECT_TRUE(w->newgidmap.empty());
    EXPECT_TRUE(w->deny_setgroups);
}

TEST(IdMapWriter, AnyOtherMapOfAUserNeedsTheToolsNamedInTheError) {
    const char* saved = std::getenv("PATH");
    std::string path = saved ? saved : "";
    ::setenv("PATH", "/nonexistent", 1);
    auto w = plan_id_map_writer({IdMapping{0, 23456, 1}, IdMapping{1, 100000, 65536}}, {IdMapping{0, 23456, 1}},
                                23456, 23456);
    ::setenv("PATH", path.c_str(), 1);
    ASSERT_FALSE(w.has_value());
    EXPECT_NE(w.error().what().find("newuidmap"), std::string::npos) << w.error().what();
}

TEST(OpenChildren, PidfdsOfEachLiveChildAndOfNothingElse) {
    pid_t kids[2];
    for (pid_t& k : kids) {
        k = ::fork();
        if (k == 0) {
            ::pause();
            ::_exit(0);
        }
        ASSERT_GT(k, 0);
    }
    auto fds = open_children(::getpid());
    EXPECT_EQ(fds.size(), 2u);
    for (auto& fd : fds) EXPECT_EQ(sys::pidfd_send_signal(fd.get(), SIGKILL), 0);
    for (pid_t k : kids) {
        int status = 0;
        EXPECT_EQ(::waitpid(k, &status, 0), k);
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    EXPECT_TRUE(open_children(::getpid()).empty());
    EXPECT_TRUE(open_children(999999999).empty());
}

// A pid namespace's init killed while another process of its namespace is unreaped (as an
// exec's child is, whose parent is outside) stays in do_exit: exiting, not yet a zombie.
TEST(ProcStat, AnInitWaitingForItsNamespaceIsExitingNotAZombie) {
    pid_t helper = ::fork();
    ASSERT_GE(helper, 0);
    if (helper == 0) {
        // In a child of its own: the namespace for children changes for good here.
        if (::unshare(CLONE_NEWPID) < 0) ::_exit(10);
        pid_t init = ::fork();
        if (init == 0) {
            ::pause();
            ::_exit(0);
        }
        pid_t member = ::fork();  // ours, born in init's namespace
        if (member == 0) {
            ::pause();
            ::_exit(0);
        }
        if (init < 0 || member < 0) ::_exit(11);
        auto before = read_proc_stat(init);
        if (!before || before->exiting()) ::_exit(12);
        ::kill(init, SIGKILL);
        bool exiting = false;
        for (int i = 0; i < 2000 && !exiting; ++i) {
            auto st = read_proc_stat(init);
            exiting = st && st->exiting() && st->state != 'Z';
            if (!exiting) ::usleep(1000);
        }
        if (!exiting) ::_exit(13);
        if (!process_alive(init, before->start_time)) ::_exit(14);
        ::waitpid(member, nullptr, 0);  // the last of the namespace: init may finish
        int status = 0;
        if (::waitpid(init, &status, 0) != init || !WIFSIGNALED(status)) ::_exit(15);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(helper, &status, 0), helper);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(OuterId, MapsThroughTheLineThatHoldsTheId) {
    // rootless podman's: its user as 0, subordinate ids above.
    const char* map = "         0       1000          1\n         1     100000      65536\n";
    EXPECT_EQ(outer_id(map, 0), 1000u);
    EXPECT_EQ(outer_id(map, 1), 100000u);
    EXPECT_EQ(outer_id(map, 65536), 165535u);
    EXPECT_FALSE(outer_id(map, 65537));
    EXPECT_EQ(outer_id("0 0 4294967295\n", 1234), 1234u);
    EXPECT_FALSE(outer_id("", 0));
}

namespace {

// The child's side of LiveProcessUsage: told by a byte on `in`, says on `out` when done.
[[noreturn]] void usage_subject(int in, int out) {
    char c;
    std::vector<char> touched(8 << 20, 1);  // its peak: 8 MiB, every page written
    volatile uint64_t spin = 0;
    for (int i = 0; i < 2000000; ++i) spin = spin + static_cast<uint64_t>(i);
    if (::write(out, "r", 1) != 1 || ::read(in, &c, 1) != 1) ::_exit(1);
    pid_t grandchild = ::fork();
    if (grandchild == 0) ::_exit(0);
    ::waitpid(grandchild, nullptr, 0);
    if (::write(out, "c", 1) != 1 || ::read(in, &c, 1) != 1) ::_exit(1);
    ::_exit(touched[4096] == 1 ? 0 : 2);
}

}  // namespace

TEST(LiveProcessUsage, ItsOwnWhileItHasReapedNoChild) {
    int to_child[2], from_child[2];
    ASSERT_EQ(::pipe(to_child), 0);
    ASSERT_EQ(::pipe(from_child), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) usage_subject(to_child[0], from_child[1]);
    unique_fd go(to_child[1]), said(from_child[0]);
    ::close(to_child[0]);
    ::close(from_child[1]);
    auto live = open_live_process(unique_fd(sys::pidfd_open(child)));
    ASSERT_TRUE(live);
    EXPECT_EQ(live->pid, child);
    char c = 0;
    ASSERT_EQ(::read(said.get(), &c, 1), 1);
    auto usage = usage_so_far(*live);
    ASSERT_TRUE(usage);
    EXPECT_GT(usage->cpu_ns, 0u);
    EXPECT_GE(usage->peak_rss_bytes, uint64_t{8} << 20);
    // A reaped child's usage would be wait4's: none from here on.
    ASSERT_EQ(::write(go.get(), "g", 1), 1);
    ASSERT_EQ(::read(said.get(), &c, 1), 1);
    EXPECT_FALSE(usage_so_far(*live));
    ASSERT_EQ(::write(go.get(), "g", 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_FALSE(usage_so_far(*live));  // reaped: its pid may be another's
    EXPECT_EQ(pidfd_pid(live->pidfd.get()), -1);
}
