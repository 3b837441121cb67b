#include "libforkbox/plan/plan.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace forkbox;
using namespace forkbox::oci;

namespace {

constexpr const char* kBundle = "/run/bundles/c1";

// The smallest spec make_plan accepts: a rootfs and a process.
Spec minimal_spec() {
    Spec s;
    s.oci_version = "1.3.0";
    s.root = Root{"rootfs", false};
    s.process = Process{};
    s.process->args = {"sh"};
    s.process->cwd = "/";
    s.linux = Linux{};
    return s;
}

Mount mount(std::string destination, std::string type, std::string source,
            std::vector<std::string> options = {}) {
    Mount m;
    m.destination = std::move(destination);
    m.type = std::move(type);
    m.source = std::move(source);
    m.options = std::move(options);
    return m;
}

Plan plan_of(const Spec& s, const std::string& id = "c1") {
    auto p = make_plan(s, PlanOptions{id, kBundle});
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().what());
    return p ? *p : Plan{};
}

Error error_of(const Spec& s) {
    auto p = make_plan(s, PlanOptions{"c1", kBundle});
    EXPECT_FALSE(p.has_value()) << "planned";
    return p ? Error{} : p.error();
}

// The plan's only mount step.
MountStep only_mount(const Plan& p) {
    EXPECT_EQ(p.mounts.size(), 1u);
    return p.mounts.empty() ? MountStep{} : p.mounts[0];
}

const DeviceNode* find_device(const Plan& p, const std::string& path) {
    for (const auto& d : p.devices)
        if (d.path == path) return &d;
    return nullptr;
}

Hook hook(std::string path) {
    Hook h;
    h.path = std::move(path);
    return h;
}

}  // namespace

// ---- parse_mount_options ----

TEST(MountOptions, NoOptionsSetNothing) {
    auto f = parse_mount_options({});
    EXPECT_EQ(f.set, 0u);
    EXPECT_EQ(f.clear, 0u);
    EXPECT_EQ(f.propagation, 0u);
    EXPECT_EQ(f.recursive_set, 0u);
    EXPECT_EQ(f.recursive_clear, 0u);
    EXPECT_EQ(f.data, "");
    EXPECT_FALSE(f.tmpcopyup);
    EXPECT_FALSE(f.idmap);
}

TEST(MountOptions, RoAndNosuidSetTheirFlags) {
    auto f = parse_mount_options({"ro", "nosuid"});
    EXPECT_EQ(f.set, static_cast<unsigned long>(MS_RDONLY | MS_NOSUID));
    EXPECT_EQ(f.clear, 0u);
}

TEST(MountOptions, RwAfterRoClearsReadOnly) {
    auto f = parse_mount_options({"ro", "rw"});
    EXPECT_EQ(f.set & MS_RDONLY, 0u);
    EXPECT_EQ(f.clear, static_cast<unsigned long>(MS_RDONLY));
}

TEST(MountOptions, RoAfterRwSetsReadOnlyAndForgetsTheClear) {
    auto f = parse_mount_options({"rw", "ro"});
    EXPECT_EQ(f.set, static_cast<unsigned long>(MS_RDONLY));
    EXPECT_EQ(f.clear, 0u);
}

TEST(MountOptions, ClearingWordsRecordWhatTheyClear) {
    auto f = parse_mount_options({"suid", "dev", "exec", "atime"});
    EXPECT_EQ(f.set, 0u);
    EXPECT_EQ(f.clear, static_cast<unsigned long>(MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME));
}

TEST(MountOptions, DefaultsSetsNothing) {
    auto f = parse_mount_options({"defaults"});
    EXPECT_EQ(f.set, 0u);
    EXPECT_EQ(f.clear, 0u);
    EXPECT_EQ(f.data, "");
}

TEST(MountOptions, BindSetsMsBind) {
    EXPECT_EQ(parse_mount_options({"bind"}).set, static_cast<unsigned long>(MS_BIND));
}

TEST(MountOptions, RbindSetsMsBindAndMsRec) {
    EXPECT_EQ(parse_mount_options({"rbind"}).set, static_cast<unsigned long>(MS_BIND | MS_REC));
}

TEST(MountOptions, EachPropagationWordSetsItsFlags) {
    const std::vector<std::pair<std::string, unsigned long>> cases = {
        {"private", MS_PRIVATE},       {"rprivate", MS_PRIVATE | MS_REC},
        {"shared", MS_SHARED},         {"rshared", MS_SHARED | MS_REC},
        {"slave", MS_SLAVE},           {"rslave", MS_SLAVE | MS_REC},
        {"unbindable", MS_UNBINDABLE}, {"runbindable", MS_UNBINDABLE | MS_REC},
    };
    for (const auto& [word, flags] : cases) {
        auto f = parse_mount_options({word});
        EXPECT_EQ(f.propagation, flags) << word;
        EXPECT_EQ(f.set, 0u) << word << " must not land in the mount flags";
    }
}

TEST(MountOptions, LastPropagationWordWins) {
    EXPECT_EQ(parse_mount_options({"rshared", "rprivate"}).propagation,
              static_cast<unsigned long>(MS_PRIVATE | MS_REC));
}

TEST(MountOptions, RroGoesToRecursiveAttrsNotToMountFlags) {
    auto f = parse_mount_options({"rro"});
    EXPECT_EQ(f.recursive_set, static_cast<uint64_t>(MOUNT_ATTR_RDONLY));
    EXPECT_EQ(f.recursive_clear, 0u);
    EXPECT_EQ(f.set & MS_RDONLY, 0u);
}

TEST(MountOptions, RrwClearsTheRecursiveReadOnlyAttr) {
    auto f = parse_mount_options({"rrw"});
    EXPECT_EQ(f.recursive_set, 0u);
    EXPECT_EQ(f.recursive_clear, static_cast<uint64_t>(MOUNT_ATTR_RDONLY));
}

