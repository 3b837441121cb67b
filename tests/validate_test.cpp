#include "oci/validate.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace forkbox;
using namespace forkbox::oci;

namespace {

// The smallest spec that validates: a rootfs, a process and the usual namespaces.
Spec valid_spec() {
    Spec s;
    s.oci_version = "1.3.0";
    s.root = Root{"rootfs", false};
    s.process = Process{};
    s.process->args = {"sh"};
    s.process->cwd = "/";
    s.linux = Linux{};
    for (const char* t : {"pid", "network", "ipc", "uts", "mount"})
        s.linux->namespaces.push_back(Namespace{t, ""});
    return s;
}

void remove_namespace(Spec& s, const std::string& type) {
    auto& v = s.linux->namespaces;
    std::erase_if(v, [&](const Namespace& n) { return n.type == type; });
}

std::string error_of(const Spec& s) {
    auto r = validate(s);
    EXPECT_FALSE(r.has_value()) << "validated";
    return r ? std::string() : r.error().context();
}

void expect_valid(const Spec& s) {
    auto r = validate(s);
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().context());
}

}  // namespace

TEST(Validate, MinimalSpecIsValid) { expect_valid(valid_spec()); }

// ---- root and process ----

TEST(Validate, RootIsRequired) {
    Spec s = valid_spec();
    s.root.reset();
    EXPECT_EQ(error_of(s), "root: required to create a container");
}

TEST(Validate, RootPathMustNotBeEmpty) {
    Spec s = valid_spec();
    s.root->path = "";
    EXPECT_EQ(error_of(s), "root.path: must not be empty");
}

TEST(Validate, ProcessIsRequired) {
    Spec s = valid_spec();
    s.process.reset();
    EXPECT_EQ(error_of(s), "process: required to create a container");
}

TEST(Validate, ArgsMustNotBeEmpty) {
    Spec s = valid_spec();
    s.process->args.clear();
    EXPECT_EQ(error_of(s), "process.args: must not be empty");
}

TEST(Validate, CwdMustBeAbsolute) {
    Spec s = valid_spec();
    s.process->cwd = "home";
    EXPECT_EQ(error_of(s), "process.cwd: must be an absolute path, got \"home\"");
}

TEST(Validate, EnvEntriesNeedAnEqualsSign) {
    Spec s = valid_spec();
    s.process->env = {"A=1", "B"};
    EXPECT_EQ(error_of(s), "process.env[1]: \"B\" is not of the form NAME=VALUE");
}

TEST(Validate, UnknownCapabilityNamesTheSet) {
    Spec s = valid_spec();
    s.process->capabilities = Capabilities{};
    s.process->capabilities->bounding = {"CAP_KILL", "CAP_FOO"};
    EXPECT_EQ(error_of(s), "process.capabilities.bounding: unknown capability \"CAP_FOO\"");
}

TEST(Validate, CapabilitiesCheckedInAllFiveSets) {
    for (auto set : {&Capabilities::bounding, &Capabilities::effective, &Capabilities::inheritable,
                     &Capabilities::permitted, &Capabilities::ambient}) {
        Spec s = valid_spec();
        s.process->capabilities = Capabilities{};
        ((*s.process->capabilities).*set) = {"CAP_NOPE"};
        EXPECT_NE(error_of(s).find("unknown capability \"CAP_NOPE\""), std::string::npos);
    }
}

TEST(Validate, UnknownRlimitIsAnError) {
    Spec s = valid_spec();
    s.process->rlimits = {{"RLIMIT_NOFILE", 10, 10}, {"RLIMIT_FOO", 1, 1}};
    EXPECT_EQ(error_of(s), "process.rlimits[1].type: unknown rlimit \"RLIMIT_FOO\"");
}

TEST(Validate, DuplicateRlimitIsAnError) {
    Spec s = valid_spec();
    s.process->rlimits = {{"RLIMIT_NOFILE", 10, 10}, {"RLIMIT_NOFILE", 20, 20}};
    EXPECT_EQ(error_of(s), "process.rlimits[1].type: duplicate rlimit \"RLIMIT_NOFILE\"");
}

