#include "libforkbox/seccomp/seccomp.hpp"

#include <linux/audit.h>
#include <sys/syscall.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>
#include "libforkbox/seccomp/evaluate.hpp"
#include "tests/seccomp_rules.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

using forkbox::test_util::rule;

SeccompArg arg(uint32_t index, std::string op, uint64_t value, uint64_t value_two = 0) {
    return SeccompArg{index, value, value_two, std::move(op)};
}

Seccomp allow_by_default(std::vector<SeccompSyscall> syscalls) {
    Seccomp s;
    s.default_action = "SCMP_ACT_ALLOW";
    s.syscalls = std::move(syscalls);
    return s;
}

SeccompPlan plan_of(const Seccomp& s) {
    auto p = plan_seccomp(s);
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().what());
    return p ? *p : SeccompPlan{};
}

std::string error_of(const Seccomp& s) {
    auto p = plan_seccomp(s);
    EXPECT_FALSE(p.has_value()) << "planned";
    return p ? std::string() : p.error().what();
}

}  // namespace

TEST(SeccompPlan, ArgsOnDifferentIndexesFormOneRule) {
    auto p = plan_of(allow_by_default({rule({"mkdirat"}, "SCMP_ACT_ERRNO",
                                            {arg(0, "SCMP_CMP_EQ", 3), arg(2, "SCMP_CMP_GT", 7)})}));
    ASSERT_EQ(p.rules.size(), 1u);
    ASSERT_EQ(p.rules[0].conditions.size(), 2u);
    EXPECT_EQ(p.rules[0].conditions[0].arg, 0u);
    EXPECT_EQ(p.rules[0].conditions[0].op, SCMP_CMP_EQ);
    EXPECT_EQ(p.rules[0].conditions[0].datum_a, 3u);
    EXPECT_EQ(p.rules[0].conditions[1].arg, 2u);
    EXPECT_EQ(p.rules[0].conditions[1].op, SCMP_CMP_GT);
}

TEST(SeccompPlan, ArgsSharingAnIndexEachBecomeTheirOwnRule) {
    // runc: once any index repeats, every arg is a rule of its own, the unique one included.
    auto p = plan_of(allow_by_default(
        {rule({"personality"}, "SCMP_ACT_ERRNO",
              {arg(0, "SCMP_CMP_EQ", 0), arg(0, "SCMP_CMP_EQ", 8), arg(1, "SCMP_CMP_NE", 5)})}));
    ASSERT_EQ(p.rules.size(), 3u);
    for (const auto& r : p.rules) EXPECT_EQ(r.conditions.size(), 1u);
    EXPECT_EQ(p.rules[0].conditions[0].datum_a, 0u);
    EXPECT_EQ(p.rules[1].conditions[0].datum_a, 8u);
    EXPECT_EQ(p.rules[2].conditions[0].arg, 1u);
}

TEST(SeccompPlan, MaskedEqualTakesTheMaskFromValueAndTheDatumFromValueTwo) {
    auto p = plan_of(allow_by_default(
        {rule({"clone"}, "SCMP_ACT_ERRNO", {arg(0, "SCMP_CMP_MASKED_EQ", 0x7E020000, 0x10)})}));
    ASSERT_EQ(p.rules.size(), 1u);
    const auto& c = p.rules[0].conditions.at(0);
    EXPECT_EQ(c.op, SCMP_CMP_MASKED_EQ);
    EXPECT_EQ(c.datum_a, 0x7E020000u);
    EXPECT_EQ(c.datum_b, 0x10u);
}

TEST(SeccompPlan, EveryNameOfAnEntryGetsItsRules) {
    auto p = plan_of(allow_by_default({rule({"mkdir", "mkdirat"}, "SCMP_ACT_ERRNO")}));
    ASSERT_EQ(p.rules.size(), 2u);
    EXPECT_EQ(p.rules[0].syscall, SCMP_SYS(mkdir));
    EXPECT_EQ(p.rules[1].syscall, SCMP_SYS(mkdirat));
    EXPECT_TRUE(p.rules[0].conditions.empty());
}

TEST(SeccompPlan, UnknownSyscallNamesAreSkipped) {
    auto p = plan_of(allow_by_default(
        {rule({"no_such_syscall", "mkdirat", "another_future_syscall"}, "SCMP_ACT_ERRNO")}));
    ASSERT_EQ(p.rules.size(), 1u);
    EXPECT_EQ(p.rules[0].name, "mkdirat");
}

