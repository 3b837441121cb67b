#include "libforkbox/seccomp/evaluate.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <array>
#include <string>
#include <vector>

#include "libforkbox/seccomp/seccomp.hpp"
#include "tests/seccomp_rules.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

using forkbox::test_util::rule;

std::vector<sock_filter> compiled(std::string default_action, std::vector<SeccompSyscall> syscalls) {
    Seccomp s;
    s.default_action = std::move(default_action);
    s.syscalls = std::move(syscalls);
    auto p = compile_seccomp(s);
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().what());
    return p ? p->bpf : std::vector<sock_filter>{};
}

uint32_t action_of(const std::vector<sock_filter>& bpf, int nr, std::array<uint64_t, 5> args = {}) {
    return seccomp_evaluate(bpf, native_seccomp_data(nr, args)) & SECCOMP_RET_ACTION_FULL;
}

}  // namespace

TEST(SeccompEvaluate, UnlistedSyscallGetsTheDefaultAction) {
    auto bpf = compiled("SCMP_ACT_ALLOW", {rule({"mkdir"}, "SCMP_ACT_ERRNO")});
    EXPECT_EQ(action_of(bpf, SYS_execveat), unsigned(SECCOMP_RET_ALLOW));
    EXPECT_EQ(action_of(bpf, SYS_mkdir), unsigned(SECCOMP_RET_ERRNO));
}

TEST(SeccompEvaluate, ErrnoActionCarriesItsErrno) {
    SeccompSyscall r = rule({"execveat"}, "SCMP_ACT_ERRNO");
    r.errno_ret = ENOSYS;
    auto bpf = compiled("SCMP_ACT_ALLOW", {r});
    EXPECT_EQ(seccomp_evaluate(bpf, native_seccomp_data(SYS_execveat, {})),
              unsigned(SECCOMP_RET_ERRNO | ENOSYS));
    EXPECT_FALSE(seccomp_allows(bpf, native_seccomp_data(SYS_execveat, {})));
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(SYS_execve, {})));
}

TEST(SeccompEvaluate, AllowListWithoutExecveatKillsIt) {
    auto bpf = compiled("SCMP_ACT_KILL_PROCESS", {rule({"execve", "write", "exit_group"}, "SCMP_ACT_ALLOW")});
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(SYS_execve, {})));
    EXPECT_EQ(action_of(bpf, SYS_execveat), unsigned(SECCOMP_RET_KILL_PROCESS));
}

TEST(SeccompEvaluate, ArgumentConditionsAreCompared) {
    // execveat allowed only with AT_EMPTY_PATH (0x1000) in its flags (arg 4).
    auto bpf = compiled("SCMP_ACT_ERRNO", {rule({"execveat"}, "SCMP_ACT_ALLOW",
                                                {SeccompArg{4, 0x1000, 0, "SCMP_CMP_EQ"}})});
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(SYS_execveat, std::array<uint64_t, 5>{3, 0, 0, 0, 0x1000})));
    EXPECT_FALSE(seccomp_allows(bpf, native_seccomp_data(SYS_execveat, std::array<uint64_t, 5>{3, 0, 0, 0, 0})));
    // 64-bit arguments: the high word counts too.
    EXPECT_FALSE(seccomp_allows(bpf, native_seccomp_data(SYS_execveat,
                                                         std::array<uint64_t, 5>{3, 0, 0, 0, (1ULL << 32) | 0x1000})));
}

TEST(SeccompEvaluate, LogCountsAsAllowedTrapDoesNot) {
    auto bpf = compiled("SCMP_ACT_LOG", {rule({"execveat"}, "SCMP_ACT_TRAP")});
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(SYS_execve, {})));
    EXPECT_FALSE(seccomp_allows(bpf, native_seccomp_data(SYS_execveat, {})));
}

TEST(SeccompEvaluate, AnotherArchitectureIsNotTheNativeOne) {
    auto bpf = compiled("SCMP_ACT_ALLOW", {});
    seccomp_data d = native_seccomp_data(SYS_execveat, {});
    d.arch = 0x12345678;  // libseccomp kills unknown arches (SCMP_FLTATR_ACT_BADARCH)
    EXPECT_FALSE(seccomp_allows(bpf, d));
}

