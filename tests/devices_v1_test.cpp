#include "libforkbox/cgroup/devices_v1.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "libforkbox/cgroup/resources.hpp"

using namespace forkbox;

namespace {

constexpr uint32_t R = BPF_DEVCG_ACC_READ, W = BPF_DEVCG_ACC_WRITE, M = BPF_DEVCG_ACC_MKNOD;

oci::DeviceRule rule(bool allow, std::string type, std::optional<int64_t> major, std::optional<int64_t> minor,
                     std::string access) {
    return oci::DeviceRule{allow, std::move(type), major, minor, std::move(access)};
}
oci::DeviceRule deny_all() { return rule(false, "a", std::nullopt, std::nullopt, "rwm"); }
oci::DeviceRule allow_all() { return rule(true, "a", std::nullopt, std::nullopt, "rwm"); }

DeviceCgroup emulate(const std::vector<oci::DeviceRule>& rules) {
    auto cg = emulate_device_rules(rules);
    EXPECT_TRUE(cg.has_value()) << (cg ? "" : cg.error().what());
    return cg ? *cg : DeviceCgroup{};
}

// What the container's rules make of its cgroup: the rules, then the default devices.
DeviceCgroup container(const std::vector<oci::DeviceRule>& rules) { return emulate(effective_device_rules(rules)); }

DeviceCgroup parse(std::string_view text) {
    auto cg = parse_devices_list(text);
    EXPECT_TRUE(cg.has_value()) << (cg ? "" : cg.error().what());
    return cg ? *cg : DeviceCgroup{};
}

// A write as the rule the kernel reads from it ("c 1:3 rw" to devices.allow).
oci::DeviceRule as_rule(const DeviceCgroupWrite& w) {
    if (w.rule == "a") return w.allow ? allow_all() : deny_all();
    auto ex = parse(w.rule);
    EXPECT_EQ(ex.exceptions.size(), 1u) << w.rule;
    const DeviceException& e = ex.exceptions.at(0);
    std::string access;
    if (e.access & R) access += 'r';
    if (e.access & W) access += 'w';
    if (e.access & M) access += 'm';
    return rule(w.allow, std::string(1, e.type), e.major, e.minor, access);
}

// The rules that rebuild `cg` from a deny-all (a default-allow `cg` here has no exceptions).
std::vector<oci::DeviceRule> rules_of(const DeviceCgroup& cg) {
    std::vector<oci::DeviceRule> out;
    if (cg.default_allow) out.push_back(allow_all());
    for (const auto& w : cg.exceptions)
        out.push_back(as_rule({!cg.default_allow, device_exception_text(w)}));
    return out;
}

// v1's access check (security/device_cgroup.c): default deny allows an access that one
// matching exception holds whole; default allow denies one that a matching exception names.
bool allows(const DeviceCgroup& cg, char type, int64_t major, int64_t minor, uint32_t access) {
    for (const auto& ex : cg.exceptions) {
        if (ex.type != type || (ex.major >= 0 && ex.major != major) || (ex.minor >= 0 && ex.minor != minor)) continue;
        if (!cg.default_allow && (access & ~ex.access) == 0) return true;
        if (cg.default_allow && (access & ex.access) != 0) return false;
    }
    return cg.default_allow;
}

// Exceptions as a set: the kernel's list keeps the order written, which changes nothing.
std::vector<DeviceException> sorted(std::vector<DeviceException> v) {
    std::sort(v.begin(), v.end(), [](const DeviceException& a, const DeviceException& b) {
        return std::tie(a.type, a.major, a.minor, a.access) < std::tie(b.type, b.major, b.minor, b.access);
    });
    return v;
}

// Applies the transition from `now` to `target` one write at a time, checking after each that
// every probed access both allow is still allowed, and that it ends at `target`.
void check_transition(const DeviceCgroup& now, const DeviceCgroup& target, bool expect_window = false) {
    auto writes = plan_device_transition(now, target);
    std::vector<oci::DeviceRule> applied = rules_of(now);
    const std::vector<std::tuple<char, int64_t, int64_t>> devices = {
        {'c', 1, 3}, {'c', 1, 5}, {'c', 1, 11}, {'c', 10, 200}, {'c', 136, 4}, {'b', 8, 0}, {'c', 4, 1}};
    bool refused = false;
    for (const auto& w : writes) {
        applied.push_back(as_rule(w));
        DeviceCgroup mid = emulate(applied);
        for (auto [type, major, minor] : devices)
            for (uint32_t access : {R, W, M, R | W, R | W | M})
                if (allows(now, type, major, minor, access) && allows(target, type, major, minor, access) &&
                    !allows(mid, type, major, minor, access)) {
                    refused = true;
                    if (!expect_window)
                        ADD_FAILURE() << type << " " << major << ":" << minor << " access " << access
                                      << " refused after writing " << (w.allow ? "allow " : "deny ") << w.rule;
                }
    }
    EXPECT_EQ(refused, expect_window);
    DeviceCgroup end = emulate(applied);
    EXPECT_EQ(end.default_allow, target.default_allow);
    EXPECT_EQ(sorted(end.exceptions), sorted(target.exceptions));
}

}  // namespace