TEST(MountOptions, RecursiveNosuidNodevNoexecSetTheirAttrs) {
    auto f = parse_mount_options({"rnosuid", "rnodev", "rnoexec"});
    EXPECT_EQ(f.recursive_set,
              static_cast<uint64_t>(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
    EXPECT_EQ(f.recursive_clear, 0u);
}

// mount_setattr(2): an atime mode in attr_set needs the whole MOUNT_ATTR__ATIME field in
// attr_clr, or the kernel answers EINVAL.
TEST(MountOptions, RecursiveNoatimeAlsoClearsTheWholeAtimeField) {
    auto f = parse_mount_options({"rnoatime"});
    EXPECT_EQ(f.recursive_set, static_cast<uint64_t>(MOUNT_ATTR_NOATIME));
    EXPECT_EQ(f.recursive_clear & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR__ATIME));
}

TEST(MountOptions, RecursiveStrictatimeAlsoClearsTheWholeAtimeField) {
    auto f = parse_mount_options({"rstrictatime"});
    EXPECT_EQ(f.recursive_set, static_cast<uint64_t>(MOUNT_ATTR_STRICTATIME));
    EXPECT_EQ(f.recursive_clear & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR__ATIME));
}

TEST(MountOptions, RecursiveRelatimeClearsTheWholeAtimeField) {
    auto f = parse_mount_options({"rrelatime"});
    EXPECT_EQ(f.recursive_set & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR_RELATIME));
    EXPECT_EQ(f.recursive_clear & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR__ATIME));
}

// Clearing only one atime bit is EINVAL for mount_setattr: "ratime" must clear the field.
TEST(MountOptions, RecursiveAtimeClearsTheWholeAtimeField) {
    auto f = parse_mount_options({"ratime"});
    EXPECT_EQ(f.recursive_set & MOUNT_ATTR__ATIME, 0u);
    EXPECT_EQ(f.recursive_clear & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR__ATIME));
}

// Like the plain words, the last recursive word wins: "rro,rrw" is read-write.
TEST(MountOptions, RrwAfterRroUndoesTheRecursiveReadOnly) {
    auto f = parse_mount_options({"rro", "rrw"});
    EXPECT_EQ(f.recursive_set & MOUNT_ATTR_RDONLY, 0u);
    EXPECT_EQ(f.recursive_clear & MOUNT_ATTR_RDONLY, static_cast<uint64_t>(MOUNT_ATTR_RDONLY));
}

// The atime modes are one field: "rnoatime,rstrictatime" is strictatime (both bits: EINVAL).
TEST(MountOptions, LaterRecursiveAtimeModeReplacesAnEarlierOne) {
    auto f = parse_mount_options({"rnoatime", "rstrictatime"});
    EXPECT_EQ(f.recursive_set & MOUNT_ATTR__ATIME, static_cast<uint64_t>(MOUNT_ATTR_STRICTATIME));
}

TEST(MountOptions, UnknownWordsBecomeFilesystemDataInOrder) {
    auto f = parse_mount_options({"size=64m", "nosuid", "mode=755"});
    EXPECT_EQ(f.data, "size=64m,mode=755");
    EXPECT_EQ(f.set, static_cast<unsigned long>(MS_NOSUID));
}

TEST(MountOptions, TmpcopyupIsAFlagNotData) {
    auto f = parse_mount_options({"tmpcopyup"});
    EXPECT_TRUE(f.tmpcopyup);
    EXPECT_EQ(f.data, "");
}

TEST(MountOptions, IdmapIsAFlagNotData) {
    auto f = parse_mount_options({"idmap"});
    EXPECT_TRUE(f.idmap);
    EXPECT_EQ(f.data, "");
}

TEST(MountOptions, RidmapIsAlsoIdmap) {
    auto f = parse_mount_options({"ridmap"});
    EXPECT_TRUE(f.idmap);
    EXPECT_TRUE(f.idmap_recursive);
    EXPECT_EQ(f.data, "");
}

TEST(MountOptions, IdmapIsNotRecursive) {
    EXPECT_FALSE(parse_mount_options({"idmap"}).idmap_recursive);
}

// ---- parse_propagation ----

TEST(Propagation, RslaveIsSlaveAndRecursive) {
    auto p = parse_propagation("rslave");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, static_cast<unsigned long>(MS_SLAVE | MS_REC));
}

TEST(Propagation, SharedIsNotRecursive) {
    auto p = parse_propagation("shared");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, static_cast<unsigned long>(MS_SHARED));
}

TEST(Propagation, UnknownNameIsAnErrorNamingIt) {
    auto p = parse_propagation("rsomething");
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.error().errnum(), EINVAL);
    EXPECT_EQ(p.error().what(), "unknown propagation \"rsomething\"");
}

TEST(Propagation, MountFlagWordsAreNotPropagation) {
    EXPECT_FALSE(parse_propagation("ro").has_value());
}

// ---- clean_container_path ----

TEST(CleanContainerPath, CollapsesSlashesDotsAndDotDots) {
    EXPECT_EQ(clean_container_path("a//b/../c/"), "/a/c");
}

TEST(CleanContainerPath, MakesRelativePathsAbsolute) {
    EXPECT_EQ(clean_container_path("etc/hosts"), "/etc/hosts");
}

TEST(CleanContainerPath, NeverClimbsAboveRoot) {
    EXPECT_EQ(clean_container_path("/../../etc/../../x"), "/x");
}

TEST(CleanContainerPath, EmptyIsRoot) { EXPECT_EQ(clean_container_path(""), "/"); }

TEST(CleanContainerPath, OnlyDotsAndSlashesIsRoot) { EXPECT_EQ(clean_container_path("/./..//."), "/"); }

TEST(CleanContainerPath, KeepsNamesThatOnlyStartWithDots) {
    EXPECT_EQ(clean_container_path("/a/.hidden/..b/..."), "/a/.hidden/..b/...");
}

// ---- default_devices ----

