#include "libforkbox/cgroup/device_filter.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "libforkbox/cgroup/bpf.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/plan/plan.hpp"

using namespace forkbox;

namespace {

oci::DeviceRule rule(bool allow, std::string type, std::optional<int64_t> major, std::optional<int64_t> minor,
                     std::string access) {
    return oci::DeviceRule{allow, std::move(type), major, minor, std::move(access)};
}
oci::DeviceRule deny_all() { return rule(false, "a", std::nullopt, std::nullopt, "rwm"); }

std::vector<bpf_insn> program(const std::vector<oci::DeviceRule>& rules) {
    auto p = device_filter_program(rules);
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().what());
    return p ? *p : std::vector<bpf_insn>{};
}

// Runs a program on one access the way the kernel would, for the instructions the
// generator emits (any other instruction fails the test). 1 allows, 0 denies.
int run(const std::vector<bpf_insn>& prog, int type, int access, uint32_t major, uint32_t minor) {
    bpf_cgroup_dev_ctx ctx{static_cast<uint32_t>(access << 16 | type), major, minor};
    uint64_t reg[11] = {};
    size_t pc = 0;
    for (int steps = 0; steps < 100000 && pc < prog.size(); ++steps) {
        const bpf_insn& i = prog[pc++];
        uint64_t& dst = reg[i.dst_reg];
        uint32_t imm = static_cast<uint32_t>(i.imm);
        switch (i.code) {
        case BPF_LDX | BPF_MEM | BPF_W:
            EXPECT_EQ(i.src_reg, 1);
            EXPECT_TRUE(i.off == 0 || i.off == 4 || i.off == 8);
            dst = reinterpret_cast<const uint32_t*>(&ctx)[i.off / 4];
            break;
        case BPF_ALU | BPF_MOV | BPF_X: dst = static_cast<uint32_t>(reg[i.src_reg]); break;
        case BPF_ALU | BPF_AND | BPF_K: dst = static_cast<uint32_t>(dst) & imm; break;
        case BPF_ALU | BPF_RSH | BPF_K: dst = static_cast<uint32_t>(dst) >> imm; break;
        case BPF_ALU64 | BPF_MOV | BPF_K: dst = static_cast<uint64_t>(static_cast<int64_t>(i.imm)); break;
        case BPF_JMP32 | BPF_JNE | BPF_K:
            if (static_cast<uint32_t>(dst) != imm) pc += i.off;
            break;
        case BPF_JMP32 | BPF_JEQ | BPF_K:
            if (static_cast<uint32_t>(dst) == imm) pc += i.off;
            break;
        case BPF_JMP | BPF_EXIT: return static_cast<int>(reg[0]);
        default: ADD_FAILURE() << "unexpected instruction code " << int(i.code) << " at " << pc - 1; return -1;
        }
    }
    ADD_FAILURE() << "program ran off its end or looped";
    return -1;
}

constexpr int C = BPF_DEVCG_DEV_CHAR, B = BPF_DEVCG_DEV_BLOCK;
constexpr int R = BPF_DEVCG_ACC_READ, W = BPF_DEVCG_ACC_WRITE, M = BPF_DEVCG_ACC_MKNOD;

}  // namespace

// ---- the v1 emulation ----

static DeviceCgroup emulate(const std::vector<oci::DeviceRule>& rules) {
    auto cg = emulate_device_rules(rules);
    EXPECT_TRUE(cg.has_value()) << (cg ? "" : cg.error().what());
    return cg ? *cg : DeviceCgroup{};
}

TEST(DeviceEmulation, StartsFromDenyWithoutExceptions) {
    auto cg = emulate({});
    EXPECT_FALSE(cg.default_allow);
    EXPECT_TRUE(cg.exceptions.empty());
}

TEST(DeviceEmulation, AllowsWithTheSameNumbersMergeTheirAccess) {
    auto cg = emulate({deny_all(), rule(true, "c", 10, 200, "r"), rule(true, "b", 8, -1, "rw"),
                       rule(true, "c", 10, 200, "w")});
    EXPECT_EQ(cg.exceptions, (std::vector<DeviceException>{{'c', 10, 200, R | W}, {'b', 8, -1, R | W}}));
}

