#include "oci/default_seccomp.hpp"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/parse.hpp"
#include "oci/spec_template.hpp"
#include "oci/validate.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

const std::vector<std::string> kTemplateCaps = {"CAP_AUDIT_WRITE", "CAP_KILL",
                                                "CAP_NET_BIND_SERVICE"};

// What the issue names as never reachable with the template's capabilities.
const std::vector<std::string> kDenied = {
    "mount",          "umount",         "umount2",       "unshare",         "setns",
    "pivot_root",     "ptrace",         "bpf",           "perf_event_open", "kexec_load",
    "kexec_file_load", "init_module",   "finit_module",  "delete_module",   "reboot",
    "swapon",         "swapoff",        "acct",          "keyctl",          "add_key",
    "request_key",    "open_by_handle_at", "userfaultfd", "chroot",         "process_vm_readv",
    "process_vm_writev", "io_uring_setup", "fsopen",     "open_tree",       "move_mount",
    "sethostname",    "settimeofday",   "clock_settime", "iopl",            "ioperm",
    "syslog",         "vhangup",        "lookup_dcookie", "quotactl",       "kcmp",
    "pidfd_getfd",    "clone3"};

// Never allowed, whatever the capabilities.
const std::vector<std::string> kNeverAllowed = {
    "kexec_load", "kexec_file_load", "keyctl",  "add_key",           "request_key",
    "userfaultfd", "swapon",         "swapoff", "io_uring_setup",    "io_uring_enter",
    "io_uring_register"};

Spec parse_template(SeccompArchFamily arch = SeccompArchFamily::X86_64) {
    SpecTemplateOptions o;
    o.arch = arch;
    auto s = parse_config(default_spec_json(o));
    EXPECT_TRUE(s) << (s ? "" : s.error().context());
    return s ? std::move(*s) : Spec{};
}

// Every name some entry allows, with or without argument conditions.
std::vector<std::string> allowed_names(const Seccomp& sc) {
    std::vector<std::string> out;
    for (const auto& s : sc.syscalls)
        if (s.action == "SCMP_ACT_ALLOW") out.insert(out.end(), s.names.begin(), s.names.end());
    return out;
}

// Names allowed with no condition at all.
std::vector<std::string> unconditionally_allowed(const Seccomp& sc) {
    std::vector<std::string> out;
    for (const auto& s : sc.syscalls)
        if (s.action == "SCMP_ACT_ALLOW" && s.args.empty())
            out.insert(out.end(), s.names.begin(), s.names.end());
    return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<const SeccompSyscall*> entries_for(const Seccomp& sc, const std::string& name) {
    std::vector<const SeccompSyscall*> out;
    for (const auto& s : sc.syscalls)
        if (contains(s.names, name)) out.push_back(&s);
    return out;
}

}  // namespace