TEST(DefaultDevices, AreTheSixStandardCharacterDevices) {
    std::vector<std::string> paths;
    for (const auto& d : default_devices()) paths.push_back(d.path);
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                               "/dev/urandom", "/dev/tty"}));
}

TEST(DefaultDevices, HaveTheKernelNumbersAndMode0666) {
    const std::vector<std::pair<uint32_t, uint32_t>> numbers = {{1, 3}, {1, 5}, {1, 7},
                                                                {1, 8}, {1, 9}, {5, 0}};
    auto devices = default_devices();
    ASSERT_EQ(devices.size(), numbers.size());
    for (size_t i = 0; i < devices.size(); ++i) {
        EXPECT_EQ(devices[i].type, 'c') << devices[i].path;
        EXPECT_EQ(devices[i].major, numbers[i].first) << devices[i].path;
        EXPECT_EQ(devices[i].minor, numbers[i].second) << devices[i].path;
        EXPECT_EQ(devices[i].mode, 0666u) << devices[i].path;
        EXPECT_EQ(devices[i].uid, 0u) << devices[i].path;
        EXPECT_EQ(devices[i].gid, 0u) << devices[i].path;
    }
}

// ---- make_plan: namespaces ----

TEST(Plan, NewNamespacesBecomeCloneFlags) {
    Spec s = minimal_spec();
    for (const char* t : {"pid", "network", "ipc", "uts", "mount", "cgroup", "time"})
        s.linux->namespaces.push_back(Namespace{t, ""});
    auto p = plan_of(s);
    EXPECT_EQ(p.new_namespaces, CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS |
                                    CLONE_NEWCGROUP | CLONE_NEWTIME);
    EXPECT_TRUE(p.joins.empty());
    EXPECT_FALSE(p.needs_intermediate());
}

TEST(Plan, NewPidNamespaceMeansOwnPidNamespace) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"pid", ""});
    EXPECT_TRUE(plan_of(s).own_pid_namespace());
}

TEST(Plan, JoinedPidNamespaceIsNotOwnPidNamespace) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"pid", "/proc/42/ns/pid"});
    EXPECT_FALSE(plan_of(s).own_pid_namespace());
}

TEST(Plan, NamespacePathBecomesAJoin) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"network", "/var/run/netns/blue"});
    auto p = plan_of(s);
    EXPECT_EQ(p.new_namespaces, 0);
    ASSERT_EQ(p.joins.size(), 1u);
    EXPECT_EQ(p.joins[0].clone_flag, CLONE_NEWNET);
    EXPECT_EQ(p.joins[0].type, "network");
    EXPECT_EQ(p.joins[0].path, "/var/run/netns/blue");
    EXPECT_TRUE(p.needs_intermediate());
}

TEST(Plan, UserNamespaceJoinComesFirst) {
    Spec s = minimal_spec();
    s.linux->namespaces = {Namespace{"network", "/proc/7/ns/net"}, Namespace{"ipc", "/proc/7/ns/ipc"},
                           Namespace{"user", "/proc/7/ns/user"}, Namespace{"uts", "/proc/7/ns/uts"}};
    auto p = plan_of(s);
    std::vector<std::string> order;
    for (const auto& j : p.joins) order.push_back(j.type);
    EXPECT_EQ(order, (std::vector<std::string>{"user", "network", "ipc", "uts"}));
}

TEST(Plan, UnknownNamespaceTypeIsAnError) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"net", ""});
    auto e = error_of(s);
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_EQ(e.what(), "linux.namespaces: unknown namespace type \"net\"");
}

TEST(Plan, NewMountNamespaceMeansHasMountNamespace) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"mount", ""});
    EXPECT_TRUE(plan_of(s).has_mount_namespace);
}

TEST(Plan, JoinedMountNamespaceMeansHasMountNamespace) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"mount", "/proc/7/ns/mnt"});
    EXPECT_TRUE(plan_of(s).has_mount_namespace);
}

TEST(Plan, NoMountNamespaceWhenNoneIsAsked) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"pid", ""});
    EXPECT_FALSE(plan_of(s).has_mount_namespace);
}

TEST(Plan, IdMappingsAreCopied) {
    Spec s = minimal_spec();
    s.linux->uid_mappings = {IdMapping{0, 100000, 65536}};
    s.linux->gid_mappings = {IdMapping{0, 200000, 1000}, IdMapping{1000, 1000, 1}};
    auto p = plan_of(s);
    ASSERT_EQ(p.uid_mappings.size(), 1u);
    EXPECT_EQ(p.uid_mappings[0].host_id, 100000u);
    ASSERT_EQ(p.gid_mappings.size(), 2u);
    EXPECT_EQ(p.gid_mappings[1].container_id, 1000u);
    EXPECT_EQ(p.gid_mappings[1].size, 1u);
}

TEST(Plan, SpecWithoutLinuxSectionPlansNoNamespaces) {
    Spec s = minimal_spec();
    s.linux.reset();
    auto p = plan_of(s);
    EXPECT_EQ(p.new_namespaces, 0);
    EXPECT_TRUE(p.joins.empty());
}

// ---- make_plan: root filesystem ----

TEST(Plan, RootIsRequired) {
    Spec s = minimal_spec();
    s.root.reset();
    auto e = error_of(s);
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_EQ(e.what(), "root: missing");
}

TEST(Plan, RelativeRootfsIsUnderTheBundle) {
    auto p = plan_of(minimal_spec());
    EXPECT_EQ(p.bundle, kBundle);
    EXPECT_EQ(p.rootfs, "/run/bundles/c1/rootfs");
}

TEST(Plan, AbsoluteRootfsIsKept) {
    Spec s = minimal_spec();
    s.root->path = "/var/lib/images/alpine/";
    EXPECT_EQ(plan_of(s).rootfs, "/var/lib/images/alpine");
}

TEST(Plan, RootfsPathIsCleaned) {
    Spec s = minimal_spec();
    s.root->path = "./images/../rootfs";
    EXPECT_EQ(plan_of(s).rootfs, "/run/bundles/c1/rootfs");
}

