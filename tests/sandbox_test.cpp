#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <string>

#include "libforkbox/base/json.hpp"
#include "libforkbox/sandbox/builder.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/request.hpp"

using namespace forkbox;
using namespace forkbox::sandbox;

namespace {

Result<RunRequest> parse(std::string_view json) { return parse_run_request(json, Defaults{}); }

std::string error_of(std::string_view json) {
    auto r = parse(json);
    return r ? std::string("(accepted)") : r.error().what();
}

}  // namespace

TEST(SandboxFirstMessage, SplitsVersionVerbAndBody) {
    auto m = split_first_message("sandbox/1 run\n{\"argv\":[\"true\"]}");
    ASSERT_TRUE(m) << m.error().what();
    EXPECT_EQ(m->verb, "run");
    EXPECT_EQ(m->body, "{\"argv\":[\"true\"]}");
    auto info = split_first_message("sandbox/1 info");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->verb, "info");
    EXPECT_EQ(info->body, "");
}

TEST(SandboxFirstMessage, RefusesOtherVersionsAndGarbage) {
    auto v2 = split_first_message("sandbox/2 run\n{}");
    ASSERT_FALSE(v2);
    EXPECT_NE(v2.error().what().find("versions served: 1"), std::string::npos);
    EXPECT_FALSE(split_first_message("take 1 /"));
    EXPECT_FALSE(split_first_message("sandbox/1"));
    EXPECT_FALSE(split_first_message("sandbox/1 \n{}"));
    EXPECT_TRUE(looks_like_sandbox_message("sandbox/1 run"));
    EXPECT_FALSE(looks_like_sandbox_message("take 3 /"));
}

TEST(SandboxRunRequest, FillsTheDefaults) {
    Defaults d;
    d.memory_mb = 64;
    d.pids = 32;
    auto r = parse_run_request(R"({"argv":["/bin/echo","hi"]})", d);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->argv, (std::vector<std::string>{"/bin/echo", "hi"}));
    EXPECT_EQ(r->cwd, "/");
    EXPECT_EQ(r->memory_mb, 64u);
    EXPECT_EQ(r->pids, 32u);
    EXPECT_FALSE(r->timeout_ms);
    EXPECT_FALSE(r->network);
    EXPECT_FALSE(r->stdin_frames);
    EXPECT_EQ(r->max_output, 1u << 20);
    EXPECT_TRUE(std::any_of(r->env.begin(), r->env.end(), [](auto& e) { return e.starts_with("PATH="); }));
}

TEST(SandboxRunRequest, TakesEveryKey) {
    auto r = parse(R"({"argv":["sh"],"env":["A=1"],"cwd":"/work","timeout_ms":500,"stdin":true,
        "memory_mb":128,"pids":64,"cpus":0.5,"network":true,"max_output":4096,"caps":[],
        "mounts":[{"source":"/srv","destination":"/data/../work/","mode":"rw"},{"source":"/etc","destination":"/e"}]})");
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->env, (std::vector<std::string>{"A=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}));
    EXPECT_EQ(r->cwd, "/work");
    EXPECT_EQ(r->timeout_ms, 500u);
    EXPECT_TRUE(r->stdin_frames);
    EXPECT_EQ(r->memory_mb, 128u);
    EXPECT_EQ(r->pids, 64u);
    EXPECT_DOUBLE_EQ(r->cpus, 0.5);
    EXPECT_TRUE(r->network);
    EXPECT_EQ(r->max_output, 4096u);
    EXPECT_TRUE(r->drop_all_caps);
    ASSERT_EQ(r->mounts.size(), 2u);
    EXPECT_EQ(r->mounts[0], (BindRequest{"/srv", "/work", true}));
    EXPECT_EQ(r->mounts[1], (BindRequest{"/etc", "/e", false}));
}

TEST(SandboxRunRequest, NullIsAbsent) {
    auto r = parse(R"({"argv":["true"],"timeout_ms":null,"env":null,"caps":null})");
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_FALSE(r->timeout_ms);
    EXPECT_FALSE(r->drop_all_caps);
}

TEST(SandboxRunRequest, ErrorsNameTheKey) {
    EXPECT_NE(error_of("[]").find("must be a JSON object"), std::string::npos);
    EXPECT_NE(error_of("{").find("not JSON"), std::string::npos);
    EXPECT_NE(error_of("{}").find("\"argv\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":[]})").find("\"argv\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":"true"})").find("\"argv\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":[1]})").find("\"argv\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"argz":1})").find("\"argz\" is not a key"), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"cwd":"rel"})").find("\"cwd\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"timeout_ms":0})").find("\"timeout_ms\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"timeout_ms":-5})").find("\"timeout_ms\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"env":["NOEQUALS"]})").find("KEY=VALUE"), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"cpus":0})").find("\"cpus\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"caps":["CAP_SYS_ADMIN"]})").find("\"caps\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"max_output":1e12})").find("\"max_output\""), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"mounts":[{"source":"/a"}]})").find("source and a destination"), std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"mounts":[{"source":"/a","destination":"/proc/x"}]})").find("/proc"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"argv":["true"],"mounts":[{"source":"/a","destination":"/w","mode":"rwx"}]})").find("mode"),
              std::string::npos);
    EXPECT_NE(error_of("{\"argv\":[\"a\\u0000b\"]}").find("NUL"), std::string::npos);
}

