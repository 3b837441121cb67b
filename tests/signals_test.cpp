#include <gtest/gtest.h>

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libforkbox/process/signals.hpp"

using namespace forkbox;

namespace {

void on_usr1(int) {}

void* handler_of(int sig) {
    struct sigaction sa = {};
    EXPECT_EQ(::sigaction(sig, nullptr, &sa), 0);
    return reinterpret_cast<void*>(sa.sa_handler);
}

// Saves and restores the dispositions a test changes, so the test binary is left as found.
class SignalDispositions : public ::testing::Test {
  protected:
    void SetUp() override {
        ::sigaction(SIGPIPE, nullptr, &pipe_);
        ::sigaction(SIGUSR1, nullptr, &usr1_);
        ::sigaction(SIGCHLD, nullptr, &chld_);
        ::sigaction(SIGRTMIN + 1, nullptr, &rt_);
    }
    void TearDown() override {
        ::sigaction(SIGPIPE, &pipe_, nullptr);
        ::sigaction(SIGUSR1, &usr1_, nullptr);
        ::sigaction(SIGCHLD, &chld_, nullptr);
        ::sigaction(SIGRTMIN + 1, &rt_, nullptr);
    }
    struct sigaction pipe_ = {}, usr1_ = {}, chld_ = {}, rt_ = {};
};

}  // namespace

TEST_F(SignalDispositions, IgnoredSignalsGoBackToDefault) {
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGCHLD, SIG_IGN);
    ::signal(SIGRTMIN + 1, SIG_IGN);
    reset_signal_dispositions();
    EXPECT_EQ(handler_of(SIGPIPE), reinterpret_cast<void*>(SIG_DFL));
    EXPECT_EQ(handler_of(SIGCHLD), reinterpret_cast<void*>(SIG_DFL));
    EXPECT_EQ(handler_of(SIGRTMIN + 1), reinterpret_cast<void*>(SIG_DFL));
}

TEST_F(SignalDispositions, HandledSignalsGoBackToDefault) {
    ::signal(SIGUSR1, on_usr1);
    reset_signal_dispositions();
    EXPECT_EQ(handler_of(SIGUSR1), reinterpret_cast<void*>(SIG_DFL));
}

// glibc refuses to touch signals 32 and 33, but a caller may have them ignored (podman's
// conmon chain does): the reset must reach them through the kernel. In a child, so the
// test binary's own (glibc-internal) handlers stay as they were.
TEST(SignalReset, ReachesTheSignalsGlibcKeeps) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        struct {
            void (*handler)(int);
            unsigned long flags;
            void (*restorer)();
            unsigned long mask;
        } ign{SIG_IGN, 0, nullptr, 0}, now{};
        if (::syscall(SYS_rt_sigaction, 32, &ign, nullptr, sizeof ign.mask) != 0) _exit(2);
        reset_signal_dispositions();
        if (::syscall(SYS_rt_sigaction, 32, nullptr, &now, sizeof now.mask) != 0) _exit(3);
        _exit(now.handler == SIG_DFL ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A container's init until its exec: the signals that end runc's init end it with 128+N (it
// is pid 1, where the default action would ignore them); the others are left at their default.
TEST(SignalReset, InitExitsWith128PlusNOnTerminationSignals) {
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT}) {
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::signal(SIGCHLD, SIG_IGN);
            reset_signal_dispositions(UntilExec::ExitOnTermination);
            for (int other : {SIGCHLD, SIGUSR1, SIGALRM, SIGRTMIN + 3}) {
                struct sigaction now {};
                ::sigaction(other, nullptr, &now);
                if (now.sa_handler != SIG_DFL) _exit(2);
            }
            ::raise(sig);
            _exit(3);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig) << "signal " << sig << ": " << status;
    }
}

TEST(SignalReset, TerminationSignalsBlockAndUnblock) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        reset_signal_dispositions(UntilExec::ExitOnTermination);
        block_termination_signals(true);
        ::raise(SIGTERM);  // pending
        sigset_t pending;
        sigpending(&pending);
        if (!sigismember(&pending, SIGTERM)) _exit(2);
        block_termination_signals(false);
        _exit(3);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}
