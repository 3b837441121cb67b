#include <gtest/gtest.h>

#include "libforkbox/zygote/zygote.hpp"

using namespace forkbox;
using namespace forkbox::zygote;

TEST(ZygoteKey, IsTheTemplateNamespacesThePlanCreates) {
    Plan p;
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    EXPECT_EQ(template_key(p), CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS);
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID;
    EXPECT_EQ(template_key(p), 0);
}

TEST(ZygoteKey, UserNamespaceTemplatesNeedBothIdMaps) {
    Plan p;
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUSER;
    EXPECT_EQ(template_key(p), 0);  // no maps: the cold path and its errors
    p.uid_mappings = {{0, 100000, 65536}};
    EXPECT_EQ(template_key(p), 0);
    p.gid_mappings = {{0, 100000, 65536}};
    EXPECT_EQ(template_key(p), CLONE_NEWUSER | CLONE_NEWNET);
}

TEST(ZygoteKey, NoTemplateWhenJoiningAUserNamespace) {
    Plan p;
    p.new_namespaces = CLONE_NEWNET;
    p.joins.push_back(NamespaceJoin{CLONE_NEWUSER, "user", "/proc/1/ns/user"});
    EXPECT_EQ(template_key(p), 0);
}

TEST(ZygoteProtocol, IdMapsRoundTrip) {
    std::vector<oci::IdMapping> uids{{0, 100000, 65536}, {65536, 4294901760u, 1}}, gids{{0, 200000, 1000}};
    std::string text = encode_id_maps(uids, gids);
    EXPECT_EQ(text, "u0:100000:65536,u65536:4294901760:1,g0:200000:1000");
    auto maps = decode_id_maps(text);
    ASSERT_TRUE(maps);
    ASSERT_EQ(maps->uids.size(), 2u);
    EXPECT_EQ(maps->uids[1].host_id, 4294901760u);
    ASSERT_EQ(maps->gids.size(), 1u);
    EXPECT_EQ(maps->gids[0].size, 1000u);
    for (const char* bad : {"", "u0:1:1", "g0:1:1", "u0:1:0,g0:1:1", "u0:1,g0:1:1", "x0:1:1,g0:1:1",
                            "u0:1:1,g0:1:1,u1:2:1", "u0:1:4294967296,g0:1:1", "u0:1:1 ,g0:1:1", "u0:1:1,g0:1:1,"})
        EXPECT_FALSE(decode_id_maps(bad)) << bad;
}

TEST(ZygoteProtocol, UserNamespaceRequestsCarryTheirIdMaps) {
    Request take{Request::Op::Take, CLONE_NEWUSER | CLONE_NEWNET, "/forkbox", {}, {}, "u0:100000:65536,g0:100000:65536"};
    auto r = decode_request(encode_request(take));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->key, CLONE_NEWUSER | CLONE_NEWNET);
    EXPECT_EQ(r->cgroup_parent, "/forkbox");
    EXPECT_EQ(r->id_maps, "u0:100000:65536,g0:100000:65536");
    std::string key = std::to_string(CLONE_NEWUSER | CLONE_NEWNET);
    // Maps without the key's user flag, the flag without maps, bad maps: refused.
    EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWNET) + " / userns u0:1:1,g0:1:1"));
    EXPECT_FALSE(decode_request("take " + key + " /forkbox"));
    EXPECT_FALSE(decode_request("take " + key + " /forkbox userns u0:1:1"));
    EXPECT_FALSE(decode_request("take " + key + " /forkbox userns "));
    EXPECT_TRUE(decode_request("take " + key + " / userns u0:1:1,g0:1:1"));
}

TEST(ZygoteProtocol, RequestsRoundTrip) {
    auto r = decode_request(encode_request(Request{Request::Op::Take, CLONE_NEWNET | CLONE_NEWUTS, {}, {}, {}, {}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->op, Request::Op::Take);
    EXPECT_EQ(r->key, CLONE_NEWNET | CLONE_NEWUTS);
    auto s = decode_request(encode_request(Request{Request::Op::Stats, 0, {}, {}, {}, {}}));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->op, Request::Op::Stats);
}

TEST(ZygoteProtocol, RejectsGarbageAndForeignKeys) {
    for (const char* bad : {"", "take", "take ", "take x", "take 0", "give 1", "take 12abc"})
        EXPECT_FALSE(decode_request(bad)) << bad;
    EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWUSER)));  // no id maps
    EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWNET | CLONE_NEWNS)));
}