TEST(Plan, ReadonlyRootIsCarried) {
    Spec s = minimal_spec();
    s.root->readonly = true;
    EXPECT_TRUE(plan_of(s).rootfs_readonly);
}

TEST(Plan, RootPropagationDefaultsToRslave) {
    auto p = plan_of(minimal_spec());
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_SLAVE | MS_REC));
    EXPECT_EQ(p.rootfs_propagation_after, 0u);
}

TEST(Plan, RootfsPropagationPrivateAppliesToRootBeforeBuilding) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "private";
    auto p = plan_of(s);
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_PRIVATE));
    EXPECT_EQ(p.rootfs_propagation_after, 0u);
}

TEST(Plan, RootfsPropagationSlaveAppliesToRootBeforeBuilding) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "slave";
    auto p = plan_of(s);
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_SLAVE));
    EXPECT_EQ(p.rootfs_propagation_after, 0u);
}

// A shared "/" while building would leak the container's mounts to the host.
TEST(Plan, RootfsPropagationSharedIsAppliedAfterPivot) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "shared";
    auto p = plan_of(s);
    EXPECT_EQ(p.rootfs_propagation_after, static_cast<unsigned long>(MS_SHARED));
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_SLAVE | MS_REC));
}

TEST(Plan, RootfsPropagationRsharedIsAppliedAfterPivot) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "rshared";
    auto p = plan_of(s);
    EXPECT_EQ(p.rootfs_propagation_after, static_cast<unsigned long>(MS_SHARED | MS_REC));
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_SLAVE | MS_REC));
}

// An unbindable "/" could not be bound onto the rootfs.
TEST(Plan, RootfsPropagationUnbindableIsAppliedAfterPivot) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "unbindable";
    auto p = plan_of(s);
    EXPECT_EQ(p.rootfs_propagation_after, static_cast<unsigned long>(MS_UNBINDABLE));
    EXPECT_EQ(p.root_propagation, static_cast<unsigned long>(MS_SLAVE | MS_REC));
}

TEST(Plan, UnknownRootfsPropagationIsAnError) {
    Spec s = minimal_spec();
    s.linux->rootfs_propagation = "everywhere";
    EXPECT_EQ(error_of(s).what(), "unknown propagation \"everywhere\"");
}

// ---- make_plan: mounts ----

TEST(Plan, BindMountFromRelativeSourceIsMadeAbsoluteAgainstTheBundle) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "data", {"rbind"}));
    EXPECT_EQ(only_mount(plan_of(s)).source, "/run/bundles/c1/data");
}

TEST(Plan, BindMountFromAbsoluteSourceIsKept) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind"}));
    EXPECT_EQ(only_mount(plan_of(s)).source, "/srv/data");
}

TEST(Plan, NonBindSourceIsNotMadeAbsolute) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/tmp", "tmpfs", "tmpfs"));
    EXPECT_EQ(only_mount(plan_of(s)).source, "tmpfs");
}

TEST(Plan, MountDestinationIsCleaned) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("run//lock/", "tmpfs", "tmpfs"));
    EXPECT_EQ(only_mount(plan_of(s)).destination, "/run/lock");
}

TEST(Plan, BindOptionMakesABind) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "none", "/srv/data", {"bind"}));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Bind);
    EXPECT_FALSE(m.recursive_bind);
    EXPECT_EQ(m.flags.set, static_cast<unsigned long>(MS_BIND));
}

TEST(Plan, RbindOptionMakesARecursiveBind) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "", "/srv/data", {"rbind"}));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Bind);
    EXPECT_TRUE(m.recursive_bind);
}

// ---- make_plan: idmapped mounts ----

Spec with_user_namespace(Spec s) {
    s.linux->namespaces.push_back(Namespace{"user", ""});
    s.linux->uid_mappings = {IdMapping{0, 100000, 65536}};
    s.linux->gid_mappings = {IdMapping{0, 200000, 65536}};
    return s;
}

TEST(Plan, PlainBindIsNotIdmapped) {
    Spec s = with_user_namespace(minimal_spec());
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind"}));
    EXPECT_FALSE(only_mount(plan_of(s)).idmap);
}

TEST(Plan, IdmapWithoutMappingsTakesTheContainersMaps) {
    Spec s = with_user_namespace(minimal_spec());
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "idmap"}));
    auto m = only_mount(plan_of(s));
    ASSERT_TRUE(m.idmap);
    ASSERT_EQ(m.idmap->uids.size(), 1u);
    EXPECT_EQ(m.idmap->uids[0].host_id, 100000u);
    ASSERT_EQ(m.idmap->gids.size(), 1u);
    EXPECT_EQ(m.idmap->gids[0].host_id, 200000u);
    EXPECT_TRUE(m.idmap->userns_path.empty());
    EXPECT_FALSE(m.idmap->recursive);
}

TEST(Plan, RidmapIsRecursive) {
    Spec s = with_user_namespace(minimal_spec());
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "ridmap"}));
    auto m = only_mount(plan_of(s));
    ASSERT_TRUE(m.idmap);
    EXPECT_TRUE(m.idmap->recursive);
}

TEST(Plan, AMountsOwnMappingsWinAndNeedNoUserNamespace) {
    Spec s = minimal_spec();
    Mount m = mount("/data", "bind", "/srv/data", {"bind"});
    m.uid_mappings = {IdMapping{1000, 0, 1}};
    m.gid_mappings = {IdMapping{1000, 0, 1}, IdMapping{0, 1, 1}};
    s.mounts.push_back(m);
    auto step = only_mount(plan_of(s));
    ASSERT_TRUE(step.idmap);
    ASSERT_EQ(step.idmap->uids.size(), 1u);
    EXPECT_EQ(step.idmap->uids[0].container_id, 1000u);
    EXPECT_EQ(step.idmap->gids.size(), 2u);
    EXPECT_FALSE(step.idmap->recursive);
}

