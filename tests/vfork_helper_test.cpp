#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/process/vfork_helper.hpp"

using namespace forkbox;

namespace {

struct Shared {
    std::string from_caller = "the caller's";
    std::string copied;
    std::atomic<int> written_after_release{0};
};

// Copies what it reads, releases the caller, then shows it shares the caller's memory.
void copy_release_exit(void* p, ReleaseCaller release) {
    auto* s = static_cast<Shared*>(p);
    s->copied = s->from_caller;
    release();
    s->written_after_release.store(7);
    _exit(3);
}

void die_before_release(void*, ReleaseCaller) { ::raise(SIGKILL); }

void exec_true(void*, ReleaseCaller release) {
    release();
    char* argv[] = {const_cast<char*>("true"), nullptr};
    ::execv("/bin/true", argv);
    _exit(127);
}

int wait_status(pid_t pid) {
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    return status;
}

}  // namespace

TEST(SharedMemoryChild, ReleasesTheCallerAfterCopyingAndSharesItsMemory) {
    Shared s;
    auto pid = clone_child_on_shared_memory(copy_release_exit, &s, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(s.copied, "the caller's");  // done before we were released
    int status = wait_status(*pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 3);
    EXPECT_EQ(s.written_after_release.load(), 7);  // our memory, not a copy of it
}

TEST(SharedMemoryChild, AChildThatDiesBeforeReleasingDoesNotHangTheCaller) {
    auto pid = clone_child_on_shared_memory(die_before_release, nullptr, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    int status = wait_status(*pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(SharedMemoryChild, ExecsAndIsBornInNewNamespaces) {
    auto pid = clone_child_on_shared_memory(exec_true, nullptr, CLONE_NEWUTS | CLONE_NEWNS, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    int status = wait_status(*pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SharedMemoryChild, AFailureOnTheHelperThreadClonesNothing) {
    bool cloned = false;
    auto pid = clone_child_on_shared_memory(
        [](void* p, ReleaseCaller) {
            *static_cast<bool*>(p) = true;
            _exit(0);
        },
        &cloned, 0, [] { return fail(EPERM, "refused in the helper"); });
    ASSERT_FALSE(pid);
    EXPECT_EQ(pid.error().errnum(), EPERM);
    EXPECT_NE(std::string(pid.error().what()).find("refused in the helper"), std::string::npos);
    EXPECT_FALSE(cloned);
}

TEST(SharedMemoryChild, AFailedCloneIsReported) {
    // clone refuses CLONE_THREAD without CLONE_SIGHAND (EINVAL).
    auto pid = clone_child_on_shared_memory(exec_true, nullptr, CLONE_NEWPID | CLONE_THREAD, nullptr);
    ASSERT_FALSE(pid);
    EXPECT_EQ(pid.error().errnum(), EINVAL);
}

namespace {

struct BornIn {
    bool born = false;
    char cgroup_line[512] = {};  // our /proc/self/cgroup's cgroup v2 line
};

void report_cgroup(void* p, ReleaseCaller release) {
    auto* b = static_cast<BornIn*>(p);
    b->born = release.born_in_cgroup();
    char text[4096] = {};
    int fd = ::open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? ::read(fd, text, sizeof text - 1) : -1;
    if (n > 0) {
        const char* line = std::strstr(text, "0::");
        if (line) std::strncpy(b->cgroup_line, line, std::strcspn(line, "\n"));
    }
    release();
    _exit(0);
}

}  // namespace

TEST(SharedMemoryChild, IsBornInTheCgroupGiven) {
#if !defined(__x86_64__)
    GTEST_SKIP() << "clone3 onto a stack of our own is built for x86_64 only";
#endif
    // Where cgroup2 is mounted (pure v2, or a hybrid host's unified hierarchy), as create sees it.
    auto layout = detect_cgroup_layout();
    const CgroupHierarchy* unified = layout ? layout->unified() : nullptr;
    std::string root = unified ? unified->mountpoint : "";
    if (root.empty() || ::geteuid() != 0) GTEST_SKIP() << "needs root and a cgroup2 mount";
    std::string name = "forkbox-unit-born-" + std::to_string(::getpid());
    std::string dir = root + "/" + name;
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << std::strerror(errno);
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    BornIn b;
    auto pid = clone_child_on_shared_memory(report_cgroup, &b, 0, nullptr, fd);
    ::close(fd);
    int status = pid ? wait_status(*pid) : -1;
    ::rmdir(dir.c_str());
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_TRUE(b.born);
    EXPECT_EQ(std::string(b.cgroup_line).substr(std::string(b.cgroup_line).rfind('/') + 1), name) << b.cgroup_line;
}

TEST(SharedMemoryChild, WithoutACgroupStaysInOurs) {
    BornIn b;
    auto pid = clone_child_on_shared_memory(report_cgroup, &b, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(WEXITSTATUS(wait_status(*pid)), 0);
    EXPECT_FALSE(b.born);
}

// A kernel without CLONE_INTO_CGROUP, or a directory it cannot place us in: clone(2), and the
// child is told to join the cgroup itself.
TEST(SharedMemoryChild, ACgroupTheKernelRefusesFallsBackToAPlainClone) {
    int not_a_cgroup = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(not_a_cgroup, 0);
    BornIn b;
    auto pid = clone_child_on_shared_memory(report_cgroup, &b, 0, nullptr, not_a_cgroup);
    ::close(not_a_cgroup);
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(WEXITSTATUS(wait_status(*pid)), 0);
    EXPECT_FALSE(b.born);
}

namespace {

struct WhereBorn {
    char net[64] = {};       // readlink of /proc/self/ns/net
    char cpus[256] = {};     // Cpus_allowed_list
};

// The "Cpus_allowed_list:" line of a status file, into out (no allocation: the child on
// shared memory calls it too).
void copy_cpus_line(const char* status, char* out, size_t size) {
    char text[4096] = {};
    int fd = ::open(status, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? ::read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (n > 0)
        if (const char* line = std::strstr(text, "Cpus_allowed_list:"))
            std::strncpy(out, line, std::min(size - 1, std::strcspn(line, "\n")));
}

void report_network_and_cpus(void* p, ReleaseCaller release) {
    auto* w = static_cast<WhereBorn*>(p);
    (void)!::readlink("/proc/self/ns/net", w->net, sizeof w->net - 1);
    copy_cpus_line("/proc/self/status", w->cpus, sizeof w->cpus);
    release();
    _exit(0);
}

size_t our_threads() {
    size_t n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') ++n;
        ::closedir(d);
    }
    return n;
}

std::string link_of(const std::string& path) {
    char buf[64] = {};
    return ::readlink(path.c_str(), buf, sizeof buf - 1) > 0 ? buf : "";
}

}  // namespace

// The helper made the network namespace ahead: the child is born in it (not ours), with our
// CPUs, not the one the helper was kept on while it made the namespace.
TEST(CloneHelper, AChildIsBornInTheNetworkNamespaceMadeAheadWithOurCpus) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    std::string ours = link_of("/proc/thread-self/ns/net");
    CloneHelper helper(CloneHelper::Options{.make_network_namespace = true});
    auto made = helper.take_network_namespace();
    ASSERT_TRUE(made) << made.error().what();
    ASSERT_TRUE(made->has_value());
    struct stat made_st {};
    ASSERT_EQ(::fstat((*made)->fd.get(), &made_st), 0);
    WhereBorn w;
    auto pid = helper.clone(report_network_and_cpus, &w, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(WEXITSTATUS(wait_status(*pid)), 0);
    EXPECT_NE(std::string(w.net), ours);
    EXPECT_EQ(std::string(w.net), "net:[" + std::to_string(made_st.st_ino) + "]");
    EXPECT_EQ(link_of("/proc/thread-self/ns/net"), ours);  // only the helper moved
    // Our own Cpus_allowed_list, from the thread that reads it.
    char ours_cpus[256] = {};
    copy_cpus_line("/proc/thread-self/status", ours_cpus, sizeof ours_cpus);
    ASSERT_NE(ours_cpus[0], '\0');
    EXPECT_EQ(std::string(w.cpus), std::string(ours_cpus));
}

// A fork's path: the namespace is taken, the helper clones nothing and ends with this object;
// the namespace lives on in the fd.
TEST(CloneHelper, ANamespaceTakenOutlivesAHelperThatClonedNothing) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    std::optional<OpenNamespace> net;
    {
        CloneHelper helper(CloneHelper::Options{.make_network_namespace = true});
        auto made = helper.take_network_namespace();
        ASSERT_TRUE(made) << made.error().what();
        net = std::move(*made);
        auto again = helper.take_network_namespace();
        ASSERT_TRUE(again);
        EXPECT_FALSE(again->has_value());  // taken once
    }
    ASSERT_TRUE(net);
    EXPECT_EQ(net->clone_flag, CLONE_NEWNET);
    struct stat st {};
    EXPECT_EQ(::fstat(net->fd.get(), &st), 0);
}

TEST(CloneHelper, WithoutANetworkNamespaceAskedForTakesNoneAndClonesInOurs) {
    std::string ours = link_of("/proc/thread-self/ns/net");
    CloneHelper helper(CloneHelper::Options{});
    auto made = helper.take_network_namespace();
    ASSERT_TRUE(made) << made.error().what();
    EXPECT_FALSE(made->has_value());
    WhereBorn w;
    auto pid = helper.clone(report_network_and_cpus, &w, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(WEXITSTATUS(wait_status(*pid)), 0);
    EXPECT_EQ(std::string(w.net), ours);
    auto twice = helper.clone(report_network_and_cpus, &w, 0, nullptr);
    EXPECT_FALSE(twice);
}

namespace {

struct WhileCloning {
    std::atomic<int> caller_worked{0};
    int saw_caller_work = 0;
};

// Waits (up to ~5 s) for the caller's work before releasing it: seen only if that work runs
// while we are still cloned and unreleased.
void wait_for_caller_work(void* p, ReleaseCaller release) {
    auto* w = static_cast<WhileCloning*>(p);
    for (int i = 0; i < 5000 && !w->caller_worked.load(); ++i) ::usleep(1000);
    w->saw_caller_work = w->caller_worked.load();
    release();
    _exit(0);
}

}  // namespace

TEST(CloneHelper, WorkWhileCloningRunsOnTheCallerBeforeTheChildReleasesIt) {
    WhileCloning w;
    pid_t caller = static_cast<pid_t>(::syscall(SYS_gettid));
    pid_t ran_on = 0;
    CloneHelper helper(CloneHelper::Options{});
    auto pid = helper.clone(wait_for_caller_work, &w, 0, nullptr, -1, [&] {
        ran_on = static_cast<pid_t>(::syscall(SYS_gettid));
        w.caller_worked.store(1);
    });
    ASSERT_TRUE(pid) << pid.error().what();
    EXPECT_EQ(ran_on, caller);
    EXPECT_EQ(w.saw_caller_work, 1);
    int status = wait_status(*pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

namespace {

// Whether any page of [at, at + bytes) is mapped (msync fails with ENOMEM where none is).
bool mapped(const void* at, size_t bytes) {
    return ::msync(const_cast<void*>(at), bytes, MS_ASYNC) == 0 || errno != ENOMEM;
}

const void* stack_once_mapped(const CloneHelper& helper) {
    for (int i = 0; i < 2000; ++i) {
        if (const void* at = helper.child_stack()) return at;
        ::usleep(1000);
    }
    return nullptr;
}

bool unmapped_soon(const void* at, size_t bytes) {
    for (int i = 0; i < 2000; ++i) {
        if (!mapped(at, bytes)) return true;
        ::usleep(1000);
    }
    return false;
}

struct StackSeen {
    uintptr_t local = 0;
};

void note_stack_release_exit(void* p, ReleaseCaller release) {
    int here = 0;
    static_cast<StackSeen*>(p)->local = reinterpret_cast<uintptr_t>(&here);
    release();
    _exit(3);
}

}  // namespace

TEST(CloneHelper, AChildPreparedForIsClonedOnTheStackMappedAhead) {
    StackSeen seen;
    CloneHelper helper(CloneHelper::Options{});
    helper.prepare_child();
    const void* stack = stack_once_mapped(helper);
    ASSERT_NE(stack, nullptr) << "prepare_child mapped no stack";
    size_t bytes = CloneHelper::child_stack_bytes();
    EXPECT_TRUE(mapped(stack, bytes));
    auto pid = helper.clone(note_stack_release_exit, &seen, 0, nullptr);
    ASSERT_TRUE(pid) << pid.error().what();
    auto from = reinterpret_cast<uintptr_t>(stack);
    EXPECT_GE(seen.local, from);
    EXPECT_LT(seen.local, from + bytes);
    EXPECT_EQ(helper.child_stack(), stack);  // the same, not a second one
    int status = wait_status(*pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 3);
    // Once the child is gone, the helper unmaps its stack.
    EXPECT_TRUE(unmapped_soon(stack, bytes));
}

TEST(CloneHelper, AHelperPreparedButNeverAskedToCloneUnmapsTheStack) {
    const void* stack = nullptr;
    {
        CloneHelper helper(CloneHelper::Options{.make_network_namespace = ::geteuid() == 0});
        helper.prepare_child();
        helper.prepare_child();  // once is enough
        stack = stack_once_mapped(helper);
        ASSERT_NE(stack, nullptr) << "prepare_child mapped no stack";
    }
    // The destructor waited for the helper, which unmapped it.
    EXPECT_FALSE(mapped(stack, CloneHelper::child_stack_bytes()));
}

TEST(CloneHelper, AHelperNeverAskedEndsWithItsObject) {
    // Earlier tests' helpers, detached, end once their child is gone: not ours to count.
    for (int i = 0; i < 2000 && our_threads() > 1; ++i) ::usleep(1000);
    size_t before = our_threads();
    for (int i = 0; i < 20; ++i) {
        CloneHelper helper(CloneHelper::Options{.make_network_namespace = i % 2 == 0});
        EXPECT_EQ(our_threads(), before + 1);
    }
    // Each destructor ended its thread and waited for it.
    EXPECT_EQ(our_threads(), before);
}

// A helper whose thread cannot start (here a v1 pids limit reached) makes no namespace, so a
// fork's clone makes it, and a clone by the helper says why it has none.
TEST(CloneHelper, WithoutItsThreadTakesNoNamespaceAndReportsTheCloneFailure) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    std::string dir = "/sys/fs/cgroup/pids/forkbox-unit-helper-" + std::to_string(::getpid());
    if (::mkdir(dir.c_str(), 0755) != 0) GTEST_SKIP() << "no v1 pids hierarchy to limit us with";
    pid_t child = ::fork();
    if (child == 0) {
        auto put = [](const std::string& path, const std::string& text) {
            int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
            bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
            if (fd >= 0) ::close(fd);
            return ok;
        };
        if (!put(dir + "/cgroup.procs", "0") || !put(dir + "/pids.max", "1")) _exit(10);
        CloneHelper helper(CloneHelper::Options{.make_network_namespace = true});
        auto made = helper.take_network_namespace();
        if (!made) _exit(11);
        if (made->has_value()) _exit(12);
        auto pid = helper.clone(exec_true, nullptr, 0, nullptr);
        if (pid) _exit(13);
        _exit(pid.error().errnum() == EAGAIN ? 0 : 14);
    }
    int status = wait_status(child);
    ::rmdir(dir.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}