TEST(Validate, SoftAboveHardIsLeftToTheKernel) {
    Spec s = valid_spec();
    s.process->rlimits = {{"RLIMIT_NOFILE", 10, 20}};
    expect_valid(s);
}

TEST(Validate, SchedulerPriorityOnlyForRealtimePolicies) {
    Spec s = valid_spec();
    s.process->scheduler = Scheduler{};
    s.process->scheduler->policy = "SCHED_OTHER";
    s.process->scheduler->priority = 5;
    EXPECT_EQ(error_of(s), "process.scheduler.priority: can only be set for SCHED_FIFO or SCHED_RR");
}

TEST(Validate, SchedulerNiceRange) {
    Spec s = valid_spec();
    s.process->scheduler = Scheduler{};
    s.process->scheduler->policy = "SCHED_BATCH";
    s.process->scheduler->nice = 20;
    EXPECT_EQ(error_of(s), "process.scheduler.nice: must be between -20 and 19, got 20");
}

TEST(Validate, IoPriorityClassAndRange) {
    Spec s = valid_spec();
    s.process->io_priority = IoPriority{"IOPRIO_CLASS_RT", 8};
    EXPECT_EQ(error_of(s), "process.ioPriority.priority: must be between 0 and 7, got 8");
    s.process->io_priority = IoPriority{"IOPRIO_CLASS_NONE", 0};
    EXPECT_EQ(error_of(s), "process.ioPriority.class: unknown I/O priority class \"IOPRIO_CLASS_NONE\"");
}

TEST(ValidateProcess, UsesTheGivenPathPrefix) {
    Process p;
    p.cwd = "/";
    auto r = validate_process(p, "exec process");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context(), "exec process.args: must not be empty");
}

// ---- namespaces ----

TEST(Validate, UnknownNamespaceType) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"net", ""});
    EXPECT_EQ(error_of(s), "linux.namespaces[5].type: unknown namespace type \"net\"");
}

TEST(Validate, DuplicateNamespaceType) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"pid", "/proc/1/ns/pid"});
    EXPECT_EQ(error_of(s), "linux.namespaces[5].type: duplicate namespace type \"pid\"");
}

TEST(Validate, NamespacePathMustBeAbsolute) {
    Spec s = valid_spec();
    s.linux->namespaces[1].path = "netns/x";
    EXPECT_EQ(error_of(s), "linux.namespaces[1].path: must be an absolute path, got \"netns/x\"");
}

TEST(Validate, MappingsRequireUserNamespace) {
    Spec s = valid_spec();
    s.linux->uid_mappings = {{0, 1000, 1}};
    EXPECT_NE(error_of(s).find("no user namespace"), std::string::npos);
}

TEST(Validate, NewUserNamespaceNeedsMappings) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"user", ""});
    EXPECT_EQ(error_of(s), "linux.uidMappings: a new user namespace needs uid mappings");
    s.linux->uid_mappings = {{0, 1000, 1}};
    EXPECT_EQ(error_of(s), "linux.gidMappings: a new user namespace needs gid mappings");
    s.linux->gid_mappings = {{0, 1000, 1}};
    expect_valid(s);
}

TEST(Validate, JoinedUserNamespaceNeedsNoMappings) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"user", "/proc/42/ns/user"});
    expect_valid(s);
}

TEST(Validate, MappingSizeMustBePositive) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"user", ""});
    s.linux->uid_mappings = {{0, 1000, 0}};
    s.linux->gid_mappings = {{0, 1000, 1}};
    EXPECT_EQ(error_of(s), "linux.uidMappings[0].size: must be greater than 0");
}

TEST(Validate, HostnameNeedsUtsNamespace) {
    Spec s = valid_spec();
    s.hostname = "box";
    expect_valid(s);
    remove_namespace(s, "uts");
    EXPECT_EQ(error_of(s), "hostname: unable to set hostname without a private UTS namespace");
}