TEST(ZygoteProtocol, NamespaceCount) {
    EXPECT_EQ(namespace_count(CLONE_NEWNET), 1);
    EXPECT_EQ(namespace_count(kTemplateNamespaces), 3);
    EXPECT_EQ(namespace_count(kTemplateKeyFlags), 4);
}

TEST(ZygoteSocket, EnvironmentOverridesTheDefault) {
    ::unsetenv("FORKBOX_SOCKET");
    EXPECT_EQ(default_socket_path(), "/run/forkbox/forkbox.sock");
    ::setenv("FORKBOX_SOCKET", "/tmp/x.sock", 1);
    EXPECT_EQ(default_socket_path(), "/tmp/x.sock");
    ::unsetenv("FORKBOX_SOCKET");
}

TEST(ZygoteProtocol, TakeCarriesTheCgroupParent) {
    auto r = decode_request(encode_request(Request{Request::Op::Take, CLONE_NEWNET, "/forkbox", {}, {}, {}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->key, CLONE_NEWNET);
    EXPECT_EQ(r->cgroup_parent, "/forkbox");
    auto root = decode_request("take " + std::to_string(CLONE_NEWNET) + " /");
    ASSERT_TRUE(root);
    EXPECT_EQ(root->cgroup_parent, "/");
    for (const char* bad : {"forkbox", "/a/../b", "/a/./b", "/a//b", "/a b", "/a/", ""})
        EXPECT_FALSE(decode_request("take " + std::to_string(CLONE_NEWNET) + " " + bad)) << bad;
}

TEST(ZygoteProtocol, NoSpareCgroupsIsADashWhenAUserNamespaceOrARootfsFollows) {
    Request r{Request::Op::Take, CLONE_NEWNET, "", "0123456789abcdef", "/b", {}};
    std::string text = encode_request(r);
    EXPECT_EQ(text, "take " + std::to_string(CLONE_NEWNET) + " - rootfs 0123456789abcdef /b");
    auto back = decode_request(text);
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(back->cgroup_parent, "");
    EXPECT_EQ(back->rootfs_bundle, "/b");
    auto bare = decode_request(encode_request(Request{Request::Op::Take, CLONE_NEWNET, "", {}, {}, {}}));
    ASSERT_TRUE(bare);
    EXPECT_EQ(bare->cgroup_parent, "");
}

TEST(ZygoteProtocol, RepliesNameOnlyASpareCgroup) {
    auto r = decode_reply(encode_reply({CLONE_NEWNET, spare_name(1234, 7), false}));
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

TEST(ZygoteProtocol, RootfsRequestsCarryFingerprintAndBundle) {
    Request take{Request::Op::Take, CLONE_NEWNET, "/forkbox", config_fingerprint("{}"), "/var/lib/my bundle", {}};
    auto r = decode_request(encode_request(take));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->rootfs_fingerprint, config_fingerprint("{}"));
    EXPECT_EQ(r->rootfs_bundle, "/var/lib/my bundle");  // to the end of the line, spaces and all
    std::string base = "take " + std::to_string(CLONE_NEWNET) + " /forkbox ";
    for (const char* bad : {"rootfs 0123", "rootfs 0123456789abcdeZ /b", "rootfs 0123456789abcdef relative",
                            "rootfs 0123456789abcdef /a\nb", "other 0123456789abcdef /b"})
        EXPECT_FALSE(decode_request(base + bad)) << bad;
    EXPECT_NE(config_fingerprint("{\"a\":1}"), config_fingerprint("{\"a\":2}"));
    EXPECT_EQ(config_fingerprint("x").size(), 16u);
}

TEST(ZygoteProtocol, ConfigFingerprintSeesEveryByteOfALargeConfig) {
    // Hashed eight bytes a step: a change in any word, or in the tail past the last whole
    // word, must show.
    std::string config(14 * 1024 + 5, 'a');
    std::string base = config_fingerprint(config);
    for (size_t at : {size_t{0}, size_t{7}, size_t{8}, config.size() / 2, config.size() - 6, config.size() - 1}) {
        std::string changed = config;
        changed[at] = 'b';
        EXPECT_NE(config_fingerprint(changed), base) << "byte " << at;
    }
    EXPECT_NE(config_fingerprint(config + "a"), base);
}

TEST(ZygoteProtocol, RepliesSayWhetherTheTemplateHasARootfs) {
    auto r = decode_reply(encode_reply({CLONE_NEWNET, spare_name(1, 2), true}));
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->rootfs);
    EXPECT_EQ(r->spare, ".zygote-1-2");
    auto plain = decode_reply(encode_reply({CLONE_NEWNET, "", true}));
    ASSERT_TRUE(plain);
    EXPECT_TRUE(plain->rootfs);
    EXPECT_FALSE(decode_reply("ok 1 rootfs rootfs"));
    EXPECT_FALSE(decode_reply("ok 1 rootfs .zygote-1-2"));
}

TEST(ZygoteProtocol, RepliesSayWhetherADeviceProgramComesWithARootfsTemplate) {
    auto r = decode_reply(encode_reply({CLONE_NEWNET, spare_name(1, 2), true, true, true}));
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->v1_cgroups_bound);
    EXPECT_TRUE(r->device_program);
    auto v2 = decode_reply(encode_reply({CLONE_NEWNET, "", true, false, true}));
    ASSERT_TRUE(v2);
    EXPECT_TRUE(v2->device_program);
    EXPECT_FALSE(v2->v1_cgroups_bound);
    // Only with a rootfs template, once, and after "cgroups".
    EXPECT_EQ(encode_reply({CLONE_NEWNET, "", false, false, true}), "ok " + std::to_string(CLONE_NEWNET));
    EXPECT_FALSE(decode_reply("ok 1 devices"));
    EXPECT_FALSE(decode_reply("ok 1 rootfs devices devices"));
    EXPECT_FALSE(decode_reply("ok 1 .zygote-1-2 rootfs devices cgroups"));
}