TEST(SandboxRunRequest, TheDaemonsMaximumDeadlineApplies) {
    Defaults d;
    d.max_timeout_ms = 1000;
    auto none = parse_run_request(R"({"argv":["true"]})", d);
    auto longer = parse_run_request(R"({"argv":["true"],"timeout_ms":5000})", d);
    auto shorter = parse_run_request(R"({"argv":["true"],"timeout_ms":10})", d);
    ASSERT_TRUE(none && longer && shorter);
    EXPECT_EQ(none->timeout_ms, 1000u);
    EXPECT_EQ(longer->timeout_ms, 1000u);
    EXPECT_EQ(shorter->timeout_ms, 10u);
}

TEST(SandboxResult, IsJsonAfterItsTag) {
    RunOutcome o;
    o.exit_code = 124;
    o.signal = 9;
    o.timed_out = true;
    o.duration_ms = 500.25;
    o.stdout_bytes = 10;
    o.stdout_dropped = 2;
    o.limits.memory = "cgroup";
    std::string m = format_result(o);
    ASSERT_EQ(m[0], kResult);
    auto doc = json::Document::parse(std::string_view(m).substr(1));
    ASSERT_TRUE(doc);
    auto root = doc->root();
    EXPECT_EQ(root.get("exit_code")->as_int64().value(), 124);
    EXPECT_EQ(root.get("signal")->as_int64().value(), 9);
    EXPECT_TRUE(root.get("timed_out")->as_bool().value());
    EXPECT_DOUBLE_EQ(root.get("duration_ms")->as_double().value(), 500.25);
    EXPECT_EQ(root.get("stdout_dropped")->as_uint64().value(), 2u);
    EXPECT_FALSE(root.get("cpu_ms"));  // null
    EXPECT_EQ(root.get("limits")->get("memory")->as_string().value(), "cgroup");
}

TEST(SandboxResult, ErrorsCarryTheirKind) {
    std::string m = format_error(ErrorKind::Busy, "retry \"later\"");
    ASSERT_EQ(m[0], kError);
    auto doc = json::Document::parse(std::string_view(m).substr(1));
    ASSERT_TRUE(doc);
    EXPECT_EQ(doc->root().get("error")->as_string().value(), "busy");
    EXPECT_EQ(doc->root().get("message")->as_string().value(), "retry \"later\"");
}

TEST(SandboxResult, ExitStatusAsAShellReportsIt) {
    RunOutcome exited, killed;
    set_exit_status(exited, 3 << 8);
    EXPECT_EQ(exited.exit_code, 3);
    EXPECT_FALSE(exited.signal);
    set_exit_status(killed, SIGKILL);
    EXPECT_EQ(killed.exit_code, 137);
    EXPECT_EQ(killed.signal, SIGKILL);
}

TEST(SandboxOutputCapture, KeepsEverythingUnderTheLimit) {
    OutputCapture c(10);
    EXPECT_EQ(c.take("abc"), "abc");
    EXPECT_EQ(c.take("de"), "de");
    EXPECT_EQ(c.tail(), "");
    EXPECT_EQ(c.total(), 5u);
    EXPECT_EQ(c.dropped(), 0u);
}