TEST(DefaultSeccomp, TemplateCarriesTheProfileAndValidates) {
    Spec s = parse_template();
    ASSERT_TRUE(s.linux && s.linux->seccomp);
    EXPECT_TRUE(validate(s)) << "template with seccomp does not validate";
    const Seccomp& sc = *s.linux->seccomp;
    EXPECT_EQ(sc.default_action, "SCMP_ACT_ERRNO");
    EXPECT_EQ(sc.default_errno_ret, 1u);  // EPERM
    EXPECT_EQ(sc.architectures,
              (std::vector<std::string>{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"}));
}

TEST(DefaultSeccomp, RootlessTemplateCarriesTheProfileToo) {
    SpecTemplateOptions o;
    o.rootless = true;
    auto s = parse_config(default_spec_json(o));
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->linux->seccomp);
}

TEST(DefaultSeccomp, CompilesWithTheRuntimesSeccompCompiler) {
    Spec s = parse_template(native_seccomp_arch_family());
    auto program = compile_seccomp(*s.linux->seccomp);
    ASSERT_TRUE(program) << program.error().what();
    EXPECT_GT(program->bpf.size(), 0u);
    EXPECT_LE(program->bpf.size(), static_cast<size_t>(BPF_MAXINSNS));
    EXPECT_EQ(program->flags, 0u);
}

TEST(DefaultSeccomp, PlanSkipsNoNameOfTheNativeArchitecture) {
    // plan_seccomp silently drops names libseccomp does not know: a typo in the table
    // would vanish there. Every name must resolve for the native family.
    Spec s = parse_template(native_seccomp_arch_family());
    for (const auto& entry : s.linux->seccomp->syscalls)
        for (const auto& name : entry.names)
            EXPECT_NE(seccomp_syscall_resolve_name(name.c_str()), __NR_SCMP_ERROR) << name;
}

TEST(DefaultSeccomp, EveryNameIsARealSyscall) {
    // A typo check for the table: each name is a syscall of at least one architecture a
    // profile names (x86-only names such as socketcall serve i386; libseccomp leaves a name
    // out of the architectures that lack it).
    const uint32_t arches[] = {SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_X32, SCMP_ARCH_AARCH64,
                               SCMP_ARCH_ARM};
    for (auto family : {SeccompArchFamily::X86_64, SeccompArchFamily::AArch64}) {
        Seccomp sc = default_seccomp({"CAP_SYS_ADMIN", "CAP_SYS_PTRACE"}, family);
        for (const auto& entry : sc.syscalls) {
            for (const auto& name : entry.names) {
                bool somewhere = false;
                for (uint32_t arch : arches)
                    somewhere |= seccomp_syscall_resolve_name_arch(arch, name.c_str()) >= 0;
                EXPECT_TRUE(somewhere) << name << " is no syscall of x86 or arm";
            }
        }
    }
}

TEST(DefaultSeccomp, TemplateCapabilitiesReachNoneOfTheDeniedSyscalls) {
    Spec s = parse_template();
    auto allowed = allowed_names(*s.linux->seccomp);
    for (const auto& name : kDenied) EXPECT_FALSE(contains(allowed, name)) << name;
}

TEST(DefaultSeccomp, OrdinarySyscallsAreAllowedUnconditionally) {
    Spec s = parse_template();
    auto allowed = unconditionally_allowed(*s.linux->seccomp);
    for (const char* name : {"read", "write", "openat", "execve", "fork", "vfork", "wait4",
                             "mmap", "futex", "rt_sigaction", "clock_nanosleep", "getdents64",
                             "exit_group", "arch_prctl", "socketpair", "chown32"})
        EXPECT_TRUE(contains(allowed, name)) << name;
    EXPECT_FALSE(contains(allowed, "clone")) << "clone must carry its namespace-flag condition";
    EXPECT_FALSE(contains(allowed, "socket")) << "socket must carry its AF_VSOCK condition";
}

TEST(DefaultSeccomp, CloneIsAllowedOnlyWithoutNamespaceFlags) {
    Spec s = parse_template();
    auto clone = entries_for(*s.linux->seccomp, "clone");
    ASSERT_EQ(clone.size(), 1u);
    EXPECT_EQ(clone[0]->names, std::vector<std::string>{"clone"});
    EXPECT_EQ(clone[0]->action, "SCMP_ACT_ALLOW");
    ASSERT_EQ(clone[0]->args.size(), 1u);
    const SeccompArg& a = clone[0]->args[0];
    EXPECT_EQ(a.index, 0u);
    EXPECT_EQ(a.op, "SCMP_CMP_MASKED_EQ");
    EXPECT_EQ(a.value, static_cast<uint64_t>(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                                             CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                             CLONE_NEWCGROUP));
    EXPECT_EQ(a.value, 0x7E020000u);  // Docker's mask
    EXPECT_EQ(a.value_two, 0u);
}

TEST(DefaultSeccomp, Clone3FailsWithEnosysSoTheCLibraryFallsBackToClone) {
    Spec s = parse_template();
    auto clone3 = entries_for(*s.linux->seccomp, "clone3");
    ASSERT_EQ(clone3.size(), 1u);
    EXPECT_EQ(clone3[0]->action, "SCMP_ACT_ERRNO");
    EXPECT_EQ(clone3[0]->errno_ret, 38u);  // ENOSYS
}

TEST(DefaultSeccomp, CloneRuleReachesLibseccompAsAMaskedCompare) {
    Spec s = parse_template();
    auto plan = plan_seccomp(*s.linux->seccomp);
    ASSERT_TRUE(plan) << plan.error().what();
    int clone_nr = seccomp_syscall_resolve_name("clone");
    int found = 0;
    for (const auto& r : plan->rules) {
        if (r.syscall != clone_nr) continue;
        ++found;
        EXPECT_EQ(r.action, SCMP_ACT_ALLOW);
        ASSERT_EQ(r.conditions.size(), 1u);
        EXPECT_EQ(r.conditions[0].op, SCMP_CMP_MASKED_EQ);
        EXPECT_EQ(r.conditions[0].datum_a, 0x7E020000u);
        EXPECT_EQ(r.conditions[0].datum_b, 0u);
    }
    EXPECT_EQ(found, 1);
}

TEST(DefaultSeccomp, CapSysAdminAllowsTheMountAndNamespaceCalls) {
    Seccomp sc = default_seccomp({"CAP_SYS_ADMIN"}, SeccompArchFamily::X86_64);
    auto allowed = unconditionally_allowed(sc);
    for (const char* name : {"mount", "umount2", "unshare", "setns", "clone", "clone3", "bpf"})
        EXPECT_TRUE(contains(allowed, name)) << name;
    EXPECT_EQ(entries_for(sc, "clone").size(), 1u) << "no conditional clone rule beside it";
    EXPECT_EQ(entries_for(sc, "clone3").size(), 1u);
    EXPECT_FALSE(contains(allowed, "ptrace"));
}

TEST(DefaultSeccomp, EachCapabilityOpensOnlyItsOwnSyscalls) {
    EXPECT_TRUE(contains(allowed_names(default_seccomp({"CAP_SYS_PTRACE"}, SeccompArchFamily::X86_64)),
                         "ptrace"));
    EXPECT_TRUE(contains(allowed_names(default_seccomp({"CAP_SYS_BOOT"}, SeccompArchFamily::X86_64)),
                         "reboot"));
    EXPECT_TRUE(contains(allowed_names(default_seccomp({"CAP_SYS_MODULE"}, SeccompArchFamily::X86_64)),
                         "finit_module"));
    auto boot = allowed_names(default_seccomp({"CAP_SYS_BOOT"}, SeccompArchFamily::X86_64));
    EXPECT_FALSE(contains(boot, "kexec_load"));
    EXPECT_FALSE(contains(boot, "mount"));
}

TEST(DefaultSeccomp, SomeSyscallsNoCapabilitySetReaches) {
    std::vector<std::string> every;
    for (auto c : {"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_MODULE", "CAP_SYS_PTRACE",
                   "CAP_SYS_RAWIO", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_PACCT",
                   "CAP_DAC_READ_SEARCH", "CAP_BPF", "CAP_PERFMON", "CAP_SYSLOG"})
        every.emplace_back(c);
    auto allowed = allowed_names(default_seccomp(every, SeccompArchFamily::X86_64));
    for (const auto& name : kNeverAllowed) EXPECT_FALSE(contains(allowed, name)) << name;
}

TEST(DefaultSeccomp, ArchitecturesAndTheirOwnSyscallsFollowTheFamily) {
    Seccomp arm = default_seccomp(kTemplateCaps, SeccompArchFamily::AArch64);
    EXPECT_EQ(arm.architectures, (std::vector<std::string>{"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"}));
    EXPECT_TRUE(contains(allowed_names(arm), "set_tls"));
    EXPECT_FALSE(contains(allowed_names(arm), "arch_prctl"));
    Seccomp x86 = default_seccomp(kTemplateCaps, SeccompArchFamily::X86_64);
    EXPECT_FALSE(contains(allowed_names(x86), "set_tls"));
    Seccomp other = default_seccomp(kTemplateCaps, SeccompArchFamily::Other);
    EXPECT_TRUE(other.architectures.empty());
}

TEST(DefaultSeccomp, SocketRefusesOnlyVsock) {
    Spec s = parse_template();
    auto socket = entries_for(*s.linux->seccomp, "socket");
    ASSERT_EQ(socket.size(), 1u);
    ASSERT_EQ(socket[0]->args.size(), 1u);
    EXPECT_EQ(socket[0]->args[0].op, "SCMP_CMP_NE");
    EXPECT_EQ(socket[0]->args[0].value, 40u);  // AF_VSOCK
}

TEST(DefaultSeccomp, AllowListIsSortedAndHasNoDuplicates) {
    Seccomp sc = default_seccomp({"CAP_SYS_ADMIN", "CAP_BPF"}, SeccompArchFamily::X86_64);
    const auto& names = sc.syscalls.at(0).names;
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());  // bpf is in both
}

TEST(DefaultSeccomp, JsonWriterRoundTripsThroughTheParser) {
    Seccomp sc = default_seccomp(kTemplateCaps, SeccompArchFamily::X86_64);
    sc.flags = {"SECCOMP_FILTER_FLAG_LOG"};
    json::Writer w;
    write_seccomp_json(w, sc);
    std::string config = R"({"ociVersion": "1.3.0", "linux": {"seccomp": )" + w.str() + "}}";
    auto s = parse_config(config);
    ASSERT_TRUE(s) << s.error().context();
    const Seccomp& back = *s->linux->seccomp;
    EXPECT_EQ(back.default_action, sc.default_action);
    EXPECT_EQ(back.default_errno_ret, sc.default_errno_ret);
    EXPECT_EQ(back.architectures, sc.architectures);
    EXPECT_EQ(back.flags, sc.flags);
    ASSERT_EQ(back.syscalls.size(), sc.syscalls.size());
    for (size_t i = 0; i < sc.syscalls.size(); ++i) {
        EXPECT_EQ(back.syscalls[i].names, sc.syscalls[i].names);
        EXPECT_EQ(back.syscalls[i].action, sc.syscalls[i].action);
        EXPECT_EQ(back.syscalls[i].errno_ret, sc.syscalls[i].errno_ret);
        ASSERT_EQ(back.syscalls[i].args.size(), sc.syscalls[i].args.size());
        for (size_t j = 0; j < sc.syscalls[i].args.size(); ++j) {
            EXPECT_EQ(back.syscalls[i].args[j].value, sc.syscalls[i].args[j].value);
            EXPECT_EQ(back.syscalls[i].args[j].value_two, sc.syscalls[i].args[j].value_two);
            EXPECT_EQ(back.syscalls[i].args[j].op, sc.syscalls[i].args[j].op);
        }
    }
}
