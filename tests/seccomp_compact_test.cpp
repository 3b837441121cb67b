#include "libforkbox/seccomp/compact.hpp"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <sys/syscall.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "libforkbox/seccomp/evaluate.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/default_seccomp.hpp"
#include "tests/seccomp_rules.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

using forkbox::test_util::rule;

Seccomp profile(std::string default_action, std::vector<SeccompSyscall> syscalls,
                std::vector<std::string> arches = {}) {
    Seccomp s;
    s.default_action = std::move(default_action);
    s.syscalls = std::move(syscalls);
    s.architectures = std::move(arches);
    return s;
}

std::vector<sock_filter> exported(const Seccomp& s) {
    auto p = compile_seccomp(s, SeccompLayout::Exported);
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().what());
    return p ? p->bpf : std::vector<sock_filter>{};
}

// Argument vectors that take each branch of the profiles' argument rules.
const std::vector<std::array<uint64_t, 6>> kArgumentVectors = {
    {0, 0, 0, 0, 0, 0},
    {~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL},
    {0x8, 1, 2, 3, 4, 5},                    // personality(PER_LINUX32)
    {0x20008, 0, 0, 0, 0, 0},                // personality(UNAME26 | PER_LINUX32)
    {0xffffffff, 0, 0, 0, 0, 0},             // personality query
    {0x10000000, 0, 0, 0, 0, 0},             // clone(CLONE_NEWUSER)
    {0x11, 0x7E020000, 0x1234, 0, 0, 0},     // clone(SIGCHLD), namespace bits in arg 1
    {1ULL << 32 | 0x8, 0x1000, 0, 0, 0, 1},  // high word set
};

// Every syscall number of 0..1100 and the x32 range, for each arch plus an unknown one.
void expect_same_results(const std::vector<sock_filter>& original,
                         const std::vector<sock_filter>& compact) {
    std::vector<uint32_t> ranges;
    for (uint32_t nr = 0; nr <= 1100; ++nr) ranges.push_back(nr);
    for (uint32_t nr = 0x40000000; nr <= 0x40000400; ++nr) ranges.push_back(nr);
    int mismatches = 0;
    for (uint32_t arch : {uint32_t{AUDIT_ARCH_X86_64}, uint32_t{AUDIT_ARCH_I386},
                          uint32_t{AUDIT_ARCH_AARCH64}, uint32_t{AUDIT_ARCH_ARM}, 0x12345678u}) {
        for (uint32_t nr : ranges) {
            for (const auto& args : kArgumentVectors) {
                seccomp_data d{};
                d.nr = static_cast<int>(nr);
                d.arch = arch;
                d.instruction_pointer = args[1] * 3;
                for (size_t i = 0; i < 6; ++i) d.args[i] = args[i];
                uint32_t want = seccomp_evaluate(original, d);
                uint32_t got = seccomp_evaluate(compact, d);
                if (want != got && ++mismatches <= 5)
                    ADD_FAILURE() << "arch " << std::hex << arch << " nr " << nr << " arg0 " << args[0]
                                  << ": original " << want << ", compact " << got;
            }
        }
    }
    EXPECT_EQ(mismatches, 0);
}

// Compacts the exported program of `s`, checks it against the original and returns it.
std::vector<sock_filter> compact_checked(const Seccomp& s) {
    std::vector<sock_filter> original = exported(s);
    std::vector<sock_filter> compact = compact_seccomp_program(original);
    // Every profile here has runs of numbers with one outcome to gain from.
    EXPECT_LT(compact.size(), original.size());
    std::printf("%zu instructions exported, %zu compact\n", original.size(), compact.size());
    expect_same_results(original, compact);
    return compact;
}

SeccompArg arg(uint32_t index, uint64_t value, std::string op, uint64_t value_two = 0) {
    return SeccompArg{index, value, value_two, std::move(op)};
}

bool unchanged(const std::vector<sock_filter>& program) {
    std::vector<sock_filter> out = compact_seccomp_program(program);
    return out.size() == program.size() &&
           std::equal(out.begin(), out.end(), program.begin(), [](const sock_filter& a, const sock_filter& b) {
               return a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k;
           });
}

}  // namespace

TEST(SeccompCompact, DefaultProfileIsShorterAndMeansTheSame) {
    Seccomp s = default_seccomp({"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
                                native_seccomp_arch_family());
    std::vector<sock_filter> original = exported(s);
    std::vector<sock_filter> compact = compact_checked(s);
    std::printf("default profile: %zu instructions exported, %zu compact\n", original.size(),
                compact.size());
    EXPECT_LT(compact.size(), original.size());
}

TEST(SeccompCompact, DefaultProfileWithSysAdminMeansTheSame) {
    Seccomp s = default_seccomp({"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_BOOT"},
                                native_seccomp_arch_family());
    EXPECT_LT(compact_checked(s).size(), exported(s).size());
}

TEST(SeccompCompact, CompileSeccompHandsOnTheCompactProgram) {
    Seccomp s = default_seccomp({"CAP_KILL"}, native_seccomp_arch_family());
    auto p = compile_seccomp(s);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->bpf.size(), compact_seccomp_program(exported(s)).size());
    EXPECT_LT(p->bpf.size(), exported(s).size());
}