// ---- devices.list ----

TEST(DevicesList, ExceptionsOfADefaultDenyCgroup) {
    auto cg = parse("c *:* m\nb *:* m\nc 1:3 rwm\nc 136:* rwm\nb 8:0 r\n");
    EXPECT_FALSE(cg.default_allow);
    EXPECT_EQ(cg.exceptions, (std::vector<DeviceException>{
                                 {'c', -1, -1, M}, {'b', -1, -1, M}, {'c', 1, 3, R | W | M}, {'c', 136, -1, R | W | M},
                                 {'b', 8, 0, R}}));
}

TEST(DevicesList, EmptyIsDefaultDenyWithNoException) {
    auto cg = parse("");
    EXPECT_FALSE(cg.default_allow);
    EXPECT_TRUE(cg.exceptions.empty());
}

TEST(DevicesList, AllIsDefaultAllow) {
    auto cg = parse("a *:* rwm\n");
    EXPECT_TRUE(cg.default_allow);
    EXPECT_TRUE(cg.exceptions.empty());
}

TEST(DevicesList, AnythingElseIsAnError) {
    for (const char* text : {"x 1:3 rwm\n", "c 1:3\n", "c 1:3 rwx\n", "c 1-3 rwm\n", "c 1:3a rw\n", "c :3 r\n",
                             "c 4294967296:1 r\n", "a *:* rwm\nc 1:3 r\n"})
        EXPECT_FALSE(parse_devices_list(text).has_value()) << text;
}

TEST(DevicesList, AnExceptionIsWrittenAsItIsListed) {
    EXPECT_EQ(device_exception_text({'c', 1, 3, R | W | M}), "c 1:3 rwm");
    EXPECT_EQ(device_exception_text({'b', 8, -1, W}), "b 8:* w");
    EXPECT_EQ(device_exception_text({'c', -1, -1, M}), "c *:* m");
    EXPECT_EQ(parse(device_exception_text({'c', 4294967295, 7, R | M})).exceptions,
              (std::vector<DeviceException>{{'c', 4294967295, 7, R | M}}));
}

// ---- the transition ----

TEST(DeviceTransition, UnchangedRulesWriteNothing) {
    EXPECT_TRUE(plan_device_transition(container({deny_all()}), container({deny_all()})).empty());
    // The kernel's order of the exceptions does not matter.
    DeviceCgroup now = container({deny_all(), rule(true, "c", 10, 200, "rw")});
    std::reverse(now.exceptions.begin(), now.exceptions.end());
    EXPECT_TRUE(plan_device_transition(now, container({deny_all(), rule(true, "c", 10, 200, "rw")})).empty());
}

TEST(DeviceTransition, AnAddedDeviceIsOneAllow) {
    EXPECT_EQ(plan_device_transition(container({deny_all()}), container({deny_all(), rule(true, "c", 1, 11, "rw")})),
              (std::vector<DeviceCgroupWrite>{{true, "c 1:11 rw"}}));
}