TEST(DeviceEmulation, ADenyTrimsOnlyTheExceptionWithTheSameNumbers) {
    auto cg = emulate({rule(true, "c", 1, std::nullopt, "rwm"), rule(true, "c", 1, 3, "rw"),
                       rule(false, "c", 1, 3, "w"), rule(false, "c", 1, 5, "rwm")});
    EXPECT_EQ(cg.exceptions, (std::vector<DeviceException>{{'c', 1, -1, R | W | M}, {'c', 1, 3, R}}));
    cg = emulate({rule(true, "c", 1, 3, "r"), rule(false, "c", 1, 3, "rwm")});
    EXPECT_TRUE(cg.exceptions.empty());
}

TEST(DeviceEmulation, TypeAResetsWhateverItsNumbers) {
    auto cg = emulate({rule(true, "c", 1, 3, "rwm"), rule(true, "a", 7, 1, "r")});
    EXPECT_TRUE(cg.default_allow);
    EXPECT_TRUE(cg.exceptions.empty());
    // With default allow, a deny adds an exception and an allow trims it.
    cg = emulate({rule(true, "", std::nullopt, std::nullopt, ""), rule(false, "c", 1, 3, "rw"), rule(true, "c", 1, 3, "r")});
    EXPECT_TRUE(cg.default_allow);
    EXPECT_EQ(cg.exceptions, (std::vector<DeviceException>{{'c', 1, 3, W}}));
    cg = emulate({rule(true, "a", std::nullopt, std::nullopt, "rwm"), rule(false, "c", 1, 3, "rw"), deny_all()});
    EXPECT_FALSE(cg.default_allow);
    EXPECT_TRUE(cg.exceptions.empty());
}

TEST(DeviceEmulation, BadRulesAreErrors) {
    EXPECT_FALSE(emulate_device_rules({rule(true, "x", 1, 3, "rwm")}));
    EXPECT_FALSE(emulate_device_rules({rule(true, "c", 1, 3, "rwx")}));
    auto big = emulate_device_rules({rule(true, "c", int64_t{1} << 33, 3, "rwm")});
    ASSERT_FALSE(big);
    EXPECT_NE(big.error().what().find("rule 0: major 8589934592 is out of range"), std::string::npos);
}

// ---- instruction shape ----

TEST(DeviceFilterProgram, LoadsTheContextThenEndsWithTheDefault) {
    auto p = program({});
    ASSERT_EQ(p.size(), 9u);
    EXPECT_EQ(p[0].code, BPF_LDX | BPF_MEM | BPF_W);
    EXPECT_EQ(p[0].off, offsetof(bpf_cgroup_dev_ctx, access_type));
    EXPECT_EQ(p[5].off, offsetof(bpf_cgroup_dev_ctx, major));
    EXPECT_EQ(p[6].off, offsetof(bpf_cgroup_dev_ctx, minor));
    EXPECT_EQ(p[7].code, BPF_ALU64 | BPF_MOV | BPF_K);
    EXPECT_EQ(p[7].dst_reg, 0);
    EXPECT_EQ(p[7].imm, 0);
    EXPECT_EQ(p[8].code, BPF_JMP | BPF_EXIT);
    auto q = program({rule(true, "a", std::nullopt, std::nullopt, "rwm")});
    ASSERT_EQ(q.size(), 9u);
    EXPECT_EQ(q[7].imm, 1);
}

TEST(DeviceFilterProgram, ABlockChecksTypeAndOnlyTheNumbersTheExceptionNames) {
    // type, major, minor, then mov/and/jne/mov/exit.
    EXPECT_EQ(program({rule(true, "c", 1, 3, "rwm")}).size(), 9u + 8);
    EXPECT_EQ(program({rule(true, "c", 136, -1, "rwm")}).size(), 9u + 7);
    EXPECT_EQ(program({rule(true, "b", std::nullopt, std::nullopt, "m")}).size(), 9u + 6);
    EXPECT_EQ(program({deny_all()}).size(), 9u);
}

