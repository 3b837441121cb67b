#include "oci/linux_names.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>

#include <csignal>
#include <set>
#include <string>

using namespace forkbox::oci;

TEST(Capabilities, FirstAndLastHaveKernelNumbers) {
    EXPECT_EQ(capability_from_name("CAP_CHOWN"), 0);
    EXPECT_EQ(capability_from_name("CAP_SYS_ADMIN"), 21);
    EXPECT_EQ(capability_from_name("CAP_AUDIT_READ"), 37);
    EXPECT_EQ(capability_from_name("CAP_PERFMON"), 38);
    EXPECT_EQ(capability_from_name("CAP_BPF"), 39);
    EXPECT_EQ(capability_from_name("CAP_CHECKPOINT_RESTORE"), 40);
}

TEST(Capabilities, LastKnownIsCheckpointRestore) {
    EXPECT_EQ(last_known_capability(), 40);
    EXPECT_EQ(all_capability_names().size(), 41u);
}

TEST(Capabilities, NameAndNumberRoundTrip) {
    for (int i = 0; i <= last_known_capability(); ++i)
        EXPECT_EQ(capability_from_name(capability_name(i)), i) << i;
}

TEST(Capabilities, UnknownNamesAndNumbersAreRejected) {
    EXPECT_FALSE(capability_from_name("CAP_FOO"));
    EXPECT_FALSE(capability_from_name("chown"));
    EXPECT_EQ(capability_name(41), "");
    EXPECT_EQ(capability_name(-1), "");
}

TEST(Rlimits, AllSixteenMapToResourceNumbers) {
    EXPECT_EQ(all_rlimit_names().size(), 16u);
    EXPECT_EQ(rlimit_from_name("RLIMIT_NOFILE"), RLIMIT_NOFILE);
    EXPECT_EQ(rlimit_from_name("RLIMIT_AS"), RLIMIT_AS);
    EXPECT_EQ(rlimit_from_name("RLIMIT_RTTIME"), RLIMIT_RTTIME);
    for (auto n : all_rlimit_names()) EXPECT_TRUE(rlimit_from_name(n)) << n;
}

TEST(Rlimits, UnknownNameIsRejected) {
    EXPECT_FALSE(rlimit_from_name("RLIMIT_FOO"));
    EXPECT_FALSE(rlimit_from_name("NOFILE"));
}

TEST(Namespaces, SpecTypesMapToCloneFlagsAndProcNames) {
    EXPECT_EQ(namespace_kind("pid")->clone_flag, CLONE_NEWPID);
    EXPECT_EQ(namespace_kind("network")->clone_flag, CLONE_NEWNET);
    EXPECT_EQ(namespace_kind("network")->proc_name, "net");
    EXPECT_EQ(namespace_kind("mount")->clone_flag, CLONE_NEWNS);
    EXPECT_EQ(namespace_kind("mount")->proc_name, "mnt");
    EXPECT_EQ(namespace_kind("ipc")->clone_flag, CLONE_NEWIPC);
    EXPECT_EQ(namespace_kind("uts")->clone_flag, CLONE_NEWUTS);
    EXPECT_EQ(namespace_kind("user")->clone_flag, CLONE_NEWUSER);
    EXPECT_EQ(namespace_kind("cgroup")->clone_flag, CLONE_NEWCGROUP);
    EXPECT_EQ(namespace_kind("time")->clone_flag, CLONE_NEWTIME);
}

TEST(Namespaces, ListHoldsAllEightOnce) {
    std::set<std::string_view> types;
    for (const auto& k : all_namespace_kinds()) types.insert(k.spec_type);
    EXPECT_EQ(types.size(), 8u);
    EXPECT_EQ(all_namespace_kinds().size(), 8u);
}

TEST(Namespaces, UnknownTypeIsNull) {
    EXPECT_EQ(namespace_kind("net"), nullptr);
    EXPECT_EQ(namespace_kind_by_proc_name("net")->spec_type, "network");
}

