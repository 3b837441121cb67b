#include "oci/parse.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "oci/validate.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

// Wraps a fragment of top-level members into a config with a valid ociVersion.
std::string config(const std::string& members) {
    return R"({"ociVersion": "1.3.0")" + (members.empty() ? "" : ", " + members) + "}";
}

Spec parse_ok(const std::string& text) {
    auto s = parse_config(text);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().context());
    return s ? std::move(*s) : Spec{};
}

std::string parse_error(const std::string& text) {
    auto s = parse_config(text);
    EXPECT_FALSE(s.has_value()) << "parsed: " << text;
    return s ? std::string() : s.error().context();
}

// config.json.example sits at the top of the source tree. __FILE__ finds it when the tests
// run from the tree; next to build/ (where the binary lives) covers a run from elsewhere.
std::string example_path() {
    std::string here = __FILE__;
    auto slash = here.rfind('/');
    std::string candidate =
        (slash == std::string::npos ? std::string(".") : here.substr(0, slash)) +
        "/../config.json.example";
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        std::string dir(exe, static_cast<size_t>(n));
        dir = dir.substr(0, dir.rfind('/'));
        return dir + "/../config.json.example";
    }
    return candidate;
}

}  // namespace

// ---- ociVersion ----

TEST(ParseConfig, MinimalConfigParses) {
    Spec s = parse_ok(config(""));
    EXPECT_EQ(s.oci_version, "1.3.0");
    EXPECT_FALSE(s.root);
    EXPECT_FALSE(s.process);
    EXPECT_FALSE(s.linux);
}

TEST(ParseConfig, AcceptsAnyOneDotVersion) {
    for (const char* v : {"1.0.0", "1.0.2-dev", "1.1.0-rc.1", "1.2.1", "1.9.0"})
        EXPECT_TRUE(parse_config(std::string(R"({"ociVersion": ")") + v + "\"}")) << v;
}

TEST(ParseConfig, MissingOciVersionIsAnError) {
    EXPECT_EQ(parse_error("{}"), "ociVersion: required field is missing");
    EXPECT_EQ(parse_error(R"({"ociVersion": null})"), "ociVersion: required field is missing");
}

TEST(ParseConfig, OtherMajorVersionsAreRejected) {
    for (const char* v : {"2.0.0", "0.5.0", "1", "1.", "", "10.0.0"}) {
        std::string e = parse_error(std::string(R"({"ociVersion": ")") + v + "\"}");
        EXPECT_TRUE(e.starts_with("ociVersion: unsupported version")) << v << ": " << e;
    }
}

TEST(ParseConfig, NonObjectDocumentIsAnError) {
    EXPECT_EQ(parse_error("[]"), "(root): expected object");
}

TEST(ParseConfig, InvalidJsonIsAnError) {
    EXPECT_TRUE(parse_error("{").starts_with("invalid JSON"));
}

// ---- paths in errors ----

TEST(ParseConfig, WrongTypeNamesTheJsonPath) {
    EXPECT_EQ(parse_error(config(R"("process": {"cwd": "/", "args": "sh"})")),
              "process.args: expected array of strings");
}

TEST(ParseConfig, WrongElementTypeNamesTheIndex) {
    EXPECT_EQ(parse_error(config(R"("process": {"cwd": "/", "args": ["sh", 1]})")),
              "process.args[1]: expected string");
}

TEST(ParseConfig, MountFieldErrorNamesTheMountIndex) {
    EXPECT_EQ(parse_error(config(R"("mounts": [{"destination": "/a"}, {"destination": "/b"},
                                              {"destination": 7}])")),
              "mounts[2].destination: expected string");
}

TEST(ParseConfig, NegativeMappingSizeIsNotUnsigned) {
    EXPECT_EQ(parse_error(config(R"("linux": {"uidMappings": [
                  {"containerID": 0, "hostID": 1000, "size": -1}]})")),
              "linux.uidMappings[0].size: expected unsigned integer");
}

TEST(ParseConfig, Uint32OverflowIsAnError) {
    std::string e = parse_error(config(R"("linux": {"gidMappings": [
                  {"containerID": 0, "hostID": 4294967296, "size": 1}]})"));
    EXPECT_TRUE(e.starts_with("linux.gidMappings[0].hostID: value 4294967296 out of range")) << e;
}