TEST(DeviceFilterProgram, EveryJumpLandsOnTheNextBlock) {
    auto p = program(effective_device_rules({deny_all(), rule(true, "c", 10, 200, "rw"), rule(true, "b", 8, -1, "w")}));
    std::vector<size_t> starts = {7};
    for (size_t i = 7; i + 2 < p.size(); ++i)
        if (p[i].code == (BPF_JMP | BPF_EXIT)) starts.push_back(i + 1);
    EXPECT_EQ(starts.size(), 2 + default_device_rules().size() + 1);  // one per exception, then the default
    for (size_t i = 7; i < p.size(); ++i) {
        if (BPF_CLASS(p[i].code) != BPF_JMP32) continue;
        size_t target = i + 1 + p[i].off;
        EXPECT_NE(std::find(starts.begin(), starts.end(), target), starts.end()) << "jump at " << i;
    }
}

TEST(DeviceFilterProgram, BlocksFollowTheExceptionList) {
    auto p = program({rule(true, "b", 8, 0, "r"), rule(true, "c", 1, 3, "rwm")});
    EXPECT_EQ(p[7].code, BPF_JMP32 | BPF_JNE | BPF_K);
    EXPECT_EQ(p[7].dst_reg, 3);
    EXPECT_EQ(p[7].imm, BPF_DEVCG_DEV_BLOCK);
    EXPECT_EQ(p[15].imm, BPF_DEVCG_DEV_CHAR);
}

// ---- behaviour ----

TEST(DeviceFilterBehaviour, NoRulesDeniesEverything) {
    auto p = program({});
    EXPECT_EQ(run(p, C, R, 1, 3), 0);
    EXPECT_EQ(run(p, B, M, 8, 0), 0);
}

TEST(DeviceFilterBehaviour, DenyAllThenAllowOneDevice) {
    auto p = program({deny_all(), rule(true, "c", 10, 200, "rwm")});
    EXPECT_EQ(run(p, C, R | W, 10, 200), 1);
    EXPECT_EQ(run(p, C, R, 10, 201), 0);
    EXPECT_EQ(run(p, B, R, 10, 200), 0);
}

TEST(DeviceFilterBehaviour, ALaterDenyWinsOverAnEarlierAllow) {
    auto p = program({deny_all(), rule(true, "c", 1, 3, "rwm"), rule(false, "c", 1, 3, "w")});
    EXPECT_EQ(run(p, C, R, 1, 3), 1);
    EXPECT_EQ(run(p, C, W, 1, 3), 0);
    EXPECT_EQ(run(p, C, R | W, 1, 3), 0);
    EXPECT_EQ(run(p, C, M, 1, 3), 1);
}

TEST(DeviceFilterBehaviour, ALaterAllowWinsOverAnEarlierDeny) {
    auto p = program({deny_all(), rule(false, "c", 1, 3, "w"), rule(true, "c", 1, 3, "rwm")});
    EXPECT_EQ(run(p, C, R | W, 1, 3), 1);
}

TEST(DeviceFilterBehaviour, ALaterDenyAllUndoesEarlierAllows) {
    auto p = program({rule(true, "c", 10, 200, "rwm"), deny_all()});
    EXPECT_EQ(run(p, C, R, 10, 200), 0);
}

TEST(DeviceFilterBehaviour, AllowAllThenDeniesOfSomeBits) {
    auto p = program({rule(true, "a", std::nullopt, std::nullopt, "rwm"), rule(false, "c", 1, 3, "w"),
                      rule(false, "b", 8, -1, "rwm")});
    EXPECT_EQ(run(p, C, R, 1, 3), 1);
    EXPECT_EQ(run(p, C, W, 1, 3), 0);
    EXPECT_EQ(run(p, C, R | W, 1, 3), 0);  // any denied bit denies
    EXPECT_EQ(run(p, B, R, 8, 16), 0);
    EXPECT_EQ(run(p, B, R, 9, 0), 1);
    EXPECT_EQ(run(p, C, R | W | M, 10, 200), 1);
}

TEST(DeviceFilterBehaviour, ADenyOfAWildcardLeavesAnAllowWithOtherNumbers) {
    // v1's exception list: the deny has no exception with its own numbers to trim.
    auto p = program({deny_all(), rule(true, "c", 1, 3, "rwm"), rule(false, "c", 1, std::nullopt, "w")});
    EXPECT_EQ(run(p, C, W, 1, 3), 1);
}