TEST(DeviceTransition, ARemovedDeviceIsOneDeny) {
    EXPECT_EQ(plan_device_transition(container({deny_all(), rule(true, "c", 1, 11, "rw")}), container({deny_all()})),
              (std::vector<DeviceCgroupWrite>{{false, "c 1:11 rw"}}));
}

TEST(DeviceTransition, OnlyTheAccessThatChangesIsWritten) {
    EXPECT_EQ(plan_device_transition(container({deny_all(), rule(true, "b", 8, 0, "rwm")}),
                                     container({deny_all(), rule(true, "b", 8, 0, "r")})),
              (std::vector<DeviceCgroupWrite>{{false, "b 8:0 wm"}}));
    EXPECT_EQ(plan_device_transition(container({deny_all(), rule(true, "b", 8, 0, "r")}),
                                     container({deny_all(), rule(true, "b", 8, 0, "rw")})),
              (std::vector<DeviceCgroupWrite>{{true, "b 8:0 w"}}));
}

TEST(DeviceTransition, AdditionsComeBeforeRemovals) {
    // /dev/tty1 (4:1) moves from a wildcard exception to its own: allowing 4:1 first keeps it
    // usable while 4:* goes (the other order refuses it for a moment).
    DeviceCgroup now = container({deny_all(), rule(true, "c", 4, std::nullopt, "rw")});
    DeviceCgroup target = container({deny_all(), rule(true, "c", 4, 1, "rw")});
    EXPECT_EQ(plan_device_transition(now, target),
              (std::vector<DeviceCgroupWrite>{{true, "c 4:1 rw"}, {false, "c 4:* rw"}}));
    check_transition(now, target);
}

TEST(DeviceTransition, NoAccessBothAllowIsEverRefused) {
    const std::vector<std::vector<oci::DeviceRule>> sets = {
        {deny_all()},
        {deny_all(), rule(true, "c", 1, 11, "rw")},
        {deny_all(), rule(true, "c", 1, std::nullopt, "rwm")},
        {deny_all(), rule(true, "c", 1, std::nullopt, "r"), rule(false, "c", 1, 3, "w")},
        {deny_all(), rule(true, "c", 4, std::nullopt, "rw"), rule(true, "b", 8, 0, "r")},
        {deny_all(), rule(true, "c", 4, 1, "rwm"), rule(true, "c", std::nullopt, std::nullopt, "r")},
        {deny_all(), rule(true, "b", std::nullopt, std::nullopt, "rw"), rule(false, "c", 136, std::nullopt, "rw")},
    };
    for (size_t i = 0; i < sets.size(); ++i)
        for (size_t j = 0; j < sets.size(); ++j) {
            SCOPED_TRACE("from set " + std::to_string(i) + " to set " + std::to_string(j));
            check_transition(container(sets[i]), container(sets[j]));
        }
}

TEST(DeviceTransition, ANewDefaultStartsFromTheTypeARule) {
    // Default deny -> default allow (a privileged update): allow everything, then the denies.
    DeviceCgroup now = container({deny_all(), rule(true, "c", 1, 11, "rw")});
    DeviceCgroup target = emulate({allow_all(), rule(false, "c", 1, 11, "w")});
    EXPECT_EQ(plan_device_transition(now, target),
              (std::vector<DeviceCgroupWrite>{{true, "a"}, {false, "c 1:11 w"}}));
    check_transition(now, target);
}

TEST(DeviceTransition, FromDefaultAllowEveryExceptionIsWrittenAgain) {
    // v1 lists no deny exceptions of a default-allow cgroup: they can only be reset. A
    // container made without device rules has its parent's "a *:* rwm".
    DeviceCgroup now = parse("a *:* rwm\n");
    DeviceCgroup target = container({deny_all()});
    auto writes = plan_device_transition(now, target);
    ASSERT_EQ(writes.size(), target.exceptions.size() + 1);
    EXPECT_EQ(writes[0], (DeviceCgroupWrite{false, "a"}));
    EXPECT_EQ(writes[3], (DeviceCgroupWrite{true, "c 1:3 rwm"}));
    // The deny-all refuses /dev/null until its allow: the one window v1 cannot avoid.
    check_transition(now, target, /*expect_window=*/true);
    EXPECT_EQ(plan_device_transition(now, parse("a *:* rwm\n")), (std::vector<DeviceCgroupWrite>{{true, "a"}}));
}