TEST(SeccompCompact, ArgumentConditionsAndEveryActionMeanTheSame) {
    // The default profile (personality, socket and clone argument rules) plus one rule per
    // action on syscalls it does not allow.
    Seccomp s = default_seccomp({"CAP_KILL"}, native_seccomp_arch_family());
    SeccompSyscall enosys = rule({"init_module", "finit_module"}, "SCMP_ACT_ERRNO");
    enosys.errno_ret = ENOSYS;
    for (SeccompSyscall r :
         {rule({"kexec_load"}, "SCMP_ACT_KILL"), rule({"ptrace"}, "SCMP_ACT_KILL_PROCESS"),
          rule({"reboot"}, "SCMP_ACT_TRAP"), rule({"mount"}, "SCMP_ACT_LOG"),
          rule({"umount2"}, "SCMP_ACT_TRACE"), rule({"swapon"}, "SCMP_ACT_NOTIFY"), enosys,
          rule({"ioctl"}, "SCMP_ACT_ALLOW", {arg(1, 0x5400, "SCMP_CMP_GE"), arg(2, 7, "SCMP_CMP_NE")}),
          rule({"setns"}, "SCMP_ACT_ALLOW", {arg(1, 0x10000000, "SCMP_CMP_MASKED_EQ", 0)}),
          rule({"syslog"}, "SCMP_ACT_ALLOW", {arg(0, 3, "SCMP_CMP_LE")})})
        s.syscalls.push_back(r);
    compact_checked(s);
}

TEST(SeccompCompact, DefaultAllowDenyListMeansTheSame) {
    // 165..185 on x86_64: one range there, scattered on the other arches.
    compact_checked(profile(
        "SCMP_ACT_ALLOW",
        {rule({"mount", "umount2", "swapon", "swapoff", "reboot", "sethostname", "setdomainname",
               "iopl", "ioperm", "init_module", "delete_module", "quotactl", "pivot_root",
               "kexec_load", "open_by_handle_at", "bpf", "perf_event_open", "fsopen", "fsmount",
               "move_mount", "open_tree", "fspick", "fsconfig"},
              "SCMP_ACT_ERRNO"),
         rule({"socket"}, "SCMP_ACT_ERRNO", {arg(0, 16, "SCMP_CMP_EQ")}),
         rule({"unshare"}, "SCMP_ACT_KILL_PROCESS",
              {arg(0, 0x10000000, "SCMP_CMP_MASKED_EQ", 0x10000000)})},
        {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"}));
}

TEST(SeccompCompact, NativeArchOnlyMeansTheSame) {
    std::vector<std::string> many;
    for (const char* name : {"read", "write", "open", "close", "stat", "fstat", "lstat", "poll", "lseek",
                             "mmap", "mprotect", "munmap", "brk", "rt_sigaction", "getpid", "futex"})
        many.push_back(name);
    compact_checked(profile("SCMP_ACT_KILL_PROCESS", {rule(many, "SCMP_ACT_ALLOW")}));
}

TEST(SeccompCompact, ScratchMemoryIsLeftAlone) {
    // nr is kept in M[0] across the arch check: the rewrite would not recreate it.
    std::vector<sock_filter> program{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
        BPF_STMT(BPF_ST, 0),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_MEM, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    EXPECT_TRUE(unchanged(program));
}

// Appends: syscalls 0..7 (as A holds them) allowed one JEQ each, anything else EPERM.
static void allow_first_eight_else_errno(std::vector<sock_filter>& program) {
    for (int nr = 0; nr < 8; ++nr) {
        program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
        program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    }
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1));
}

TEST(SeccompCompact, JsetOnTheSyscallNumberIsLeftAlone) {
    // x32 test by bit: the value set of nr is not a union of ranges of compared constants.
    std::vector<sock_filter> program{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x40000000, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    allow_first_eight_else_errno(program);
    EXPECT_TRUE(unchanged(program));
}

TEST(SeccompCompact, ArithmeticOnTheSyscallNumberIsLeftAlone) {
    std::vector<sock_filter> program{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff),
    };
    allow_first_eight_else_errno(program);
    EXPECT_TRUE(unchanged(program));
}

TEST(SeccompCompact, ProgramsThatCannotGetShorterAreLeftAlone) {
    std::vector<sock_filter> allow{BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    EXPECT_TRUE(unchanged(allow));
    std::vector<sock_filter> one_rule{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mkdir, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    EXPECT_TRUE(unchanged(one_rule));
    EXPECT_TRUE(compact_seccomp_program(std::vector<sock_filter>{}).empty());
}

TEST(SeccompCompact, ConsecutiveNumbersBecomeOneRange) {
    // ALLOW for 0..99 one jeq at a time: a range needs only two comparisons.
    std::vector<sock_filter> program{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)};
    for (uint32_t nr = 0; nr < 100; ++nr) {
        program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
        program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    }
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1));
    std::vector<sock_filter> compact = compact_seccomp_program(program);
    EXPECT_LE(compact.size(), 4u);
    expect_same_results(program, compact);
}

TEST(SeccompCompact, ManyRunsNeedFarJumps) {
    // 300 pairs of numbers go to an argument check at the far end: 600 runs, more than
    // 8-bit jumps reach.
    std::vector<sock_filter> program{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)};
    for (uint32_t pair = 0; pair < 300; ++pair) {
        for (uint32_t nr : {4 * pair, 4 * pair + 1}) {
            program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
            program.push_back(BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0));  // to the load, set below
        }
    }
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1));
    size_t load = program.size();
    for (size_t i = 2; i < load; i += 2) program[i].k = static_cast<uint32_t>(load - i - 1);
    program.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x8, 0, 1));
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 3));
    std::vector<sock_filter> compact = compact_seccomp_program(program);
    std::printf("600 runs: %zu instructions, %zu compact\n", program.size(), compact.size());
    EXPECT_LT(compact.size(), program.size());
    expect_same_results(program, compact);
}