TEST(DeviceFilterBehaviour, AnAccessMustFitOneException) {
    auto p = program({deny_all(), rule(true, "c", 10, 200, "r"), rule(true, "c", 10, -1, "w")});
    EXPECT_EQ(run(p, C, R, 10, 200), 1);
    EXPECT_EQ(run(p, C, W, 10, 200), 1);
    EXPECT_EQ(run(p, C, R | W, 10, 200), 0);
    EXPECT_EQ(run(p, C, W, 10, 201), 1);
    EXPECT_EQ(run(p, C, M, 10, 200), 0);
}

TEST(DeviceFilterBehaviour, WildcardsMatchAnyNumberAndTypesAreExact) {
    auto p = program({deny_all(), rule(true, "c", 136, std::nullopt, "rw"), rule(true, "b", -1, 1, "r")});
    EXPECT_EQ(run(p, C, R | W, 136, 5), 1);
    EXPECT_EQ(run(p, C, R | W, 137, 5), 0);
    EXPECT_EQ(run(p, B, R, 7, 1), 1);
    EXPECT_EQ(run(p, C, R, 7, 1), 0);
    EXPECT_EQ(run(p, B, R, 136, 5), 0);
}

TEST(DeviceFilterBehaviour, DefaultDevicesStayUsableAfterADenyAll) {
    auto p = program(effective_device_rules({deny_all()}));
    for (auto [major, minor] : {std::pair{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 2}, {136, 4}})
        EXPECT_EQ(run(p, C, R | W, major, minor), 1) << major << ":" << minor;
    // runc's list: no /dev/console (the console is a pty) and no tun.
    EXPECT_EQ(run(p, C, R | W, 5, 1), 0);
    EXPECT_EQ(run(p, C, M, 10, 200), 1);  // mknod of anything
    EXPECT_EQ(run(p, B, M, 8, 0), 1);
    EXPECT_EQ(run(p, C, R, 10, 200), 0);
    EXPECT_EQ(run(p, B, R, 8, 0), 0);
}

TEST(DeviceFilterBehaviour, DefaultDevicesWinOverTheConfiguredRules) {
    // As on v1, where the defaults are written after the rules.
    auto p = program(effective_device_rules({deny_all(), rule(false, "c", 1, 3, "rwm")}));
    EXPECT_EQ(run(p, C, W, 1, 3), 1);
}

TEST(DeviceFilterBehaviour, ADeviceOutsideTheRulesAndDefaultsIsDenied) {
    auto p = program(effective_device_rules({deny_all(), rule(true, "b", 7, 0, "rw")}));
    EXPECT_EQ(run(p, C, R | W, 10, 229), 0);  // /dev/fuse: not a default, not in the rules
    EXPECT_EQ(run(p, B, R | W, 7, 0), 1);
    EXPECT_EQ(run(p, B, R | W, 7, 1), 0);
}

// ---- v1 and v2 agree ----

TEST(DeviceFilterV1, TheV1PlanWritesTheSameRulesInTheSameOrder) {
    CgroupLayout v1;
    v1.mode = CgroupMode::V1;
    v1.hierarchies.push_back({"/sys/fs/cgroup/devices", false, "devices"});
    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 10, 200, "rw")};
    auto w = plan_cgroup_writes(r, v1);
    ASSERT_TRUE(w);
    auto rules = effective_device_rules(r.devices);
    ASSERT_EQ(w->size(), rules.size() + 1);  // after the initial "deny a"
    EXPECT_EQ((*w)[0].value, "a");
    EXPECT_EQ((*w)[2].value, "c 10:200 rw");
    EXPECT_EQ((*w)[3], (CgroupWrite{0, "devices.allow", "c *:* m"}));
    EXPECT_EQ(w->back(), (CgroupWrite{0, "devices.allow", "c 5:2 rwm"}));
    auto prog = plan_device_program(r, v1);
    ASSERT_TRUE(prog);
    EXPECT_FALSE(prog->has_value());  // v1 enforces them
}

// ---- a spec without device rules (Plan::resources) ----

namespace {
// The plan of a spec that has no linux.resources.devices.
oci::Resources resources_without_rules() {
    oci::Spec s;
    s.root = oci::Root{"rootfs", false};
    s.process = oci::Process{};
    s.process->args = {"sh"};
    auto plan = make_plan(s, PlanOptions{"c1", "/b"});
    EXPECT_TRUE(plan) << (plan ? "" : plan.error().what());
    return plan ? plan->resources : oci::Resources{};
}
}  // namespace