TEST(Validate, DomainnameNeedsUtsNamespace) {
    Spec s = valid_spec();
    s.domainname = "example.org";
    remove_namespace(s, "uts");
    EXPECT_EQ(error_of(s), "domainname: unable to set domainname without a private UTS namespace");
}

TEST(Validate, HostnameWithoutLinuxSectionIsAnError) {
    Spec s = valid_spec();
    s.linux.reset();
    s.hostname = "box";
    EXPECT_FALSE(validate(s));
}

TEST(Validate, TimeOffsetsNeedTimeNamespace) {
    Spec s = valid_spec();
    s.linux->time_offsets["monotonic"] = TimeOffset{10, 0};
    EXPECT_NE(error_of(s).find("no time namespace"), std::string::npos);
    s.linux->namespaces.push_back({"time", ""});
    expect_valid(s);
}

TEST(Validate, TimeOffsetClockMustBeKnown) {
    Spec s = valid_spec();
    s.linux->namespaces.push_back({"time", ""});
    s.linux->time_offsets["realtime"] = TimeOffset{10, 0};
    EXPECT_EQ(error_of(s), "linux.timeOffsets.realtime: unknown clock (expected monotonic or boottime)");
}

// ---- sysctl ----

TEST(ValidateSysctl, NetNeedsNetworkNamespace) {
    Spec s = valid_spec();
    s.linux->sysctl["net.ipv4.ip_forward"] = "1";
    expect_valid(s);
    remove_namespace(s, "network");
    EXPECT_EQ(error_of(s),
              "linux.sysctl: \"net.ipv4.ip_forward\" is not allowed without a private network namespace");
}

TEST(ValidateSysctl, IpcKeysNeedIpcNamespace) {
    for (const char* key : {"kernel.shmmax", "kernel.msgmnb", "kernel.sem", "fs.mqueue.msg_max"}) {
        Spec s = valid_spec();
        s.linux->sysctl[key] = "1";
        expect_valid(s);
        remove_namespace(s, "ipc");
        EXPECT_NE(error_of(s).find("without a private IPC namespace"), std::string::npos) << key;
    }
}

TEST(ValidateSysctl, DomainnameNeedsUtsNamespace) {
    Spec s = valid_spec();
    s.linux->sysctl["kernel.domainname"] = "x";
    expect_valid(s);
    remove_namespace(s, "uts");
    EXPECT_NE(error_of(s).find("without a private UTS namespace"), std::string::npos);
}

TEST(ValidateSysctl, HostnameConflictsWithTheHostnameField) {
    Spec s = valid_spec();
    s.linux->sysctl["kernel.hostname"] = "x";
    EXPECT_NE(error_of(s).find("conflicts with the OCI \"hostname\" field"), std::string::npos);
}

TEST(ValidateSysctl, NonNamespacedKeysAreRefused) {
    Spec s = valid_spec();
    s.linux->sysctl["vm.swappiness"] = "10";
    EXPECT_EQ(error_of(s), "linux.sysctl: \"vm.swappiness\" is not in a separate kernel namespace");
}

TEST(ValidateSysctl, SlashSeparatorIsAccepted) {
    Spec s = valid_spec();
    s.linux->sysctl["net/ipv4/conf/eno2.100/rp_filter"] = "1";
    s.linux->sysctl["kernel/shmmax"] = "1";
    expect_valid(s);
}

// ---- filesystem ----

TEST(Validate, MountDestinationMustNotBeEmpty) {
    Spec s = valid_spec();
    s.mounts = {Mount{"/proc", "proc", "proc", {}, {}, {}}, Mount{"", "tmpfs", "tmpfs", {}, {}, {}}};
    EXPECT_EQ(error_of(s), "mounts[1].destination: must not be empty");
}

TEST(Validate, RelativeMountDestinationIsAccepted) {
    Spec s = valid_spec();
    s.mounts = {Mount{"tmp", "tmpfs", "tmpfs", {}, {}, {}}};
    expect_valid(s);
}