TEST(Plan, IdmapInAJoinedUserNamespaceTakesItsMaps) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"user", "/proc/42/ns/user"});
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"bind", "idmap"}));
    auto m = only_mount(plan_of(s));
    ASSERT_TRUE(m.idmap);
    EXPECT_EQ(m.idmap->userns_path, "/proc/42/ns/user");
    EXPECT_TRUE(m.idmap->uids.empty());
}

TEST(Plan, IdmapWithoutAnyMapsIsAnError) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"bind", "idmap"}));
    auto e = error_of(s);
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(e.what().find("mounts[0]: idmap without uidMappings and gidMappings"), std::string::npos) << e.what();
}

TEST(Plan, IdmapOfANonBindMountIsAnError) {
    Spec s = with_user_namespace(minimal_spec());
    s.mounts.push_back(mount("/tmp", "tmpfs", "tmpfs", {"idmap"}));
    EXPECT_EQ(error_of(s).what(), "mounts[0]: idmapped mounts are supported only for bind mounts");
}

TEST(Plan, UidMappingsWithoutGidMappingsIsAnError) {
    Spec s = minimal_spec();
    Mount m = mount("/data", "bind", "/srv/data", {"bind"});
    m.uid_mappings = {IdMapping{0, 0, 1}};
    s.mounts.push_back(m);
    EXPECT_EQ(error_of(s).what(), "mounts[0]: uidMappings and gidMappings go together (give both or neither)");
}

TEST(Plan, TypeBindWithoutTheBindOptionIsStillABind) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"nosuid"}));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Bind);
    EXPECT_FALSE(m.recursive_bind);
    EXPECT_NE(m.flags.set & MS_BIND, 0u);
}

TEST(Plan, TypeRbindWithoutOptionsIsARecursiveBind) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "rbind", "/srv/data"));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Bind);
    EXPECT_TRUE(m.recursive_bind);
    EXPECT_EQ(m.flags.set, static_cast<unsigned long>(MS_BIND | MS_REC));
}

// bind(2)-mounts ignore every flag but MS_BIND/MS_REC: the rest needs MS_REMOUNT.
TEST(Plan, BindMountWithRoNeedsARemount) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "ro"}));
    EXPECT_TRUE(only_mount(plan_of(s)).bind_needs_remount);
}

TEST(Plan, BindMountWithOnlyBindWordsNeedsNoRemount) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "rprivate"}));
    EXPECT_FALSE(only_mount(plan_of(s)).bind_needs_remount);
}

TEST(Plan, BindMountThatClearsAFlagNeedsARemount) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "suid"}));
    EXPECT_TRUE(only_mount(plan_of(s)).bind_needs_remount);
}

TEST(Plan, BindMountWithOnlyRwNeedsNoRemount) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/data", "bind", "/srv/data", {"rbind", "rw"}));
    EXPECT_FALSE(only_mount(plan_of(s)).bind_needs_remount);
}

TEST(Plan, BindOfDevMeansNoDeviceNodesAreCreated) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/dev/", "bind", "/dev", {"rbind"}));
    EXPECT_TRUE(plan_of(s).dev_is_bind_mounted);
}

TEST(Plan, TmpfsOnDevIsNotABindOfDev) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/dev", "tmpfs", "tmpfs", {"mode=755"}));
    EXPECT_FALSE(plan_of(s).dev_is_bind_mounted);
}

TEST(Plan, ProcSysfsAndCgroupMountsGetTheirOwnKinds) {
    Spec s = minimal_spec();
    s.mounts = {mount("/proc", "proc", "proc"), mount("/sys", "sysfs", "sysfs"),
                mount("/sys/fs/cgroup", "cgroup", "cgroup"), mount("/sys/fs/cgroup", "cgroup2", "cgroup2")};
    auto p = plan_of(s);
    ASSERT_EQ(p.mounts.size(), 4u);
    EXPECT_EQ(p.mounts[0].kind, MountKind::Proc);
    EXPECT_EQ(p.mounts[1].kind, MountKind::Sysfs);
    EXPECT_EQ(p.mounts[2].kind, MountKind::Cgroup);
    EXPECT_EQ(p.mounts[3].kind, MountKind::Cgroup);
}

TEST(Plan, OtherFilesystemKeepsTypeAndData) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/dev/shm", "tmpfs", "shm", {"nosuid", "size=65536k"}));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Other);
    EXPECT_EQ(m.fstype, "tmpfs");
    EXPECT_EQ(m.source, "shm");
    EXPECT_EQ(m.flags.data, "size=65536k");
}

TEST(Plan, MountWithNoTypeUsesTheSourceAsType) {
    Spec s = minimal_spec();
    s.mounts.push_back(mount("/tmp", "", "tmpfs"));
    auto m = only_mount(plan_of(s));
    EXPECT_EQ(m.kind, MountKind::Other);
    EXPECT_EQ(m.fstype, "tmpfs");
}

TEST(Plan, MountWithNoTypeAndNoSourceIsAnError) {
    Spec s = minimal_spec();
    s.mounts = {mount("/proc", "proc", "proc"), mount("/mystery", "", "")};
    auto e = error_of(s);
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_EQ(e.what(), "mounts[1]: no type for /mystery");
}

TEST(Plan, MountsKeepTheirOrder) {
    Spec s = minimal_spec();
    s.mounts = {mount("/proc", "proc", "proc"), mount("/dev", "tmpfs", "tmpfs"),
                mount("/dev/pts", "devpts", "devpts")};
    std::vector<std::string> order;
    for (const auto& m : plan_of(s).mounts) order.push_back(m.destination);
    EXPECT_EQ(order, (std::vector<std::string>{"/proc", "/dev", "/dev/pts"}));
}

// ---- make_plan: devices ----

TEST(Plan, DefaultDevicesAreAlwaysPlanned) {
    auto p = plan_of(minimal_spec());
    EXPECT_EQ(p.devices.size(), default_devices().size());
    EXPECT_NE(find_device(p, "/dev/null"), nullptr);
    EXPECT_NE(find_device(p, "/dev/tty"), nullptr);
}

