#include <gtest/gtest.h>

#include "libforkbox/container/container.hpp"

using namespace forkbox;

namespace {

oci::Process container_process() {
    oci::Process p;
    p.args = {"/bin/app"};
    p.env = {"PATH=/bin", "A=1"};
    p.cwd = "/srv";
    p.user.uid = 5;
    p.user.gid = 6;
    p.terminal = true;
    p.capabilities.emplace();
    p.capabilities->bounding = {"CAP_KILL"};
    p.capabilities->effective = {"CAP_KILL"};
    return p;
}

}  // namespace

TEST(ExecProcess, StartsFromTheContainersProcessWithNewArgs) {
    ExecOptions o;
    o.args = {"/bin/sh", "-c", "true"};
    auto p = exec_process(container_process(), o);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(p->args, o.args);
    EXPECT_EQ(p->cwd, "/srv");
    EXPECT_EQ(p->user.uid, 5u);
    EXPECT_EQ(p->env, (std::vector<std::string>{"PATH=/bin", "A=1"}));
    // runc: exec gets a terminal only when asked, whatever the container's process had.
    EXPECT_FALSE(p->terminal);
}

TEST(ExecProcess, AppliesEnvCwdUserAndTty) {
    ExecOptions o;
    o.args = {"x"};
    o.env = {"B=2"};
    o.cwd = "/tmp";
    o.user = "1000:1001";
    o.additional_gids = {7, 8};
    o.tty = true;
    o.no_new_privs = true;
    auto p = exec_process(container_process(), o);
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(p->env.back(), "B=2");
    EXPECT_EQ(p->cwd, "/tmp");
    EXPECT_EQ(p->user.uid, 1000u);
    EXPECT_EQ(p->user.gid, 1001u);
    EXPECT_EQ(p->user.additional_gids, (std::vector<uint32_t>{7, 8}));
    EXPECT_TRUE(p->terminal);
    EXPECT_TRUE(p->no_new_privileges);
}

TEST(ExecProcess, UserWithoutGroupKeepsTheContainersGid) {
    ExecOptions o;
    o.args = {"x"};
    o.user = "42";
    auto p = exec_process(container_process(), o);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->user.uid, 42u);
    EXPECT_EQ(p->user.gid, 6u);
}

TEST(ExecProcess, RejectsBadUsersAndCapabilities) {
    ExecOptions o;
    o.args = {"x"};
    for (const char* u : {"abc", "1:x", "", "-1", "1:"}) {
        o.user = u;
        EXPECT_FALSE(exec_process(container_process(), o)) << u;
    }
    o.user.reset();
    o.caps = {"CAP_NOPE"};
    auto p = exec_process(container_process(), o);
    ASSERT_FALSE(p);
    EXPECT_NE(std::string(p.error().what()).find("CAP_NOPE"), std::string::npos);
}

TEST(ExecProcess, CapAddsToBoundingEffectivePermittedAndAmbientOnce) {
    ExecOptions o;
    o.args = {"x"};
    o.caps = {"CAP_KILL", "CAP_NET_ADMIN"};
    auto p = exec_process(container_process(), o);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->capabilities->bounding, (std::vector<std::string>{"CAP_KILL", "CAP_NET_ADMIN"}));
    EXPECT_EQ(p->capabilities->effective, (std::vector<std::string>{"CAP_KILL", "CAP_NET_ADMIN"}));
    EXPECT_EQ(p->capabilities->permitted, (std::vector<std::string>{"CAP_KILL", "CAP_NET_ADMIN"}));
    EXPECT_EQ(p->capabilities->ambient, (std::vector<std::string>{"CAP_KILL", "CAP_NET_ADMIN"}));
    EXPECT_TRUE(p->capabilities->inheritable.empty());
}

TEST(ExecProcess, ProcessJsonReplacesEverything) {
    ExecOptions o;
    o.process_file = "p.json";
    auto p = exec_process(container_process(), o, R"({"args": ["/bin/true"], "cwd": "/", "user": {"uid": 3, "gid": 4}})");
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_EQ(p->args, (std::vector<std::string>{"/bin/true"}));
    EXPECT_EQ(p->user.uid, 3u);
    EXPECT_TRUE(p->env.empty());
    EXPECT_FALSE(p->capabilities);
}

TEST(ExecProcess, NeedsArgsAndAnAbsoluteCwd) {
    ExecOptions o;
    EXPECT_FALSE(exec_process(container_process(), o));
    o.args = {"x"};
    o.cwd = "relative";
    EXPECT_FALSE(exec_process(container_process(), o));
    o.process_file = "p.json";
    EXPECT_FALSE(exec_process(container_process(), o, R"({"args": ["x"], "cwd": "rel", "user": {"uid": 0, "gid": 0}})"));
    EXPECT_FALSE(exec_process(container_process(), o, "{not json"));
}