TEST(Validate, IdmappedMountMustBeABind) {
    Spec s = valid_spec();
    s.mounts = {Mount{"/data", "tmpfs", "tmpfs", {}, {{0, 1000, 1}}, {{0, 1000, 1}}}};
    EXPECT_EQ(error_of(s), "mounts[0]: uidMappings/gidMappings are supported only for bind mounts");
    s.mounts[0].options = {"rbind"};
    expect_valid(s);
}

TEST(Validate, MaskedPathsMustBeAbsolute) {
    Spec s = valid_spec();
    s.linux->masked_paths = {"/proc/kcore", "proc/keys"};
    EXPECT_EQ(error_of(s), "linux.maskedPaths[1]: must be an absolute path, got \"proc/keys\"");
}

TEST(Validate, MaskedPathsNeedMountNamespace) {
    Spec s = valid_spec();
    s.linux->readonly_paths = {"/proc/sys"};
    remove_namespace(s, "mount");
    EXPECT_NE(error_of(s).find("private mount namespace"), std::string::npos);
}

TEST(Validate, HookPathMustBeAbsolute) {
    Spec s = valid_spec();
    s.hooks = Hooks{};
    s.hooks->poststop = {Hook{"/bin/true", {}, {}, {}}, Hook{"true", {}, {}, {}}};
    EXPECT_EQ(error_of(s), "hooks.poststop[1].path: must be an absolute path, got \"true\"");
}

TEST(Validate, HookTimeoutMustBePositive) {
    Spec s = valid_spec();
    s.hooks = Hooks{};
    s.hooks->create_runtime = {Hook{"/bin/true", {}, {}, 0}};
    EXPECT_EQ(error_of(s), "hooks.createRuntime[0].timeout: must be greater than 0");
}

TEST(Validate, DeviceTypeMustBeKnown) {
    Spec s = valid_spec();
    s.linux->devices = {Device{"x", "/dev/x", 1, 1, {}, {}, {}}};
    EXPECT_EQ(error_of(s), "linux.devices[0].type: unknown device type \"x\" (expected c, b, u or p)");
}

TEST(Validate, DevicePathMustBeAbsolute) {
    Spec s = valid_spec();
    s.linux->devices = {Device{"c", "dev/fuse", 10, 229, {}, {}, {}}};
    EXPECT_EQ(error_of(s), "linux.devices[0].path: must be an absolute path, got \"dev/fuse\"");
}

TEST(Validate, RootfsPropagationMustBeKnown) {
    Spec s = valid_spec();
    for (const char* p : {"", "private", "rprivate", "slave", "rslave", "shared", "rshared",
                          "unbindable", "runbindable"}) {
        s.linux->rootfs_propagation = p;
        expect_valid(s);
    }
    s.linux->rootfs_propagation = "rbind";
    EXPECT_EQ(error_of(s), "linux.rootfsPropagation: unknown propagation \"rbind\"");
}

// ---- resources ----

TEST(ValidateResources, DeviceRuleAccessIsRwm) {
    Spec s = valid_spec();
    s.linux->resources = Resources{};
    s.linux->resources->devices = {DeviceRule{false, "", {}, {}, "rwm"},
                                   DeviceRule{true, "c", 1, 3, "rwx"}};
    EXPECT_EQ(error_of(s),
              "linux.resources.devices[1].access: \"rwx\" is not a combination of r, w and m");
}

TEST(ValidateResources, SwappinessAtMostHundred) {
    Spec s = valid_spec();
    s.linux->resources = Resources{};
    s.linux->resources->memory = MemoryResources{};
    s.linux->resources->memory->swappiness = 101;
    EXPECT_EQ(error_of(s), "linux.resources.memory.swappiness: must be between 0 and 100, got 101");
}

TEST(ValidateResources, UnifiedKeysAreFileNames) {
    Spec s = valid_spec();
    s.linux->resources = Resources{};
    s.linux->resources->unified["../memory.max"] = "1";
    EXPECT_NE(error_of(s).find("must be a cgroup file name"), std::string::npos);
}

// ---- seccomp ----