TEST(Plan, LinuxDeviceOverridesTheDefaultOfTheSamePath) {
    Spec s = minimal_spec();
    Device d;
    d.type = "c";
    d.path = "/dev/null";
    d.major = 1;
    d.minor = 3;
    d.file_mode = 0600;
    d.uid = 1000;
    s.linux->devices.push_back(d);
    auto p = plan_of(s);
    EXPECT_EQ(std::count_if(p.devices.begin(), p.devices.end(),
                            [](const DeviceNode& n) { return n.path == "/dev/null"; }),
              1);
    const DeviceNode* null = find_device(p, "/dev/null");
    ASSERT_NE(null, nullptr);
    EXPECT_EQ(null->mode, 0600u);
    EXPECT_EQ(null->uid, 1000u);
    EXPECT_EQ(p.devices.size(), default_devices().size());
}

TEST(Plan, LinuxDeviceWithUncleanPathStillOverridesTheDefault) {
    Spec s = minimal_spec();
    Device d;
    d.type = "c";
    d.path = "/dev//zero";
    d.major = 1;
    d.minor = 5;
    d.file_mode = 0640;
    s.linux->devices.push_back(d);
    auto p = plan_of(s);
    EXPECT_EQ(p.devices.size(), default_devices().size());
    ASSERT_NE(find_device(p, "/dev/zero"), nullptr);
    EXPECT_EQ(find_device(p, "/dev/zero")->mode, 0640u);
}

TEST(Plan, LinuxDeviceWithoutModeOrOwnerGets0666AndRoot) {
    Spec s = minimal_spec();
    Device d;
    d.type = "b";
    d.path = "/dev/sda";
    d.major = 8;
    d.minor = 0;
    s.linux->devices.push_back(d);
    auto p = plan_of(s);
    const DeviceNode* sda = find_device(p, "/dev/sda");
    ASSERT_NE(sda, nullptr);
    EXPECT_EQ(sda->type, 'b');
    EXPECT_EQ(sda->major, 8u);
    EXPECT_EQ(sda->minor, 0u);
    EXPECT_EQ(sda->mode, 0666u);
    EXPECT_EQ(sda->uid, 0u);
    EXPECT_EQ(sda->gid, 0u);
    EXPECT_EQ(p.devices.size(), default_devices().size() + 1);
}

// ---- make_plan: device rules (Plan::resources) ----

bool is_deny_all(const DeviceRule& r) {
    return !r.allow && r.type == "a" && !r.major && !r.minor && r.access == "rwm";
}

TEST(Plan, WithoutLinuxResourcesTheDeviceRulesAreADenyAll) {
    // runc's specconv: a container never keeps its parent's device access.
    Spec s = minimal_spec();
    auto p = plan_of(s);
    ASSERT_EQ(p.resources.devices.size(), 1u);
    EXPECT_TRUE(is_deny_all(p.resources.devices[0]));
    s.linux.reset();
    p = plan_of(s);
    ASSERT_EQ(p.resources.devices.size(), 1u);
    EXPECT_TRUE(is_deny_all(p.resources.devices[0]));
}

TEST(Plan, ResourcesWithoutDeviceRulesGetADenyAllAndKeepTheirLimits) {
    Spec s = minimal_spec();
    s.linux->resources = Resources{};
    s.linux->resources->pids_limit = 42;
    auto p = plan_of(s);
    ASSERT_EQ(p.resources.devices.size(), 1u);
    EXPECT_TRUE(is_deny_all(p.resources.devices[0]));
    EXPECT_EQ(p.resources.pids_limit, 42);
}

TEST(Plan, TheSpecsDeviceRulesAreKeptAsTheyAre) {
    Spec s = minimal_spec();
    s.linux->resources = Resources{};
    s.linux->resources->devices = {DeviceRule{true, "c", 10, 229, "rw"}};
    auto p = plan_of(s);
    ASSERT_EQ(p.resources.devices.size(), 1u);  // no deny-all added: create starts from one anyway
    EXPECT_TRUE(p.resources.devices[0].allow);
    EXPECT_EQ(p.resources.devices[0].major, 10);
}

TEST(Plan, ARootlessPlanHasNoDeviceRulesButKeepsItsLimits) {
    Spec s = minimal_spec();
    s.linux->resources = Resources{};
    s.linux->resources->devices = {DeviceRule{false, "a", std::nullopt, std::nullopt, "rwm"}};
    s.linux->resources->pids_limit = 7;
    auto p = make_plan(s, PlanOptions{"c1", kBundle, false});
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_TRUE(p->resources.devices.empty());
    EXPECT_EQ(p->resources.pids_limit, 7);
    s.linux->resources.reset();
    p = make_plan(s, PlanOptions{"c1", kBundle, false});
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_TRUE(p->resources.devices.empty());
}

// ---- make_plan: paths, identity, process, cgroups, hooks ----

TEST(Plan, MaskedAndReadonlyPathsAreCleaned) {
    Spec s = minimal_spec();
    s.linux->masked_paths = {"/proc/kcore", "proc//keys/"};
    s.linux->readonly_paths = {"/proc/sys/../bus"};
    auto p = plan_of(s);
    EXPECT_EQ(p.masked_paths, (std::vector<std::string>{"/proc/kcore", "/proc/keys"}));
    EXPECT_EQ(p.readonly_paths, (std::vector<std::string>{"/proc/bus"}));
}

TEST(Plan, HostnameIsSetOnlyWhenGiven) {
    Spec s = minimal_spec();
    s.hostname = "box";
    auto p = plan_of(s);
    EXPECT_TRUE(p.set_hostname);
    EXPECT_EQ(p.hostname, "box");
    EXPECT_FALSE(p.set_domainname);
}