TEST(ParseConfig, MissingRequiredFieldNamesIt) {
    EXPECT_EQ(parse_error(config(R"("root": {"readonly": true})")),
              "root.path: required field is missing");
    EXPECT_EQ(parse_error(config(R"("process": {"args": ["sh"]})")),
              "process.cwd: required field is missing");
    EXPECT_EQ(parse_error(config(R"("mounts": [{"type": "tmpfs"}])")),
              "mounts[0].destination: required field is missing");
    EXPECT_EQ(parse_error(config(R"("linux": {"uidMappings": [{"containerID": 0, "hostID": 0}]})")),
              "linux.uidMappings[0].size: required field is missing");
}

TEST(ParseConfig, WrongObjectTypeIsAnError) {
    EXPECT_EQ(parse_error(config(R"("process": [])")), "process: expected object");
    EXPECT_EQ(parse_error(config(R"("linux": {"resources": 1})")),
              "linux.resources: expected object");
}

TEST(ParseConfig, NullCountsAsAbsent) {
    Spec s = parse_ok(config(R"("root": null, "process": null, "hostname": null, "mounts": null,
                                "linux": {"namespaces": null, "resources": null})"));
    EXPECT_FALSE(s.root);
    EXPECT_FALSE(s.process);
    EXPECT_TRUE(s.hostname.empty());
    ASSERT_TRUE(s.linux);
    EXPECT_FALSE(s.linux->resources);
}

TEST(ParseConfig, UnknownFieldsAreIgnored) {
    Spec s = parse_ok(config(R"("future": {"x": 1}, "root": {"path": "r", "shiny": true},
                                "windows": {"layerFolders": []})"));
    EXPECT_EQ(s.root->path, "r");
}

// ---- top level and process ----

TEST(ParseConfig, RootMountsHostnameAnnotations) {
    Spec s = parse_ok(config(R"("root": {"path": "rootfs", "readonly": true},
        "hostname": "h", "domainname": "d",
        "mounts": [{"destination": "/data", "type": "bind", "source": "/srv",
                    "options": ["rbind", "ro"],
                    "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}]}],
        "annotations": {"a": "b", "n": null})"));
    EXPECT_EQ(s.root->path, "rootfs");
    EXPECT_TRUE(s.root->readonly);
    EXPECT_EQ(s.hostname, "h");
    EXPECT_EQ(s.domainname, "d");
    ASSERT_EQ(s.mounts.size(), 1u);
    EXPECT_EQ(s.mounts[0].source, "/srv");
    EXPECT_EQ(s.mounts[0].options.size(), 2u);
    EXPECT_EQ(s.mounts[0].uid_mappings[0].host_id, 100000u);
    EXPECT_EQ(s.annotations.at("a"), "b");
    EXPECT_EQ(s.annotations.at("n"), "");
}

TEST(ParseConfig, AnnotationValuesMustBeStrings) {
    EXPECT_EQ(parse_error(config(R"("annotations": {"a": 1})")), "annotations.a: expected string");
}

TEST(ParseConfig, ProcessFields) {
    Spec s = parse_ok(config(R"("process": {
        "terminal": true, "consoleSize": {"height": 24, "width": 80},
        "user": {"uid": 1000, "gid": 100, "umask": 18, "additionalGids": [5, 6]},
        "args": ["sh", "-c", "true"], "env": ["A=1"], "cwd": "/home",
        "capabilities": {"bounding": ["CAP_KILL"], "ambient": []},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 18446744073709551615, "soft": 1024}],
        "noNewPrivileges": true, "apparmorProfile": "p", "oomScoreAdj": -500,
        "scheduler": {"policy": "SCHED_FIFO", "priority": 10, "flags": ["SCHED_FLAG_RESET_ON_FORK"]},
        "selinuxLabel": "l", "ioPriority": {"class": "IOPRIO_CLASS_BE", "priority": 4},
        "execCPUAffinity": {"initial": "0-1", "final": "2"}})"));
    const Process& p = *s.process;
    EXPECT_TRUE(p.terminal);
    EXPECT_EQ(p.console_size->width, 80u);
    EXPECT_EQ(p.user.uid, 1000u);
    EXPECT_EQ(p.user.gid, 100u);
    EXPECT_EQ(p.user.umask, 18u);
    EXPECT_EQ(p.user.additional_gids, (std::vector<uint32_t>{5, 6}));
    EXPECT_EQ(p.args.size(), 3u);
    EXPECT_EQ(p.cwd, "/home");
    EXPECT_EQ(p.capabilities->bounding, std::vector<std::string>{"CAP_KILL"});
    EXPECT_TRUE(p.capabilities->ambient.empty());
    EXPECT_EQ(p.rlimits[0].hard, UINT64_MAX);
    EXPECT_EQ(p.rlimits[0].soft, 1024u);
    EXPECT_TRUE(p.no_new_privileges);
    EXPECT_EQ(p.oom_score_adj, -500);
    EXPECT_EQ(p.scheduler->policy, "SCHED_FIFO");
    EXPECT_EQ(p.scheduler->priority, 10);
    EXPECT_FALSE(p.scheduler->nice);
    EXPECT_EQ(p.io_priority->klass, "IOPRIO_CLASS_BE");
    EXPECT_EQ(p.io_priority->priority, 4);
    EXPECT_EQ(p.exec_cpu_affinity->final, "2");
}

TEST(ParseConfig, ArgsMayBeAbsentAtParseTime) {
    Spec s = parse_ok(config(R"("process": {"cwd": "/"})"));
    EXPECT_TRUE(s.process->args.empty());
}

TEST(ParseConfig, UserIdsDefaultToZero) {
    Spec s = parse_ok(config(R"("process": {"cwd": "/", "user": {}})"));
    EXPECT_EQ(s.process->user.uid, 0u);
    EXPECT_FALSE(s.process->user.umask);
}

TEST(ParseConfig, RlimitNeedsTypeSoftAndHard) {
    EXPECT_EQ(parse_error(config(R"("process": {"cwd": "/", "rlimits": [{"type": "RLIMIT_CORE", "hard": 1}]})")),
              "process.rlimits[0].soft: required field is missing");
}

TEST(ParseConfig, ConsoleSizeNeedsBothDimensions) {
    EXPECT_EQ(parse_error(config(R"("process": {"cwd": "/", "consoleSize": {"height": 1}})")),
              "process.consoleSize.width: required field is missing");
}

TEST(ParseConfig, OomScoreAdjMustBeAnInteger) {
    EXPECT_EQ(parse_error(config(R"("process": {"cwd": "/", "oomScoreAdj": "high"})")),
              "process.oomScoreAdj: expected integer");
}

TEST(ParseConfig, Hooks) {
    Spec s = parse_ok(config(R"("hooks": {
        "prestart": [{"path": "/bin/a"}],
        "createRuntime": [{"path": "/bin/b", "args": ["b", "x"], "env": ["K=V"], "timeout": 5}],
        "createContainer": [], "startContainer": [{"path": "/bin/c"}],
        "poststart": [{"path": "/bin/d"}], "poststop": [{"path": "/bin/e"}, {"path": "/bin/f"}]})"));
    const Hooks& h = *s.hooks;
    EXPECT_EQ(h.prestart[0].path, "/bin/a");
    EXPECT_EQ(h.create_runtime[0].timeout, 5);
    EXPECT_EQ(h.create_runtime[0].args.size(), 2u);
    EXPECT_TRUE(h.create_container.empty());
    EXPECT_EQ(h.start_container.size(), 1u);
    EXPECT_EQ(h.poststop.size(), 2u);
    EXPECT_FALSE(h.poststop[0].timeout);
}

TEST(ParseConfig, HookWithoutPathIsAnError) {
    EXPECT_EQ(parse_error(config(R"("hooks": {"poststop": [{"args": []}]})")),
              "hooks.poststop[0].path: required field is missing");
}

// ---- linux ----

TEST(ParseConfig, LinuxNamespacesMappingsAndPaths) {
    Spec s = parse_ok(config(R"("linux": {
        "namespaces": [{"type": "pid"}, {"type": "network", "path": "/var/run/netns/x"}],
        "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "timeOffsets": {"monotonic": {"secs": -10, "nanosecs": 5}},
        "cgroupsPath": "/a/b", "rootfsPropagation": "rslave",
        "sysctl": {"net.ipv4.ip_forward": "1"},
        "maskedPaths": ["/proc/kcore"], "readonlyPaths": ["/proc/sys"],
        "mountLabel": "m"})"));
    const Linux& l = *s.linux;
    EXPECT_EQ(l.namespaces.size(), 2u);
    EXPECT_EQ(l.namespaces[1].path, "/var/run/netns/x");
    EXPECT_EQ(s.find_namespace("network"), &l.namespaces[1]);
    EXPECT_EQ(l.uid_mappings[0].host_id, 1000u);
    EXPECT_EQ(l.time_offsets.at("monotonic").secs, -10);
    EXPECT_EQ(l.time_offsets.at("monotonic").nanosecs, 5u);
    EXPECT_EQ(l.cgroups_path, "/a/b");
    EXPECT_EQ(l.rootfs_propagation, "rslave");
    EXPECT_EQ(l.sysctl.at("net.ipv4.ip_forward"), "1");
    EXPECT_EQ(l.masked_paths[0], "/proc/kcore");
    EXPECT_EQ(l.mount_label, "m");
}

TEST(ParseConfig, NamespaceWithoutTypeIsAnError) {
    EXPECT_EQ(parse_error(config(R"("linux": {"namespaces": [{"path": "/x"}]})")),
              "linux.namespaces[0].type: required field is missing");
}

TEST(ParseConfig, Devices) {
    Spec s = parse_ok(config(R"("linux": {"devices": [
        {"type": "c", "path": "/dev/fuse", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0},
        {"type": "p", "path": "/dev/fifo"}]})"));
    const auto& d = s.linux->devices;
    EXPECT_EQ(d[0].major, 10);
    EXPECT_EQ(d[0].minor, 229);
    EXPECT_EQ(d[0].file_mode, 0666u);
    EXPECT_EQ(d[1].type, "p");
}

TEST(ParseConfig, CharDeviceNeedsMajorAndMinor) {
    EXPECT_EQ(parse_error(config(R"("linux": {"devices": [{"type": "c", "path": "/dev/x", "major": 1}]})")),
              "linux.devices[0].minor: required field is missing");
}

TEST(ParseConfig, ResourcesFully) {
    Spec s = parse_ok(config(R"("linux": {"resources": {
        "devices": [{"allow": false, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}],
        "memory": {"limit": -1, "reservation": 1024, "swap": -1, "kernel": -1, "kernelTCP": 5,
                   "swappiness": 60, "disableOOMKiller": true, "useHierarchy": false,
                   "checkBeforeUpdate": true},
        "cpu": {"shares": 1024, "quota": -1, "burst": 10, "period": 100000,
                "realtimeRuntime": 950000, "realtimePeriod": 1000000, "cpus": "0-1",
                "mems": "0", "idle": 1},
        "pids": {"limit": -1},
        "blockIO": {"weight": 500, "leafWeight": 300,
                    "weightDevice": [{"major": 8, "minor": 0, "weight": 500, "leafWeight": 300}],
                    "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 600}],
                    "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 601}],
                    "throttleReadIOPSDevice": [{"major": 8, "minor": 0, "rate": 602}],
                    "throttleWriteIOPSDevice": [{"major": 8, "minor": 16, "rate": 300}]},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 209715200}],
        "network": {"classID": 1048577, "priorities": [{"name": "eth0", "priority": 500}]},
        "rdma": {"mlx5_1": {"hcaHandles": 3, "hcaObjects": 10000}, "mlx4_0": {"hcaObjects": 1000}},
        "unified": {"io.max": "259:0 rbps=2097152"}}})"));
    const Resources& r = *s.linux->resources;
    EXPECT_FALSE(r.devices[0].allow);
    EXPECT_FALSE(r.devices[0].major);
    EXPECT_EQ(r.devices[1].major, 10);
    EXPECT_EQ(r.memory->limit, -1);
    EXPECT_EQ(r.memory->kernel_tcp, 5);
    EXPECT_EQ(r.memory->swappiness, 60u);
    EXPECT_EQ(r.memory->disable_oom_killer, true);
    EXPECT_EQ(r.memory->use_hierarchy, false);
    EXPECT_EQ(r.cpu->quota, -1);
    EXPECT_EQ(r.cpu->burst, 10u);
    EXPECT_EQ(r.cpu->cpus, "0-1");
    EXPECT_EQ(r.cpu->idle, 1);
    EXPECT_EQ(r.pids_limit, -1);
    EXPECT_EQ(r.block_io->weight, 500);
    EXPECT_EQ(r.block_io->weight_device[0].leaf_weight, 300);
    EXPECT_EQ(r.block_io->throttle_read_bps[0].rate, 600u);
    EXPECT_EQ(r.block_io->throttle_write_bps[0].rate, 601u);
    EXPECT_EQ(r.block_io->throttle_read_iops[0].rate, 602u);
    EXPECT_EQ(r.block_io->throttle_write_iops[0].minor, 16);
    EXPECT_EQ(r.hugepage_limits[0].page_size, "2MB");
    EXPECT_EQ(r.network->class_id, 1048577u);
    EXPECT_EQ(r.network->priorities[0].name, "eth0");
    EXPECT_EQ(r.rdma.at("mlx5_1").hca_handles, 3u);
    EXPECT_FALSE(r.rdma.at("mlx4_0").hca_handles);
    EXPECT_EQ(r.unified.at("io.max"), "259:0 rbps=2097152");
}