TEST(Signals, NamesWithAndWithoutSigPrefix) {
    EXPECT_EQ(signal_from_string("KILL"), SIGKILL);
    EXPECT_EQ(signal_from_string("SIGKILL"), SIGKILL);
    EXPECT_EQ(signal_from_string("TERM"), SIGTERM);
    EXPECT_EQ(signal_from_string("SIGWINCH"), SIGWINCH);
}

TEST(Signals, CaseInsensitive) {
    EXPECT_EQ(signal_from_string("sigkill"), SIGKILL);
    EXPECT_EQ(signal_from_string("hup"), SIGHUP);
}

TEST(Signals, Numbers) {
    EXPECT_EQ(signal_from_string("9"), 9);
    EXPECT_EQ(signal_from_string("15"), 15);
    EXPECT_EQ(signal_from_string(std::to_string(SIGRTMAX)), SIGRTMAX);
    EXPECT_FALSE(signal_from_string("0"));
    EXPECT_FALSE(signal_from_string(std::to_string(SIGRTMAX + 1)));
    EXPECT_FALSE(signal_from_string("-9"));
}

TEST(Signals, RealTimeOffsets) {
    EXPECT_EQ(signal_from_string("RTMIN"), SIGRTMIN);
    EXPECT_EQ(signal_from_string("RTMIN+3"), SIGRTMIN + 3);
    EXPECT_EQ(signal_from_string("SIGRTMIN+1"), SIGRTMIN + 1);
    EXPECT_EQ(signal_from_string("RTMAX-2"), SIGRTMAX - 2);
    EXPECT_EQ(signal_from_string("sigrtmax"), SIGRTMAX);
    EXPECT_FALSE(signal_from_string("RTMIN-1"));
    EXPECT_FALSE(signal_from_string("RTMIN+"));
    EXPECT_FALSE(signal_from_string("RTMIN+100"));
}

TEST(Signals, UnknownNamesAreRejected) {
    EXPECT_FALSE(signal_from_string(""));
    EXPECT_FALSE(signal_from_string("SIG"));
    EXPECT_FALSE(signal_from_string("FOO"));
    EXPECT_FALSE(signal_from_string("9x"));
}

TEST(Signals, AliasesShareNumbers) {
    EXPECT_EQ(signal_from_string("IOT"), SIGABRT);
    EXPECT_EQ(signal_from_string("CLD"), SIGCHLD);
    EXPECT_EQ(signal_from_string("POLL"), SIGIO);
}

TEST(Signals, NameOfNumber) {
    EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
    EXPECT_EQ(signal_name(SIGRTMIN + 2), "SIGRTMIN+2");
    EXPECT_EQ(signal_name(SIGRTMAX - 1), "SIGRTMAX-1");
    EXPECT_EQ(signal_name(1000), "");
}

TEST(MountOptions, RuncListIsComplete) {
    const auto& opts = known_mount_options();
    EXPECT_EQ(opts.size(), 62u);
    for (auto o : {"bind", "rbind", "ro", "rro", "nosymfollow", "tmpcopyup", "idmap", "ridmap",
                   "runbindable", "strictatime"})
        EXPECT_TRUE(contains_name(opts, o)) << o;
    EXPECT_FALSE(contains_name(opts, "mode=755"));
    EXPECT_EQ(std::set<std::string_view>(opts.begin(), opts.end()).size(), opts.size());
}

TEST(Seccomp, SpecConstantsAreKnown) {
    EXPECT_TRUE(contains_name(seccomp_action_names(), "SCMP_ACT_ERRNO"));
    EXPECT_TRUE(contains_name(seccomp_action_names(), "SCMP_ACT_NOTIFY"));
    EXPECT_TRUE(contains_name(seccomp_operator_names(), "SCMP_CMP_MASKED_EQ"));
    EXPECT_TRUE(contains_name(seccomp_arch_names(), "SCMP_ARCH_X86_64"));
    EXPECT_TRUE(contains_name(seccomp_flag_names(), "SECCOMP_FILTER_FLAG_LOG"));
    EXPECT_FALSE(contains_name(seccomp_action_names(), "SCMP_ACT_FOO"));
}