TEST(Plan, DomainnameIsSetOnlyWhenGiven) {
    Spec s = minimal_spec();
    s.domainname = "example.org";
    auto p = plan_of(s);
    EXPECT_TRUE(p.set_domainname);
    EXPECT_EQ(p.domainname, "example.org");
    EXPECT_FALSE(p.set_hostname);
}

TEST(Plan, SysctlsAreCopied) {
    Spec s = minimal_spec();
    s.linux->sysctl = {{"net.ipv4.ip_forward", "1"}};
    auto p = plan_of(s);
    ASSERT_EQ(p.sysctl.size(), 1u);
    EXPECT_EQ(p.sysctl[0].first, "net.ipv4.ip_forward");
    EXPECT_EQ(p.sysctl[0].second, "1");
}

TEST(Plan, PersonalityDomainBecomesAPersona) {
    Spec s = minimal_spec();
    EXPECT_FALSE(plan_of(s).personality.has_value());
    s.linux->personality = Personality{"LINUX32", {}};
    EXPECT_EQ(plan_of(s).personality, 0x0008ul);  // PER_LINUX32
    s.linux->personality = Personality{"LINUX", {}};
    EXPECT_EQ(plan_of(s).personality, 0ul);  // PER_LINUX
}

TEST(Plan, TimeOffsetsAreCopied) {
    Spec s = minimal_spec();
    s.linux->time_offsets = {{"monotonic", TimeOffset{86400, 5}}};
    auto p = plan_of(s);
    ASSERT_EQ(p.time_offsets.size(), 1u);
    EXPECT_EQ(p.time_offsets[0].first, "monotonic");
    EXPECT_EQ(p.time_offsets[0].second.secs, 86400);
    EXPECT_EQ(p.time_offsets[0].second.nanosecs, 5u);
}

TEST(Plan, ProcessIsCopied) {
    Spec s = minimal_spec();
    s.process->args = {"/bin/echo", "hi"};
    s.process->env = {"PATH=/bin"};
    s.process->cwd = "/work";
    auto p = plan_of(s);
    EXPECT_EQ(p.process.args, (std::vector<std::string>{"/bin/echo", "hi"}));
    EXPECT_EQ(p.process.env, (std::vector<std::string>{"PATH=/bin"}));
    EXPECT_EQ(p.process.cwd, "/work");
}

TEST(Plan, CwdDefaultsToRoot) {
    Spec s = minimal_spec();
    s.process->cwd = "";
    EXPECT_EQ(plan_of(s).process.cwd, "/");
}

TEST(Plan, WithTheSystemdDriverTheCgroupIsTheUnitsInItsSlice) {
    Spec s = minimal_spec();
    s.linux->cgroups_path = "machine-pods.slice:libpod:web-1";
    auto p = make_plan(s, PlanOptions{.id = "web-1", .bundle = kBundle, .systemd_cgroup = true});
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(p->cgroups_path, "/machine.slice/machine-pods.slice/libpod-web-1.scope");
    EXPECT_EQ(p->systemd_unit, "libpod-web-1.scope");
    EXPECT_EQ(p->systemd_slice, "machine-pods.slice");
    s.linux->cgroups_path = "/machine/web";
    auto bad = make_plan(s, PlanOptions{.id = "web-1", .bundle = kBundle, .systemd_cgroup = true});
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().what().find("slice:prefix:name"), std::string::npos);
    // Without the driver the cgroupfs path is as it always was.
    EXPECT_TRUE(plan_of(s).systemd_unit.empty());
}

TEST(Plan, CgroupsPathAbsentIsForkboxSlashId) {
    EXPECT_EQ(plan_of(minimal_spec(), "web-1").cgroups_path, "/forkbox/web-1");
}

TEST(Plan, CgroupsPathAbsoluteIsKeptCleaned) {
    Spec s = minimal_spec();
    s.linux->cgroups_path = "/machine//web/";
    EXPECT_EQ(plan_of(s).cgroups_path, "/machine/web");
}

TEST(Plan, CgroupsPathRelativeIsUnderForkbox) {
    Spec s = minimal_spec();
    s.linux->cgroups_path = "tenant/web";
    EXPECT_EQ(plan_of(s).cgroups_path, "/forkbox/tenant/web");
}

TEST(Plan, CgroupsPathRelativeCannotClimbAboveRoot) {
    Spec s = minimal_spec();
    s.linux->cgroups_path = "../../../escape";
    EXPECT_EQ(plan_of(s).cgroups_path, "/escape");
}

TEST(Plan, HooksAreCopiedIntoTheirStages) {
    Spec s = minimal_spec();
    s.hooks = Hooks{};
    s.hooks->prestart = {hook("/bin/prestart")};
    s.hooks->create_runtime = {hook("/bin/create-runtime"), hook("/bin/create-runtime-2")};
    s.hooks->create_container = {hook("/bin/create-container")};
    s.hooks->start_container = {hook("/bin/start-container")};
    s.hooks->poststart = {hook("/bin/poststart")};
    s.hooks->poststop = {hook("/bin/poststop")};
    auto p = plan_of(s);
    ASSERT_EQ(p.hooks.prestart.size(), 1u);
    EXPECT_EQ(p.hooks.prestart[0].path, "/bin/prestart");
    ASSERT_EQ(p.hooks.create_runtime.size(), 2u);
    EXPECT_EQ(p.hooks.create_runtime[0].path, "/bin/create-runtime");
    EXPECT_EQ(p.hooks.create_runtime[1].path, "/bin/create-runtime-2");
    ASSERT_EQ(p.hooks.create_container.size(), 1u);
    EXPECT_EQ(p.hooks.create_container[0].path, "/bin/create-container");
    ASSERT_EQ(p.hooks.start_container.size(), 1u);
    EXPECT_EQ(p.hooks.start_container[0].path, "/bin/start-container");
    ASSERT_EQ(p.hooks.poststart.size(), 1u);
    EXPECT_EQ(p.hooks.poststart[0].path, "/bin/poststart");
    ASSERT_EQ(p.hooks.poststop.size(), 1u);
    EXPECT_EQ(p.hooks.poststop[0].path, "/bin/poststop");
}