TEST(ParseConfig, DeviceRuleNeedsAllow) {
    EXPECT_EQ(parse_error(config(R"("linux": {"resources": {"devices": [{"access": "rwm"}]}})")),
              "linux.resources.devices[0].allow: required field is missing");
}

TEST(ParseConfig, PidsNeedsLimit) {
    EXPECT_EQ(parse_error(config(R"("linux": {"resources": {"pids": {}}})")),
              "linux.resources.pids.limit: required field is missing");
}

TEST(ParseConfig, SwappinessMustBeUnsigned) {
    EXPECT_EQ(parse_error(config(R"("linux": {"resources": {"memory": {"swappiness": -1}}})")),
              "linux.resources.memory.swappiness: expected unsigned integer");
}

TEST(ParseConfig, BlkioWeightIsSixteenBits) {
    std::string e = parse_error(config(R"("linux": {"resources": {"blockIO": {"weight": 70000}}})"));
    EXPECT_TRUE(e.starts_with("linux.resources.blockIO.weight: value 70000 out of range")) << e;
}

TEST(ParseConfig, Seccomp) {
    Spec s = parse_ok(config(R"("linux": {"seccomp": {
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
        "flags": ["SECCOMP_FILTER_FLAG_LOG"], "listenerPath": "/run/agent.sock",
        "listenerMetadata": "meta",
        "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                     {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
                      "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]}]}})"));
    const Seccomp& sc = *s.linux->seccomp;
    EXPECT_EQ(sc.default_action, "SCMP_ACT_ERRNO");
    EXPECT_EQ(sc.default_errno_ret, 1u);
    EXPECT_EQ(sc.architectures.size(), 2u);
    EXPECT_EQ(sc.flags[0], "SECCOMP_FILTER_FLAG_LOG");
    EXPECT_EQ(sc.listener_path, "/run/agent.sock");
    EXPECT_EQ(sc.listener_metadata, "meta");
    EXPECT_EQ(sc.syscalls[0].names.size(), 2u);
    EXPECT_FALSE(sc.syscalls[0].errno_ret);
    EXPECT_EQ(sc.syscalls[1].errno_ret, 38u);
    EXPECT_EQ(sc.syscalls[1].args[0].value, 8u);
    EXPECT_EQ(sc.syscalls[1].args[0].op, "SCMP_CMP_EQ");
}