TEST(DeviceRulesWithoutRules, AreRuncsDefaultsAfterADenyAll) {
    // What runc 1.1.5 leaves in devices.list for such a spec (measured), tun (c 10:200) aside.
    auto cg = emulate_device_rules(effective_device_rules(resources_without_rules().devices));
    ASSERT_TRUE(cg) << cg.error().what();
    EXPECT_FALSE(cg->default_allow);
    const uint32_t RWM = R | W | M;
    EXPECT_EQ(cg->exceptions, (std::vector<DeviceException>{{'c', -1, -1, M},
                                                             {'b', -1, -1, M},
                                                             {'c', 1, 3, RWM},
                                                             {'c', 1, 8, RWM},
                                                             {'c', 1, 7, RWM},
                                                             {'c', 5, 0, RWM},
                                                             {'c', 1, 5, RWM},
                                                             {'c', 1, 9, RWM},
                                                             {'c', 136, -1, RWM},
                                                             {'c', 5, 2, RWM}}));
}

TEST(DeviceRulesWithoutRules, V1StartsFromADenyAllAndNeverAllowsEverything) {
    CgroupLayout v1;
    v1.mode = CgroupMode::V1;
    v1.hierarchies.push_back({"/sys/fs/cgroup/devices", false, "devices"});
    auto w = plan_cgroup_writes(resources_without_rules(), v1);
    ASSERT_TRUE(w) << w.error().what();
    ASSERT_FALSE(w->empty());
    EXPECT_EQ(w->front(), (CgroupWrite{0, "devices.deny", "a"}));
    for (const auto& write : *w) EXPECT_FALSE(write.file == "devices.allow" && write.value.starts_with("a")) << write.value;
    EXPECT_NE(std::find(w->begin(), w->end(), CgroupWrite{0, "devices.allow", "c 1:3 rwm"}), w->end());
}

TEST(DeviceRulesWithoutRules, V2GetsAProgramThatDeniesKmsgAndAllowsNull) {
    CgroupLayout v2;
    v2.mode = CgroupMode::V2;
    v2.hierarchies.push_back({"/sys/fs/cgroup", true, "memory,pids"});
    auto prog = plan_device_program(resources_without_rules(), v2);
    ASSERT_TRUE(prog) << prog.error().what();
    ASSERT_TRUE(prog->has_value());
    EXPECT_EQ(run(**prog, C, R, 1, 11), 0);  // /dev/kmsg
    EXPECT_EQ(run(**prog, B, R, 8, 0), 0);
    EXPECT_EQ(run(**prog, C, R | W, 1, 3), 1);
    EXPECT_EQ(run(**prog, C, M, 1, 11), 1);  // mknod stays allowed; open is what fails
}

TEST(DeviceRulesWithoutRules, AnUpdateWithoutRulesLeavesTheDeviceCgroupAlone) {
    CgroupLayout v1;
    v1.mode = CgroupMode::V1;
    v1.hierarchies.push_back({"/sys/fs/cgroup/devices", false, "devices"});
    oci::Resources update;
    auto w = plan_cgroup_writes(update, v1, DeviceCgroup{});
    ASSERT_TRUE(w);
    EXPECT_TRUE(w->empty());
    auto prog = plan_device_program(update, v1);
    ASSERT_TRUE(prog);
    EXPECT_FALSE(prog->has_value());
}

// ---- the kernel's verifier (root only) ----

TEST(DeviceFilterKernel, TheVerifierAcceptsTheProgram) {
    if (::geteuid() != 0) GTEST_SKIP() << "loading a BPF program needs root";
    auto p = program(effective_device_rules({deny_all(), rule(true, "c", 10, 200, "rw"), rule(false, "a", 1, -1, "w"),
                                             rule(true, "b", std::nullopt, 4, "")}));
    auto fd = bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, p, kDeviceProgramName);
    if (!fd && fd.error().errnum() == EPERM) GTEST_SKIP() << "bpf(2) is not permitted here";
    EXPECT_TRUE(fd) << (fd ? "" : fd.error().what());
}