TEST(SeccompPlan, RuleWithTheDefaultActionIsSkipped) {
    Seccomp s = allow_by_default({rule({"getpid"}, "SCMP_ACT_ALLOW"),
                                  rule({"mkdir"}, "SCMP_ACT_ERRNO")});
    auto p = plan_of(s);
    ASSERT_EQ(p.rules.size(), 1u);
    EXPECT_EQ(p.rules[0].name, "mkdir");
}

TEST(SeccompPlan, RuleIsComparedWithTheDefaultAfterErrnoResolution) {
    Seccomp s;
    s.default_action = "SCMP_ACT_ERRNO";  // EPERM
    s.syscalls = {rule({"mkdir"}, "SCMP_ACT_ERRNO"), rule({"getcwd"}, "SCMP_ACT_ERRNO"),
                  rule({"rmdir"}, "SCMP_ACT_ERRNO"), rule({"getpid"}, "SCMP_ACT_ALLOW")};
    s.syscalls[1].errno_ret = EPERM;   // same as the default: skipped
    s.syscalls[2].errno_ret = ENOSYS;  // differs: kept
    auto p = plan_of(s);
    ASSERT_EQ(p.rules.size(), 2u);
    EXPECT_EQ(p.rules[0].name, "rmdir");
    EXPECT_EQ(p.rules[1].name, "getpid");
}

TEST(SeccompPlan, ErrnoRetDefaultsToEperm) {
    Seccomp s = allow_by_default({rule({"mkdir"}, "SCMP_ACT_ERRNO"),
                                  rule({"rmdir"}, "SCMP_ACT_TRACE"),
                                  rule({"chdir"}, "SCMP_ACT_ERRNO")});
    s.syscalls[2].errno_ret = 38;
    auto p = plan_of(s);
    ASSERT_EQ(p.rules.size(), 3u);
    EXPECT_EQ(p.rules[0].action, SCMP_ACT_ERRNO(EPERM));
    EXPECT_EQ(p.rules[1].action, SCMP_ACT_TRACE(EPERM));
    EXPECT_EQ(p.rules[2].action, SCMP_ACT_ERRNO(38));
}

TEST(SeccompPlan, DefaultErrnoRetAppliesToTheDefaultAction) {
    Seccomp s;
    s.default_action = "SCMP_ACT_ERRNO";
    s.default_errno_ret = ENOSYS;
    EXPECT_EQ(plan_of(s).default_action, SCMP_ACT_ERRNO(ENOSYS));
    s.default_errno_ret.reset();
    EXPECT_EQ(plan_of(s).default_action, SCMP_ACT_ERRNO(EPERM));
}

TEST(SeccompPlan, KillMeansKillThread) {
    auto p = plan_of(allow_by_default({rule({"mkdir"}, "SCMP_ACT_KILL"),
                                       rule({"rmdir"}, "SCMP_ACT_KILL_PROCESS")}));
    ASSERT_EQ(p.rules.size(), 2u);
    EXPECT_EQ(p.rules[0].action, SCMP_ACT_KILL_THREAD);
    EXPECT_EQ(p.rules[1].action, SCMP_ACT_KILL_PROCESS);
}

TEST(SeccompPlan, UnknownActionIsAnError) {
    EXPECT_NE(error_of(allow_by_default({rule({"mkdir"}, "SCMP_ACT_EXPLODE")}))
                  .find("syscalls[0]: unknown action \"SCMP_ACT_EXPLODE\""),
              std::string::npos);
    Seccomp s;
    s.default_action = "SCMP_ACT_NOPE";
    EXPECT_NE(error_of(s).find("defaultAction: unknown action"), std::string::npos);
}

TEST(SeccompPlan, NotifyRulesAskForAListener) {
    Seccomp s = allow_by_default({rule({"mkdir"}, "SCMP_ACT_NOTIFY")});
    s.listener_path = "/run/listener.sock";
    auto p = plan_of(s);
    ASSERT_EQ(p.rules.size(), 1u);
    EXPECT_EQ(p.rules[0].action, SCMP_ACT_NOTIFY);
    auto prog = compile_seccomp(s);
    ASSERT_TRUE(prog) << prog.error().what();
    EXPECT_TRUE(prog->wants_listener());
    auto plain = compile_seccomp(allow_by_default({rule({"mkdir"}, "SCMP_ACT_ERRNO")}));
    ASSERT_TRUE(plain);
    EXPECT_FALSE(plain->wants_listener());
}