namespace {
Plan rootfs_plan() {
    Plan p;
    p.new_namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    p.has_mount_namespace = true;
    MountStep cgroup;
    cgroup.kind = MountKind::Cgroup;
    cgroup.destination = "/sys/fs/cgroup";
    p.mounts.push_back(cgroup);
    return p;
}
}  // namespace

TEST(ZygoteRootfs, FitsAPlainContainer) { EXPECT_TRUE(rootfs_template_fits(rootfs_plan())); }

TEST(ZygoteRootfs, FitsAContainerWithACgroupNamespace) {
    // runc spec's template on cgroup v2 hosts, and podman's default there: init unshares it.
    Plan p = rootfs_plan();
    p.new_namespaces |= CLONE_NEWCGROUP;
    EXPECT_TRUE(rootfs_template_fits(p));
}

TEST(ZygoteRootfs, NotWhatInitMustBuildItself) {
    auto without = [](int flag) {
        Plan p = rootfs_plan();
        p.new_namespaces &= ~flag;
        return p;
    };
    EXPECT_FALSE(rootfs_template_fits(without(CLONE_NEWNS)));
    EXPECT_FALSE(rootfs_template_fits(without(CLONE_NEWPID)));
    for (int extra : {CLONE_NEWUSER, CLONE_NEWTIME}) {
        Plan p = rootfs_plan();
        p.new_namespaces |= extra;
        EXPECT_FALSE(rootfs_template_fits(p)) << extra;
    }
    Plan joins = rootfs_plan();
    joins.joins.push_back(NamespaceJoin{CLONE_NEWNET, "network", "/proc/1/ns/net"});
    EXPECT_FALSE(rootfs_template_fits(joins));
    Plan hooks = rootfs_plan();
    hooks.hooks.create_container.push_back(oci::Hook{});
    EXPECT_FALSE(rootfs_template_fits(hooks));
    Plan prestart = rootfs_plan();
    prestart.hooks.prestart.push_back(oci::Hook{});
    EXPECT_FALSE(rootfs_template_fits(prestart));
    Plan two_cgroup_mounts = rootfs_plan();
    two_cgroup_mounts.mounts.push_back(two_cgroup_mounts.mounts.back());
    EXPECT_FALSE(rootfs_template_fits(two_cgroup_mounts));
    // Hooks that run once the container is made are fine.
    Plan poststart = rootfs_plan();
    poststart.hooks.poststart.push_back(oci::Hook{});
    poststart.hooks.start_container.push_back(oci::Hook{});
    EXPECT_TRUE(rootfs_template_fits(poststart));
}