TEST(Plan, HookArgsEnvAndTimeoutAreCopied) {
    Spec s = minimal_spec();
    Hook h = hook("/bin/hook");
    h.args = {"hook", "--flag"};
    h.env = {"A=1"};
    h.timeout = 5;
    s.hooks = Hooks{};
    s.hooks->poststop = {h};
    auto p = plan_of(s);
    ASSERT_EQ(p.hooks.poststop.size(), 1u);
    EXPECT_EQ(p.hooks.poststop[0].args, (std::vector<std::string>{"hook", "--flag"}));
    EXPECT_EQ(p.hooks.poststop[0].env, (std::vector<std::string>{"A=1"}));
    EXPECT_EQ(p.hooks.poststop[0].timeout, 5);
}

TEST(Plan, NoHooksMeansEmptyStages) {
    auto p = plan_of(minimal_spec());
    EXPECT_TRUE(p.hooks.prestart.empty());
    EXPECT_TRUE(p.hooks.poststop.empty());
}

// ---- make_plan: what is not built is refused, never dropped ----

TEST(Plan, NetDevicesArePlannedWithTheirNamesInside) {
    Spec s = minimal_spec();
    s.linux->namespaces.push_back(Namespace{"network", ""});
    s.linux->net_devices["eth1"] = NetDevice{"ctr0"};
    s.linux->net_devices["dummy0"] = NetDevice{""};
    auto p = plan_of(s);
    ASSERT_EQ(p.net_devices.size(), 2u);
    EXPECT_EQ(p.net_devices[0].host_name, "dummy0");
    EXPECT_EQ(p.net_devices[0].container_name, "dummy0");  // no name: the host's
    EXPECT_EQ(p.net_devices[1].host_name, "eth1");
    EXPECT_EQ(p.net_devices[1].container_name, "ctr0");
}

TEST(Plan, IntelRdtIsRefusedNotIgnored) {
    Spec s = minimal_spec();
    s.linux->intel_rdt = IntelRdt{};
    s.linux->intel_rdt->clos_id = "g";
    EXPECT_EQ(error_of(s).errnum(), EOPNOTSUPP);
}

// ---- process.scheduler, process.ioPriority, linux.memoryPolicy, CPU lists ----

TEST(Scheduler, NamesBecomeTheKernelsNumbers) {
    oci::Scheduler s;
    s.policy = "SCHED_DEADLINE";
    s.flags = {"SCHED_FLAG_RESET_ON_FORK", "SCHED_FLAG_DL_OVERRUN"};
    s.runtime = 10;
    s.deadline = 20;
    s.period = 30;
    auto a = scheduler_attr(s);
    EXPECT_EQ(a.policy, 6u);
    EXPECT_EQ(a.flags, 0x05u);
    EXPECT_EQ(a.runtime, 10u);
    EXPECT_EQ(a.deadline, 20u);
    EXPECT_EQ(a.period, 30u);
    s = oci::Scheduler{};
    s.policy = "SCHED_BATCH";
    s.nice = -3;
    a = scheduler_attr(s);
    EXPECT_EQ(a.policy, 3u);
    EXPECT_EQ(a.nice, -3);
    EXPECT_EQ(a.priority, 0u);
}

TEST(IoPriority, ClassAboveThirteenBitsOfLevel) {
    EXPECT_EQ(io_priority_value(oci::IoPriority{"IOPRIO_CLASS_BE", 4}), (2 << 13) | 4);
    EXPECT_EQ(io_priority_value(oci::IoPriority{"IOPRIO_CLASS_IDLE", 0}), 3 << 13);
}

TEST(IdList, RangesAndSinglesBecomeBits) {
    auto m = parse_id_list("0-2,5,64", "cpus");
    ASSERT_TRUE(m) << m.error().what();
    ASSERT_EQ(m->size(), 2u);
    EXPECT_EQ((*m)[0], 0x27u);
    EXPECT_EQ((*m)[1], 1u);
    auto empty = parse_id_list("", "cpus");
    ASSERT_TRUE(empty);
    EXPECT_TRUE(empty->empty());
}

TEST(IdList, MalformedListsAreErrorsNamingTheField) {
    for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1,", "4096", "1 2"}) {
        auto m = parse_id_list(bad, "process.execCPUAffinity.final");
        ASSERT_FALSE(m) << bad;
        EXPECT_EQ(m.error().what(), std::string("process.execCPUAffinity.final: invalid list \"") + bad + "\"");
    }
}

TEST(MemoryPolicy, ModeFlagsAndNodes) {
    auto p = memory_policy_plan(oci::MemoryPolicy{"MPOL_INTERLEAVE", "0-1", {"MPOL_F_STATIC_NODES"}});
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(p->mode, 3 | (1 << 15));
    ASSERT_EQ(p->nodes.size(), 1u);
    EXPECT_EQ(p->nodes[0], 3u);
}

TEST(MemoryPolicy, NodesWhereTheModeNeedsThemOnly) {
    EXPECT_FALSE(memory_policy_plan(oci::MemoryPolicy{"MPOL_BIND", "", {}}));
    EXPECT_FALSE(memory_policy_plan(oci::MemoryPolicy{"MPOL_LOCAL", "0", {}}));
    EXPECT_TRUE(memory_policy_plan(oci::MemoryPolicy{"MPOL_DEFAULT", "", {}}));
    EXPECT_TRUE(memory_policy_plan(oci::MemoryPolicy{"MPOL_PREFERRED", "", {}}));
}

TEST(Plan, MemoryPolicyIsPlanned) {
    Spec s = minimal_spec();
    s.linux->memory_policy = oci::MemoryPolicy{"MPOL_BIND", "0", {}};
    auto p = plan_of(s);
    ASSERT_TRUE(p.memory_policy);
    EXPECT_EQ(p.memory_policy->mode, 2);
}