Spec seccomp_spec() {
    Spec s = valid_spec();
    s.linux->seccomp = Seccomp{};
    s.linux->seccomp->default_action = "SCMP_ACT_ALLOW";
    SeccompSyscall sys;
    sys.names = {"mount"};
    sys.action = "SCMP_ACT_ERRNO";
    sys.errno_ret = 1;
    sys.args = {SeccompArg{0, 1, 0, "SCMP_CMP_EQ"}};
    s.linux->seccomp->syscalls = {sys};
    return s;
}

TEST(ValidateSeccomp, WellFormedProfileIsValid) { expect_valid(seccomp_spec()); }

TEST(ValidateSeccomp, UnknownDefaultAction) {
    Spec s = seccomp_spec();
    s.linux->seccomp->default_action = "SCMP_ACT_MAYBE";
    EXPECT_EQ(error_of(s), "linux.seccomp.defaultAction: unknown action \"SCMP_ACT_MAYBE\"");
}

TEST(ValidateSeccomp, UnknownSyscallAction) {
    Spec s = seccomp_spec();
    s.linux->seccomp->syscalls[0].action = "ALLOW";
    EXPECT_EQ(error_of(s), "linux.seccomp.syscalls[0].action: unknown action \"ALLOW\"");
}

TEST(ValidateSeccomp, UnknownOperator) {
    Spec s = seccomp_spec();
    s.linux->seccomp->syscalls[0].args[0].op = "SCMP_CMP_APPROX";
    EXPECT_EQ(error_of(s), "linux.seccomp.syscalls[0].args[0].op: unknown operator \"SCMP_CMP_APPROX\"");
}

TEST(ValidateSeccomp, ErrnoRetOnlyWithErrnoOrTrace) {
    Spec s = seccomp_spec();
    s.linux->seccomp->syscalls[0].action = "SCMP_ACT_KILL";
    EXPECT_EQ(error_of(s),
              "linux.seccomp.syscalls[0].errnoRet: only valid with SCMP_ACT_ERRNO or SCMP_ACT_TRACE");
}

TEST(ValidateSeccomp, NamesMustNotBeEmpty) {
    Spec s = seccomp_spec();
    s.linux->seccomp->syscalls[0].names.clear();
    EXPECT_EQ(error_of(s), "linux.seccomp.syscalls[0].names: must contain at least one name");
}

TEST(ValidateSeccomp, UnknownArchitecture) {
    Spec s = seccomp_spec();
    s.linux->seccomp->architectures = {"SCMP_ARCH_X86_64", "SCMP_ARCH_Z80"};
    EXPECT_EQ(error_of(s), "linux.seccomp.architectures: unknown architecture \"SCMP_ARCH_Z80\"");
}

TEST(ValidateSeccomp, NotifyNeedsListenerPath) {
    Spec s = seccomp_spec();
    s.linux->seccomp->syscalls[0].action = "SCMP_ACT_NOTIFY";
    s.linux->seccomp->syscalls[0].errno_ret.reset();
    EXPECT_NE(error_of(s).find("requires linux.seccomp.listenerPath"), std::string::npos);
    s.linux->seccomp->listener_path = "/run/agent.sock";
    expect_valid(s);
}

TEST(ValidateSeccomp, NotifyCannotBeTheDefault) {
    Spec s = seccomp_spec();
    s.linux->seccomp->default_action = "SCMP_ACT_NOTIFY";
    s.linux->seccomp->listener_path = "/run/agent.sock";
    EXPECT_NE(error_of(s).find("cannot be the default action"), std::string::npos);
}

// ---- the rest of linux ----

TEST(Validate, PersonalityDomain) {
    Spec s = valid_spec();
    s.linux->personality = Personality{"LINUX32", {}};
    expect_valid(s);
    s.linux->personality->domain = "SVR4";
    EXPECT_EQ(error_of(s), "linux.personality.domain: unknown domain \"SVR4\" (expected LINUX or LINUX32)");
}

TEST(Validate, IntelRdtClosIdIsADirectoryName) {
    Spec s = valid_spec();
    s.linux->intel_rdt = IntelRdt{};
    s.linux->intel_rdt->clos_id = "../x";
    EXPECT_EQ(error_of(s), "linux.intelRdt.closID: invalid \"../x\"");
}