TEST(ParseConfig, SeccompNeedsDefaultAction) {
    EXPECT_EQ(parse_error(config(R"("linux": {"seccomp": {"syscalls": []}})")),
              "linux.seccomp.defaultAction: required field is missing");
}

TEST(ParseConfig, SeccompArgNeedsOp) {
    EXPECT_EQ(parse_error(config(R"("linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["x"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1}]}]}})")),
              "linux.seccomp.syscalls[0].args[0].op: required field is missing");
}

TEST(ParseConfig, SeccompSyscallNamesMustBeStrings) {
    EXPECT_EQ(parse_error(config(R"("linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": "read", "action": "SCMP_ACT_ERRNO"}]}})")),
              "linux.seccomp.syscalls[0].names: expected array of strings");
}

TEST(ParseConfig, OtherLinuxObjects) {
    Spec s = parse_ok(config(R"("linux": {
        "intelRdt": {"closID": "g", "l3CacheSchema": "L3:0=7f0", "memBwSchema": "MB:0=20",
                     "schemata": "L3:0=7f0", "enableCMT": true, "enableMBM": false},
        "personality": {"domain": "LINUX32", "flags": []},
        "memoryPolicy": {"mode": "MPOL_BIND", "nodes": "0-1", "flags": ["MPOL_F_STATIC_NODES"]},
        "netDevices": {"eth1": {"name": "ctr1"}, "eth2": {}}})"));
    const Linux& l = *s.linux;
    EXPECT_EQ(l.intel_rdt->clos_id, "g");
    EXPECT_TRUE(l.intel_rdt->enable_cmt);
    EXPECT_EQ(l.personality->domain, "LINUX32");
    EXPECT_EQ(l.memory_policy->nodes, "0-1");
    EXPECT_EQ(l.memory_policy->flags.size(), 1u);
    EXPECT_EQ(l.net_devices.at("eth1").name, "ctr1");
    EXPECT_EQ(l.net_devices.at("eth2").name, "");
}