TEST(SeccompPlan, UnknownOperatorAndOutOfRangeIndexAreErrors) {
    EXPECT_NE(error_of(allow_by_default({rule({"mkdir"}, "SCMP_ACT_ERRNO",
                                              {arg(0, "SCMP_CMP_ABOUT", 1)})}))
                  .find("syscalls[0].args[0]: unknown operator"),
              std::string::npos);
    EXPECT_NE(error_of(allow_by_default({rule({"mkdir"}, "SCMP_ACT_ERRNO",
                                              {arg(6, "SCMP_CMP_EQ", 1)})}))
                  .find("index must be less than 6"),
              std::string::npos);
}

TEST(SeccompPlan, FlagsBecomeAttributesAndSeccompBits) {
    Seccomp s = allow_by_default({});
    s.flags = {"SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_LOG",
               "SECCOMP_FILTER_FLAG_SPEC_ALLOW"};
    auto p = plan_of(s);
    EXPECT_EQ(p.filter_flags, unsigned(SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_LOG |
                                       SECCOMP_FILTER_FLAG_SPEC_ALLOW));
    EXPECT_EQ(p.attributes, (std::vector<scmp_filter_attr>{SCMP_FLTATR_CTL_TSYNC, SCMP_FLTATR_CTL_LOG,
                                                           SCMP_FLTATR_CTL_SSB}));
}

TEST(SeccompPlan, WaitKillableRecvIsAKernelFlagThatNeedsNotifyRules) {
    Seccomp s = allow_by_default({rule({"mkdir"}, "SCMP_ACT_NOTIFY")});
    s.listener_path = "/run/listener.sock";
    s.flags = {"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"};
    auto prog = compile_seccomp(s);
    ASSERT_TRUE(prog) << prog.error().what();
    EXPECT_TRUE(prog->flags & kWaitKillableRecv);
    EXPECT_TRUE(prog->wants_listener());
    Seccomp no_notify = allow_by_default({});
    no_notify.flags = {"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"};
    auto refused = compile_seccomp(no_notify);
    ASSERT_FALSE(refused);
    EXPECT_NE(std::string(refused.error().what()).find("needs an SCMP_ACT_NOTIFY rule"), std::string::npos);
}

TEST(SeccompPlan, ArchitecturesLibseccompDoesNotKnowAreSkipped) {
    Seccomp s = allow_by_default({});
    s.architectures = {"SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_SHEB"};
    auto p = plan_of(s);
#ifndef SCMP_ARCH_SHEB
    EXPECT_EQ(p.arches, (std::vector<uint32_t>{SCMP_ARCH_X86, SCMP_ARCH_X32}));
#else
    EXPECT_EQ(p.arches.size(), 3u);
#endif
}

TEST(SeccompCompile, SmallProfileCompilesToBpf) {
    Seccomp s = allow_by_default(
        {rule({"mkdir", "mkdirat"}, "SCMP_ACT_ERRNO"),
         rule({"personality"}, "SCMP_ACT_ERRNO", {arg(0, "SCMP_CMP_EQ", 0), arg(0, "SCMP_CMP_EQ", 8)}),
         rule({"clone"}, "SCMP_ACT_ERRNO", {arg(0, "SCMP_CMP_MASKED_EQ", 0x7E020000, 0)}),
         rule({"no_such_syscall"}, "SCMP_ACT_KILL")});
    s.flags = {"SECCOMP_FILTER_FLAG_LOG"};
    auto prog = compile_seccomp(s);
    ASSERT_TRUE(prog.has_value()) << prog.error().what();
    EXPECT_GT(prog->bpf.size(), 4u);
    EXPECT_LE(prog->bpf.size(), size_t(BPF_MAXINSNS));
    EXPECT_EQ(prog->flags, unsigned(SECCOMP_FILTER_FLAG_LOG));
    // Every program ends in a return.
    EXPECT_EQ(BPF_CLASS(prog->bpf.back().code), unsigned(BPF_RET));
}