// ---- the plan of a live container's update ----

TEST(DeviceTransitionPlan, AnUpdateWritesOnlyTheTransition) {
    CgroupLayout v1;
    v1.mode = CgroupMode::V1;
    v1.hierarchies.push_back({"/sys/fs/cgroup/pids", false, "pids"});
    v1.hierarchies.push_back({"/sys/fs/cgroup/devices", false, "devices"});
    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 1, 11, "rw")};
    r.pids_limit = 9;
    auto w = plan_cgroup_writes(r, v1, container({deny_all()}));
    ASSERT_TRUE(w) << w.error().what();
    EXPECT_EQ(*w, (std::vector<CgroupWrite>{{1, "devices.allow", "c 1:11 rw"}, {0, "pids.max", "9"}}));
    w = plan_cgroup_writes(r, v1, container(r.devices));
    ASSERT_TRUE(w) << w.error().what();
    EXPECT_EQ(*w, (std::vector<CgroupWrite>{{0, "pids.max", "9"}}));
}

// ---- the kernel (root, a v1 devices hierarchy) ----

// Writes of the create path and of the transition, against a real v1 devices cgroup: what
// devices.list shows is what the emulation says.
TEST(DevicesV1Kernel, TheKernelListsWhatTheEmulationSays) {
    const std::string root = "/sys/fs/cgroup/devices";
    struct stat st;
    if (::geteuid() != 0 || ::stat((root + "/devices.list").c_str(), &st) != 0)
        GTEST_SKIP() << "needs root and a v1 devices hierarchy";
    const std::string dir = root + "/fb-devices-v1-test-" + std::to_string(::getpid());
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
    struct Remove {
        std::string dir;
        ~Remove() { ::rmdir(dir.c_str()); }
    } remove{dir};
    CgroupLayout layout;
    layout.mode = CgroupMode::V1;
    layout.hierarchies.push_back({root, false, "devices"});
    const std::vector<std::string> dirs = {dir};

    auto live = [&] {
        auto cg = read_device_cgroup(layout, dirs);
        EXPECT_TRUE(cg && *cg) << (cg ? "no v1 devices cgroup" : cg.error().what());
        return cg && *cg ? **cg : DeviceCgroup{};
    };
    auto write = [&](const std::vector<CgroupWrite>& writes) {
        auto done = apply_cgroup_writes(writes, layout, dirs);
        ASSERT_TRUE(done) << done.error().what();
    };

    oci::Resources r;
    r.devices = {deny_all(), rule(true, "c", 4, std::nullopt, "rw"), rule(true, "b", 8, 0, "rwm"),
                 rule(false, "b", 8, 0, "m")};
    auto first = plan_cgroup_writes(r, layout);
    ASSERT_TRUE(first);
    write(*first);
    DeviceCgroup target = container(r.devices);
    EXPECT_EQ(sorted(live().exceptions), sorted(target.exceptions));
    EXPECT_FALSE(live().default_allow);

    for (const auto& next : std::vector<std::vector<oci::DeviceRule>>{
             {deny_all(), rule(true, "c", 4, 1, "rw"), rule(true, "c", 1, 11, "r")},
             {deny_all()},
             {allow_all(), rule(false, "c", 1, 11, "w")},
             {deny_all(), rule(true, "b", std::nullopt, std::nullopt, "r")}}) {
        r.devices = next;
        auto writes = plan_cgroup_writes(r, layout, live());
        ASSERT_TRUE(writes);
        write(*writes);
        target = container(next);
        DeviceCgroup now = live();
        EXPECT_EQ(now.default_allow, target.default_allow);
        // The kernel does not list a default-allow cgroup's denies.
        if (target.default_allow) continue;
        EXPECT_EQ(sorted(now.exceptions), sorted(target.exceptions));
        EXPECT_TRUE(plan_device_transition(now, target).empty());  // nothing left to do
    }
}