TEST(SandboxOutputCapture, KeepsTheHeadAndTheTailOfAFlood) {
    OutputCapture c(10);  // 5 head, 5 tail
    std::string sent;
    std::string all;
    for (int i = 0; i < 100; ++i) {
        std::string chunk = std::to_string(i) + ",";
        all += chunk;
        sent += c.take(chunk);
    }
    EXPECT_EQ(sent, all.substr(0, 5));
    EXPECT_EQ(c.tail(), all.substr(all.size() - 5));
    EXPECT_EQ(c.total(), all.size());
    EXPECT_EQ(c.dropped(), all.size() - 10);
}

TEST(SandboxOutputCapture, ExactlyAtTheLimitDropsNothing) {
    OutputCapture c(8);
    std::string sent = std::string(c.take("12345678"));
    EXPECT_EQ(sent + c.tail(), "12345678");
    EXPECT_EQ(c.dropped(), 0u);
    OutputCapture big(8);
    std::string head = std::string(big.take(std::string(1000, 'x') + "TAIL"));
    EXPECT_EQ(head, "xxxx");
    EXPECT_EQ(big.tail(), "TAIL");
    EXPECT_EQ(big.dropped(), 996u);
}

TEST(SandboxFrames, SplitAtTheFrameSize) {
    std::string data(kMaxFrameData * 2 + 3, 'a');
    auto f = frames(kStdoutData, data);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].size(), kMaxFrameData + 1);
    EXPECT_EQ(f[0][0], kStdoutData);
    EXPECT_EQ(f[2].size(), 4u);
    EXPECT_TRUE(frames(kStdoutData, "").empty());
}

TEST(SandboxRelease, RoundTrips) {
    Release r;
    r.argv = {"/bin/sh", "-c", "echo 'a b'", ""};
    r.env = {"A=1", "B="};
    r.cwd = "/work dir";
    r.nproc_limit = 64;
    r.address_limit = 1 << 30;
    r.drop_all_caps = true;
    r.line_given = true;
    auto back = Release::decode(r.encode());
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, r);
    EXPECT_FALSE(Release::decode(std::string("/\0x\0", 4)));
    // A number past 64 bits is malformed, not an exception (found by the sandbox_request fuzz target).
    // Module names are not empty (found by the sandbox_request fuzz target: "a,," did not
    // round-trip).
    Release python;
    python.argv = {"python3", "-c", "pass"};
    python.warm_python = true;
    python.preload = {"json", "os.path"};
    auto decoded = Release::decode(python.encode());
    ASSERT_TRUE(decoded) << decoded.error().what();
    EXPECT_EQ(*decoded, python);
    for (const char* bad : {"a,,b", ",a", "a,"}) {
        python.preload = {bad};
        EXPECT_FALSE(Release::decode(python.encode())) << bad;
    }
    static const char huge[] = "/\0" "99999999999999999999999\0" "0\0" "0\0" "0\0" "1\0" "a";
    EXPECT_FALSE(Release::decode(std::string(huge, sizeof huge)));
}

TEST(SandboxProfile, IsAPlanWithEveryNamespaceAndTheHardening) {
    ProfileOptions o;
    o.root = "/run/forkbox/forkbox.sock.stage/root";
    o.hidden = {"/srv/forkbox"};
    auto plan = sandbox_plan(SandboxKind{}, o);
    ASSERT_TRUE(plan) << plan.error().what();
    for (int ns : {CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWNET})
        EXPECT_TRUE(plan->new_namespaces & ns) << ns;
    EXPECT_EQ(plan->rootfs, o.root);
    EXPECT_TRUE(plan->process.no_new_privileges);
    const auto& caps = plan->process.capabilities->bounding;
    EXPECT_EQ(caps.size(), 14u);
    EXPECT_EQ(std::count(caps.begin(), caps.end(), "CAP_SYS_ADMIN"), 0);
    auto has_mount = [&](const std::string& dest) {
        return std::any_of(plan->mounts.begin(), plan->mounts.end(), [&](auto& m) { return m.destination == dest; });
    };
    for (const char* d : {"/proc", "/dev", "/home", "/srv/forkbox", "/sys"}) EXPECT_TRUE(has_mount(d)) << d;
    // The sandbox's own empty directories in its writable state, not mounts (a fork carries them).
    for (const char* d : {"/tmp", "/run", "/root"}) EXPECT_FALSE(has_mount(d)) << d;
    EXPECT_FALSE(plan->masked_paths.empty());
}