TEST(ParseConfig, PersonalityNeedsDomain) {
    EXPECT_EQ(parse_error(config(R"("linux": {"personality": {"flags": []}})")),
              "linux.personality.domain: required field is missing");
}

// ---- process JSON for exec ----

TEST(ParseProcessJson, StandaloneProcess) {
    auto p = parse_process_json(R"({"args": ["ls"], "cwd": "/tmp", "env": ["X=1"]})");
    ASSERT_TRUE(p) << p.error().context();
    EXPECT_EQ(p->args[0], "ls");
    EXPECT_EQ(p->cwd, "/tmp");
}

TEST(ParseProcessJson, ErrorsArePathsInsideTheProcess) {
    auto p = parse_process_json(R"({"args": ["ls"], "cwd": "/", "user": {"uid": "root"}})");
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error().context(), "user.uid: expected unsigned integer");
}

// ---- files ----

TEST(LoadConfig, MissingFileErrorNamesThePath) {
    auto s = load_config("/nonexistent/forkbox/config.json");
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().errnum(), ENOENT);
    EXPECT_NE(s.error().context().find("/nonexistent/forkbox/config.json"), std::string::npos);
}

TEST(LoadConfig, ParseErrorIsPrefixedWithThePath) {
    char tmpl[] = "/tmp/forkbox-parse-test-XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    const std::string text = config(R"("process": {"cwd": 1})");
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    auto s = load_config(tmpl);
    unlink(tmpl);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().context(), std::string(tmpl) + ": process.cwd: expected string");
}