TEST(SeccompEvaluate, MalformedProgramsAreRefused) {
    sock_filter ok = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    EXPECT_TRUE(seccomp_allows(std::vector<sock_filter>{ok}, native_seccomp_data(0, {})));
    // No program, no RET at the end, a jump past the end, a load outside seccomp_data.
    EXPECT_FALSE(seccomp_allows(std::vector<sock_filter>{}, native_seccomp_data(0, {})));
    EXPECT_FALSE(seccomp_allows(std::vector<sock_filter>{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)},
                                native_seccomp_data(0, {})));
    EXPECT_FALSE(seccomp_allows(std::vector<sock_filter>{BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0), ok},
                                native_seccomp_data(0, {})));
    EXPECT_FALSE(seccomp_allows(std::vector<sock_filter>{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64), ok},
                                native_seccomp_data(0, {})));
}

// Found by tests/fuzz/seccomp_compact.cpp: the bounds check added 4 to the 32-bit offset,
// so 0xfffffffc wrapped to 0, passed, and the load read 4 GiB past seccomp_data.
TEST(SeccompEvaluate, LoadAtAnOffsetThatWrapsIsRefused) {
    sock_filter ok = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    for (uint32_t k : {0xfffffffcu, 0xfffffff8u, 0x80000000u})
        EXPECT_EQ(seccomp_evaluate(std::vector<sock_filter>{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, k), ok},
                                   native_seccomp_data(0, {})),
                  uint32_t{SECCOMP_RET_KILL_PROCESS})
            << k;
}

TEST(SeccompEvaluate, ScratchMemoryAndAluWork) {
    // A = nr; M[0] = A; A = 7; A = A + M[0] via X; return ALLOW when nr + 7 == 10.
    std::vector<sock_filter> bpf{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
        BPF_STMT(BPF_ST, 0),
        BPF_STMT(BPF_LDX | BPF_MEM, 0),
        BPF_STMT(BPF_LD | BPF_IMM, 7),
        BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 10, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
    };
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(3, {})));
    EXPECT_FALSE(seccomp_allows(bpf, native_seccomp_data(4, {})));
}

TEST(SeccompAllowsAnyArguments, UnconditionalAllowIsConstant) {
    auto bpf = compiled("SCMP_ACT_ERRNO", {rule({"openat", "write"}, "SCMP_ACT_ALLOW")});
    EXPECT_TRUE(seccomp_allows_any_arguments(bpf, SYS_openat));
    EXPECT_TRUE(seccomp_allows_any_arguments(bpf, SYS_write));
    EXPECT_FALSE(seccomp_allows_any_arguments(bpf, SYS_close));  // the default: ERRNO
}

TEST(SeccompAllowsAnyArguments, ArgumentConditionsAreNotConstant) {
    SeccompArg only_fd_1;
    only_fd_1.index = 0;
    only_fd_1.value = 1;
    only_fd_1.op = "SCMP_CMP_EQ";
    auto bpf = compiled("SCMP_ACT_ERRNO", {rule({"write"}, "SCMP_ACT_ALLOW", {only_fd_1})});
    // It allows write(1, ...) but not every write: not a constant allow.
    EXPECT_TRUE(seccomp_allows(bpf, native_seccomp_data(SYS_write, std::array<uint64_t, 1>{1})));
    EXPECT_FALSE(seccomp_allows_any_arguments(bpf, SYS_write));
}

TEST(SeccompAllowsAnyArguments, LogAndDefaultAllowOfOtherSyscalls) {
    // LOG writes an audit record: observable, so not a plain allow.
    auto bpf = compiled("SCMP_ACT_ALLOW", {rule({"close"}, "SCMP_ACT_LOG")});
    EXPECT_FALSE(seccomp_allows_any_arguments(bpf, SYS_close));
    EXPECT_TRUE(seccomp_allows_any_arguments(bpf, SYS_openat));
}

TEST(SeccompAllowsAnyArguments, MalformedProgramIsRefused) {
    std::vector<sock_filter> no_return{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)};
    EXPECT_FALSE(seccomp_allows_any_arguments(no_return, SYS_write));
}
