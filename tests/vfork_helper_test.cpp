#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

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
