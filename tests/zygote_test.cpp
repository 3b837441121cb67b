#include <gtest/gtest.h>

#include "libforkbox/zygote.hpp"

using namespace forkbox;
using namespace forkbox::zygote;

TEST(ZygoteKey, IsTheTemplateNamespacesThePlanCreates) {
    Plan p;
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    EXPECT_EQ(template_key(p), CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS);
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID;
    EXPECT_EQ(template_key(p), 0);
}

TEST(ZygoteKey, NoTemplateForUserNamespaces) {
    Plan p;
    p.new_namespaces = CLONE_NEWNET | CLONE_NEWUSER;
    EXPECT_EQ(template_key(p), 0);
    p.new_namespaces = CLONE_NEWNET;
    p.joins.push_back(NamespaceJoin{CLONE_NEWUSER, "user", "/proc/1/ns/user"});
    EXPECT_EQ(template_key(p), 0);
}

TEST(ZygoteProtocol, RequestsRoundTrip) {
    auto r = decode_request(encode_request({Request::Op::Take, CLONE_NEWNET | CLONE_NEWUTS, {}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->op, Request::Op::Take);
    EXPECT_EQ(r->key, CLONE_NEWNET | CLONE_NEWUTS);
    auto s = decode_request(encode_request({Request::Op::Stats, 0, {}}));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->op, Request::Op::Stats);
}

TEST(ZygoteProtocol, RejectsGarbageAndForeignKeys) {
    for (const char* bad : {"", "take", "take ", "take x", "take 0", "give 1", "take 12abc"})
        EXPECT_FALSE(decode_request(bad)) << bad;
    EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWUSER)));
    EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWNET | CLONE_NEWNS)));
}

TEST(ZygoteProtocol, NamespaceCount) {
    EXPECT_EQ(namespace_count(CLONE_NEWNET), 1);
    EXPECT_EQ(namespace_count(kTemplateNamespaces), 3);
}

TEST(ZygoteSocket, EnvironmentOverridesTheDefault) {
    ::unsetenv("FORKBOX_SOCKET");
    EXPECT_EQ(default_socket_path(), "/run/forkbox/forkbox.sock");
    ::setenv("FORKBOX_SOCKET", "/tmp/x.sock", 1);
    EXPECT_EQ(default_socket_path(), "/tmp/x.sock");
    ::unsetenv("FORKBOX_SOCKET");
}

TEST(ZygoteProtocol, TakeCarriesTheCgroupParent) {
    auto r = decode_request(encode_request({Request::Op::Take, CLONE_NEWNET, "/forkbox"}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->key, CLONE_NEWNET);
    EXPECT_EQ(r->cgroup_parent, "/forkbox");
    auto root = decode_request("take " + std::to_string(CLONE_NEWNET) + " /");
    ASSERT_TRUE(root);
    EXPECT_EQ(root->cgroup_parent, "/");
    for (const char* bad : {"forkbox", "/a/../b", "/a/./b", "/a//b", "/a b", "/a/", ""})
        EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWNET) + " " + bad)) << bad;
}

TEST(ZygoteProtocol, RepliesNameOnlyASpareCgroup) {
    auto r = decode_reply(encode_reply({CLONE_NEWNET, spare_name(1234, 7)}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->key, CLONE_NEWNET);
    EXPECT_EQ(r->spare, ".zygote-1234-7");
    auto bare = decode_reply("ok " + std::to_string(CLONE_NEWNET));
    ASSERT_TRUE(bare);
    EXPECT_EQ(bare->spare, "");
    for (const char* bad : {"../../etc", ".zygote-1/../x", "zygote-1-2", ".zygote-", ".zygote-1-2 x"})
        EXPECT_FALSE(decode_reply("ok " + std::to_string(CLONE_NEWNET) + " " + bad)) << bad;
    EXPECT_FALSE(decode_reply("none"));
}

TEST(ZygoteProtocol, SpareNamesKnowTheirDaemon) {
    EXPECT_EQ(spare_owner(spare_name(4321, 1)), 4321);
    EXPECT_EQ(spare_owner("mycontainer"), 0);
    EXPECT_EQ(spare_owner(".zygote-x-1"), 0);
    EXPECT_TRUE(valid_spare_name(".zygote-99-3"));
    EXPECT_FALSE(valid_spare_name(".zygote-9/9"));
}

TEST(ZygoteProtocol, CgroupParentIsTheDirectoryAbove) {
    EXPECT_EQ(cgroup_parent("/forkbox/abc"), "/forkbox");
    EXPECT_EQ(cgroup_parent("/a/b/c"), "/a/b");
    EXPECT_EQ(cgroup_parent("/abc"), "/");
}