TEST(SandboxProfile, TheHostsNetworkBindsSysAndKeepsNoNetworkNamespace) {
    ProfileOptions o;
    o.root = "/stage/root";
    SandboxKind k;
    k.network = true;
    k.mounts = {BindRequest{"/srv", "/work", true}};
    auto plan = sandbox_plan(k, o);
    ASSERT_TRUE(plan) << plan.error().what();
    EXPECT_FALSE(plan->new_namespaces & CLONE_NEWNET);
    auto sys = std::find_if(plan->mounts.begin(), plan->mounts.end(), [](auto& m) { return m.destination == "/sys"; });
    ASSERT_NE(sys, plan->mounts.end());
    EXPECT_EQ(sys->kind, MountKind::Bind);
    auto work = std::find_if(plan->mounts.begin(), plan->mounts.end(), [](auto& m) { return m.destination == "/work"; });
    ASSERT_NE(work, plan->mounts.end());
    EXPECT_EQ(work->kind, MountKind::Bind);
    EXPECT_EQ(work->source, "/srv");
}

TEST(SandboxProfile, TheSeccompProfileIsDockersForDockersCapabilities) {
    oci::Spec spec = sandbox_spec(SandboxKind{}, ProfileOptions{"/r", {}, false});
    ASSERT_TRUE(spec.linux && spec.linux->seccomp);
    EXPECT_EQ(spec.linux->seccomp->default_action, "SCMP_ACT_ERRNO");
    bool clone3_enosys = false;
    for (const auto& s : spec.linux->seccomp->syscalls)
        if (s.names == std::vector<std::string>{"clone3"}) clone3_enosys = s.errno_ret == ENOSYS;
    EXPECT_TRUE(clone3_enosys);
    // A user's sandbox maps one id, a root daemon's 65536.
    EXPECT_EQ(spec.linux->uid_mappings[0].size, 1u);
    EXPECT_EQ(sandbox_spec(SandboxKind{}, ProfileOptions{"/r", {}, true}).linux->uid_mappings[0].size, 65536u);
}

TEST(SandboxWarmShell, TakesALineInTheDefaultEnvironmentWithoutStdin) {
    std::vector<std::string> line = {"/bin/sh", "-c", "echo hi"};
    EXPECT_TRUE(takes_warm_shell(line, kDefaultEnv, false));
    EXPECT_FALSE(takes_warm_shell(line, kDefaultEnv, true));  // stdin
    EXPECT_TRUE(takes_warm_shell(line, {"A=1", "PATH=/bin"}, false));
    EXPECT_FALSE(takes_warm_shell(line, {"IFS=:", "PATH=/bin"}, false));
    // Its $0 is /bin/sh, with no positional parameters; any other argv is a program's.
    EXPECT_FALSE(takes_warm_shell({"sh", "-c", "echo hi"}, kDefaultEnv, false));
    EXPECT_FALSE(takes_warm_shell({"/bin/sh", "-c", "echo $1", "name", "one"}, kDefaultEnv, false));
    EXPECT_FALSE(takes_warm_shell({"/bin/sh", "-e", "-c", "false"}, kDefaultEnv, false));
    EXPECT_FALSE(takes_warm_shell({"/bin/sh", "script.sh", "x"}, kDefaultEnv, false));
    EXPECT_FALSE(takes_warm_shell({"python3", "-c", "pass"}, kDefaultEnv, false));
}

TEST(SandboxWarmShell, MakesAnEnvironmentAShellCanMake) {
    EXPECT_EQ(warm_shell_environment(kDefaultEnv), "");
    EXPECT_EQ(warm_shell_environment({"FOO=it's", "PATH=/bin", "EMPTY="}),
              "unset PATH HOME TERM LANG PWD; export FOO='it'\\''s' PATH='/bin' EMPTY=''; ");
    // The defaults in another order are another environment to make (their order is dash's).
    auto swapped = kDefaultEnv;
    std::swap(swapped[1], swapped[2]);
    EXPECT_TRUE(warm_shell_environment(swapped).has_value());
    EXPECT_EQ(warm_shell_environment({}), "unset PATH HOME TERM LANG PWD; ");
    // What a shell cannot export, what dash sets itself at its start, a name given twice.
    for (const char* bad : {"A-B=1", "1A=1", "=1", "NOEQUALS", "IFS=:", "PPID=1", "OPTIND=2", "PWD=/x", "OLDPWD=/",
                            "PS4=+", "LINENO=3", "ENV=/x"})
        EXPECT_FALSE(warm_shell_environment({bad, "PATH=/bin"})) << bad;
    EXPECT_FALSE(warm_shell_environment({"A=1", "A=2"}));
    EXPECT_TRUE(warm_shell_environment({"_x9=multi\nline", "PATH=/bin"}));
}