TEST(LoadConfig, DirectoryIsAnError) {
    auto s = load_config("/tmp");
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().errnum(), EISDIR);
}

TEST(LoadConfig, ExampleConfigParsesAndValidates) {
    const std::string path = example_path();
    auto s = load_config(path);
    ASSERT_TRUE(s) << path << ": " << s.error().what();
    EXPECT_EQ(s->root->path, "rootfs");
    EXPECT_FALSE(s->process->args.empty());
    EXPECT_TRUE(s->linux->resources->memory->limit);
    EXPECT_FALSE(s->linux->cgroups_path.empty());
    auto v = validate(*s);
    EXPECT_TRUE(v) << v.error().context();
}

TEST(ParseConfig, SeccompErrorNamesTheElementDeepInside) {
    std::string names;
    for (int i = 0; i < 12; ++i) names += "\"n" + std::to_string(i) + "\", ";
    std::string syscall = R"({"names": ["x"], "action": "SCMP_ACT_ALLOW"}, )";
    EXPECT_EQ(parse_error(config(R"("linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [)" +
                                 syscall + syscall + syscall + R"({"names": [)" + names +
                                 R"(12], "action": "SCMP_ACT_ALLOW"}]}})")),
              "linux.seccomp.syscalls[3].names[12]: expected string");
}

TEST(ParseConfig, TruncatedConfigIsInvalidJson) {
    EXPECT_EQ(parse_error(R"({"ociVersion": "1.3.0", "process": {"args": ["sh")"),
              "invalid JSON: parse error: premature EOF");
}

TEST(ParseConfig, DeviceRuleAccessKeepsTheLettersRuncKnows) {
    Spec s = parse_ok(config(R"("linux": {"resources": {"devices": [
        {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwa"},
        {"allow": false, "access": "xyz"}]}})"));
    EXPECT_EQ(s.linux->resources->devices[0].access, "rw");
    EXPECT_EQ(s.linux->resources->devices[1].access, "xyz");  // nothing known: validate refuses it
}