TEST(Validate, MemoryPolicyModeMustBeKnown) {
    Spec s = valid_spec();
    s.linux->memory_policy = MemoryPolicy{"MPOL_RANDOM", "", {}};
    EXPECT_EQ(error_of(s), "linux.memoryPolicy.mode: unknown mode \"MPOL_RANDOM\"");
}

TEST(Validate, NetDevicesNeedNetworkNamespace) {
    Spec s = valid_spec();
    s.linux->net_devices["eth1"] = NetDevice{"ctr0"};
    expect_valid(s);
    remove_namespace(s, "network");
    EXPECT_NE(error_of(s).find("without a private network namespace"), std::string::npos);
}

TEST(Validate, NetDeviceNamesAreInterfaceNames) {
    Spec s = valid_spec();
    s.linux->net_devices["eth1"] = NetDevice{"a/b"};
    EXPECT_EQ(error_of(s), "linux.netDevices.eth1.name: invalid interface name \"a/b\"");
}

// ---- validate_rootless: runc's rootless checks, in its words ----

namespace {
Spec rootless_spec() {
    Spec s = valid_spec();
    remove_namespace(s, "network");
    s.linux->namespaces.push_back(Namespace{"user", ""});
    s.linux->uid_mappings = {IdMapping{0, 23456, 1}};
    s.linux->gid_mappings = {IdMapping{0, 23456, 1}};
    return s;
}
std::string rootless_error(const Spec& s) {
    auto r = validate_rootless(s);
    EXPECT_FALSE(r.has_value()) << "validated";
    return r ? std::string() : r.error().context();
}
}  // namespace

TEST(ValidateRootless, SpecRootlessTemplateIsValid) { EXPECT_TRUE(validate_rootless(rootless_spec()).has_value()); }

TEST(ValidateRootless, AUserNamespaceIsRequired) {
    Spec s = rootless_spec();
    remove_namespace(s, "user");
    EXPECT_EQ(rootless_error(s), "rootless container requires user namespaces");
}

TEST(ValidateRootless, ANewUserNamespaceNeedsBothMappings) {
    Spec s = rootless_spec();
    s.linux->gid_mappings.clear();
    EXPECT_EQ(rootless_error(s), "rootless containers requires at least one GID mapping");
    s.linux->uid_mappings.clear();
    EXPECT_EQ(rootless_error(s), "rootless containers requires at least one UID mapping");
}

TEST(ValidateRootless, AUserNamespaceJoinedByPathNeedsNoMappings) {
    Spec s = rootless_spec();
    remove_namespace(s, "user");
    s.linux->namespaces.push_back(Namespace{"user", "/proc/1234/ns/user"});
    s.linux->uid_mappings.clear();
    s.linux->gid_mappings.clear();
    EXPECT_TRUE(validate_rootless(s).has_value());
}

TEST(ValidateRootless, MountIdOptionsMustBeMapped) {
    Spec s = rootless_spec();
    s.mounts.push_back(Mount{"/mnt", "tmpfs", "tmpfs", {"uid=0", "gid=0"}, {}, {}});
    EXPECT_TRUE(validate_rootless(s).has_value());
    s.mounts.back().options = {"uid=5"};
    EXPECT_EQ(rootless_error(s), "cannot specify uid= mount options for unmapped uid in rootless containers");
    s.mounts.back().options = {"gid=5"};
    EXPECT_EQ(rootless_error(s), "cannot specify gid= mount options for unmapped gid in rootless containers");
}

TEST(ValidateRootless, AdditionalGidsMustBeMapped) {
    Spec s = rootless_spec();
    s.linux->gid_mappings = {IdMapping{0, 23456, 1}, IdMapping{1, 100000, 65536}};
    s.process->user.additional_gids = {0, 10, 65536};
    EXPECT_TRUE(validate_rootless(s).has_value());
    s.process->user.additional_gids = {65537};
    EXPECT_EQ(rootless_error(s), "cannot specify unmapped additional gid 65537 in rootless containers");
}