TEST(SandboxWarmShell, ScriptsALine) {
    // The line, then its status to fd 4 (hidden from the line) once it is done, and a wait
    // there for the service's word.
    EXPECT_EQ(warm_shell_script("echo 'hi'", "", "/", true),
              "exec 3<&-; eval 'echo '\\''hi'\\''' 4>&-; { set -- \"$?\"; unset -f printf read; trap; "
              "printf 'S%s\\n' \"$1\"; read -r _ <&4; return \"$1\"; } >&4 2>&4\n");
    EXPECT_EQ(warm_shell_script("true", "", "/", false), "exec 3<&-; eval 'true'; return\n");
    // Another cwd or environment first (after the environment's `unset PWD`, the PWD again).
    EXPECT_EQ(warm_shell_script("pwd", "", "/tmp", false), "exec 3<&-; cd -P -- '/tmp' || exit; unset OLDPWD; eval 'pwd'; return\n");
    EXPECT_EQ(warm_shell_script("env", "unset PATH; ", "/", false),
              "exec 3<&-; unset PATH; cd -P -- '/' || exit; unset OLDPWD; eval 'env'; return\n");
}

TEST(SandboxKindWire, RoundTrips) {
    SandboxKind k;
    k.network = true;
    k.mounts = {BindRequest{"/a b", "/w", true}, BindRequest{"/c", "/d", false}};
    auto back = decode_kind(encode_kind(k));
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, k);
    k.python = true;
    k.preload = {"json", "os.path"};
    k.unmapped_lower = true;
    k.rootfs = "/srv/images/python";
    back = decode_kind(encode_kind(k));
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, k);
    k.member = HostIdentity{1000, 100, {}};
    back = decode_kind(encode_kind(k));
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, k);
    k.member->groups = {24, 4294967294u, 27};
    back = decode_kind(encode_kind(k));
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, k);
    auto plain = decode_kind(encode_kind(SandboxKind{}));
    ASSERT_TRUE(plain);
    EXPECT_EQ(*plain, SandboxKind{});
    EXPECT_FALSE(decode_kind(""));
    EXPECT_FALSE(decode_kind(std::string("1/a\0/b\0", 7)));
    for (std::string ids : {"1000", "1000 x", "1000  100", "-1 5", "4294967295 1", "1 2 "})
        EXPECT_FALSE(decode_kind(std::string("001/\0", 5) + ids + std::string("\0\n", 2))) << ids;
}

TEST(SandboxProfileOptions, HideTheSocketsDirectoryUnlessHiddenAnyway) {
    ServerOptions o;
    o.stage_dir = "/run/forkbox-sandbox";
    o.socket_path = "/srv/fb/forkbox.sock";
    EXPECT_EQ(profile_options(o, true).hidden, std::vector<std::string>{"/srv/fb"});
    o.socket_path = "/run/user/1000/forkbox/forkbox.sock";
    EXPECT_TRUE(profile_options(o, false).hidden.empty());
    EXPECT_EQ(profile_options(o, false).root, "/run/forkbox-sandbox/root");
}

TEST(SandboxMemberGroups, KeepTheirNumbersBelow65536ButRootAndThePrimaryGroup) {
    HostIdentity m{1000, 100, {27, 100, 0, 70000, 4, 27, 65535}};
    EXPECT_EQ(member_groups_inside(m), (std::vector<gid_t>{4, 27, 65535}));
    HostIdentity many{1000, 1000, {}};
    for (gid_t g = 1; g <= 100; ++g) many.groups.push_back(g);
    EXPECT_EQ(member_groups_inside(many).size(), 64u);
    EXPECT_TRUE(member_groups_inside(HostIdentity{1000, 1000, {1000}}).empty());
}