TEST(SeccompCompile, MultiplexedSyscallsCompileForOtherArches) {
    // socketcall does not exist on x86_64: libseccomp maps it for the x86 part only.
    Seccomp s = allow_by_default({rule({"socketcall", "socket", "ipc"}, "SCMP_ACT_ERRNO")});
    s.architectures = {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
    auto prog = compile_seccomp(s);
    ASSERT_TRUE(prog.has_value()) << prog.error().what();
    EXPECT_FALSE(prog->bpf.empty());
}

TEST(SeccompCompile, PlanErrorsComeThrough) {
    auto prog = compile_seccomp(allow_by_default({rule({"mkdir"}, "SCMP_ACT_BOGUS")}));
    ASSERT_FALSE(prog.has_value());
    EXPECT_NE(prog.error().what().find("unknown action"), std::string::npos);
}

// Range comparisons go through a child with a deadline (libseccomp 2.5 can loop on them):
// its program, flags and errors come back as they would from the caller's own process.
TEST(SeccompCompile, RangeComparisonsCompileInAChildWithTheSameResult) {
    Seccomp s = allow_by_default({rule({"mkdirat"}, "SCMP_ACT_ERRNO", {arg(2, "SCMP_CMP_GT", 0755)}),
                                  rule({"mkdir"}, "SCMP_ACT_ERRNO", {arg(1, "SCMP_CMP_EQ", 0700)})});
    s.flags = {"SECCOMP_FILTER_FLAG_LOG"};
    auto prog = compile_seccomp(s);
    ASSERT_TRUE(prog.has_value()) << prog.error().what();
    EXPECT_EQ(prog->flags, unsigned(SECCOMP_FILTER_FLAG_LOG));
    auto answer = [&](int nr, uint64_t mode) {
        seccomp_data d{};
        d.nr = nr;
        d.arch = AUDIT_ARCH_X86_64;
        d.args[1] = d.args[2] = mode;
        return seccomp_evaluate(prog->bpf, d) & SECCOMP_RET_ACTION_FULL;
    };
    EXPECT_EQ(answer(__NR_mkdirat, 0777), SECCOMP_RET_ERRNO);
    EXPECT_EQ(answer(__NR_mkdirat, 0700), SECCOMP_RET_ALLOW);
    EXPECT_EQ(answer(__NR_mkdir, 0700), SECCOMP_RET_ERRNO);

    s.syscalls[0].errno_ret = 70000;
    auto bad = compile_seccomp(s);
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().errnum(), EINVAL);
    EXPECT_NE(bad.error().what().find("does not fit in 16 bits"), std::string::npos) << bad.error().what();
}

// Found by tests/fuzz/seccomp_profile: libseccomp 2.5.4 never returns from adding the second
// rule. create must fail with a reason instead of hanging.
TEST(SeccompCompile, AProfileLibseccompLoopsOnFailsAtTheDeadline) {
    Seccomp s;
    s.default_action = "SCMP_ACT_LOG";
    s.syscalls = {rule({"read"}, "SCMP_ACT_TRAP", {arg(1, "SCMP_CMP_GT", 0x68d8a6ae926cc924), arg(3, "SCMP_CMP_GE", 0xd3c74842dc55369b)}),
                  rule({"read"}, "SCMP_ACT_TRAP", {arg(1, "SCMP_CMP_GT", 0x68d8a6ae926cc924), arg(3, "SCMP_CMP_LE", 0xf)})};
    auto prog = compile_seccomp(s, SeccompLayout::Compact, 500);
    ASSERT_FALSE(prog.has_value());
    EXPECT_EQ(prog.error().errnum(), ETIMEDOUT);
    EXPECT_NE(prog.error().what().find("did not compile the profile"), std::string::npos) << prog.error().what();
}

TEST(SeccompFeatures, ClaimsWhatThisBuildCanFilter) {
    auto actions = seccomp_supported_actions();
    EXPECT_NE(std::find(actions.begin(), actions.end(), "SCMP_ACT_ERRNO"), actions.end());
    EXPECT_NE(std::find(actions.begin(), actions.end(), "SCMP_ACT_NOTIFY"), actions.end());
    auto arches = seccomp_supported_arches();
    EXPECT_NE(std::find(arches.begin(), arches.end(), "SCMP_ARCH_X86_64"), arches.end());
    auto flags = seccomp_supported_flags();
    // Kernel 6.0+ (these machines run 6.18).
    EXPECT_NE(std::find(flags.begin(), flags.end(), "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"),
              flags.end());
}
