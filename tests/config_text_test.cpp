#include "oci/config_text.hpp"

#include <gtest/gtest.h>

#include <string>

#include "libforkbox/base/json.hpp"
#include "oci/parse.hpp"
#include "oci/spec_template.hpp"

using namespace forkbox;
using namespace forkbox::oci;

namespace {

void expect_split(const std::string& config, const std::string& profile, const std::string& rest) {
    auto m = split_seccomp_member(config);
    ASSERT_TRUE(m) << config;
    EXPECT_EQ(m->profile, profile) << config;
    EXPECT_EQ(m->rest, rest) << config;
}

}  // namespace

TEST(SplitSeccompMember, CutsTheMemberAndOneComma) {
    expect_split(R"({"ociVersion":"1.0","linux":{"a":1,"seccomp":{"defaultAction":"X"},"b":[1,2]}})",
                 R"({"defaultAction":"X"})", R"({"ociVersion":"1.0","linux":{"a":1,"b":[1,2]}})");
    expect_split(R"({"linux":{"seccomp":{"s":[{"n":["a"]}]},"x":null}})", R"({"s":[{"n":["a"]}]})",
                 R"({"linux":{"x":null}})");
    expect_split(R"({"linux":{"x":true,"seccomp":{}}})", "{}", R"({"linux":{"x":true}})");
    expect_split(R"({"linux":{"seccomp":{}}})", "{}", R"({"linux":{}})");
    expect_split("{\n  \"linux\" : {\n    \"x\": 1 ,\n    \"seccomp\" : { \"d\" : 2 }\n  }\n}\n", "{ \"d\" : 2 }",
                 "{\n  \"linux\" : {\n    \"x\": 1 \n  }\n}\n");
}

TEST(SplitSeccompMember, StringsMayHoldBracesQuotesAndCommas) {
    expect_split(R"({"a":"}{\",","linux":{"seccomp":{"s":"]\"},"},"t":-1.5e3}})", R"({"s":"]\"},"})",
                 R"({"a":"}{\",","linux":{"t":-1.5e3}})");
}

TEST(SplitSeccompMember, BackslashRunsBeforeAQuote) {
    // "a\\" ends after two backslashes; "b\\\"" holds an escaped quote.
    expect_split(R"({"x":"a\\","y":["b\\\"}"],"linux":{"seccomp":{"s":"c\\"}}})", R"({"s":"c\\"})",
                 R"({"x":"a\\","y":["b\\\"}"],"linux":{}})");
}

TEST(SplitSeccompMember, NothingToCut) {
    for (const char* config : {R"({"linux":{"x":1}})", R"({"process":{"seccomp":{}}})", R"({})",
                               R"({"linux":null})", R"({"linux":{"a":{"seccomp":{}}}})"})
        EXPECT_FALSE(split_seccomp_member(config)) << config;
}

TEST(SplitSeccompMember, RefusesWhatTheParserMightReadOtherwise) {
    for (const char* config : {
             R"({"\u006cinux":{"seccomp":{}}})",                 // an escaped key may be "linux"
             R"({"linux":{"sec\u0063omp":{}},"x":1})",           // or "seccomp"
             R"({"linux":{"seccomp":{}},"linux":{}})",          // which linux?
             R"({"linux":{"seccomp":{},"seccomp":{"d":1}}})",   // which profile?
             R"({"linux":{"seccomp":{}}} x)",                    // not one object
             R"({"linux":{"seccomp":{"a":[1,2}}})",              // cut short
             R"({"linux":{"seccomp":{}})",
             R"([{"linux":{"seccomp":{}}}])",
             "",
         })
        EXPECT_FALSE(split_seccomp_member(config)) << config;
}

TEST(SplitSeccompMember, TheDefaultSpecSplitsIntoWhatTheParserReads) {
    std::string config = default_spec_json(false);
    auto whole = parse_config(config);
    ASSERT_TRUE(whole);
    ASSERT_TRUE(whole->linux && whole->linux->seccomp);
    auto m = split_seccomp_member(config);
    ASSERT_TRUE(m);
    auto rest = parse_config(m->rest);
    ASSERT_TRUE(rest) << rest.error().what();
    ASSERT_TRUE(rest->linux);
    EXPECT_FALSE(rest->linux->seccomp);
    EXPECT_EQ(rest->linux->masked_paths, whole->linux->masked_paths);
    EXPECT_EQ(rest->process->args, whole->process->args);
    // The profile's text is the profile: wrapped back into a config it parses the same.
    auto again = parse_config(R"({"ociVersion":"1.0.0","root":{"path":"rootfs"},"linux":{"seccomp":)" +
                              std::string(m->profile) + "}}");
    ASSERT_TRUE(again) << again.error().what();
    ASSERT_TRUE(again->linux && again->linux->seccomp);
    EXPECT_EQ(again->linux->seccomp->syscalls.size(), whole->linux->seccomp->syscalls.size());
    EXPECT_EQ(again->linux->seccomp->default_action, whole->linux->seccomp->default_action);
}

TEST(ScanNamespaces, ReadsWhatIsMadeAndWhatIsJoined) {
    auto h = scan_namespaces(
        R"({"process":{"args":["sh"]},"linux":{"namespaces":[{"type":"pid"},{"type":"network"},)"
        R"({"type":"mount","path":""}],"seccomp":{"defaultAction":"SCMP_ACT_ALLOW"}}})");
    ASSERT_TRUE(h);
    EXPECT_TRUE(h->makes_network);
    EXPECT_FALSE(h->makes_user);
    EXPECT_FALSE(h->joins_any);

    h = scan_namespaces(R"({"linux":{"namespaces":[{"path":"/proc/1/ns/net","type":"network"},{"type":"user"}]}})");
    ASSERT_TRUE(h);
    EXPECT_FALSE(h->makes_network);
    EXPECT_TRUE(h->makes_user);
    EXPECT_TRUE(h->joins_any);

    for (const char* none : {R"({})", R"({"linux":{}})", R"({"linux":{"namespaces":[]}})", R"({"linux":null})"}) {
        h = scan_namespaces(none);
        ASSERT_TRUE(h) << none;
        EXPECT_FALSE(h->makes_network || h->makes_user || h->joins_any) << none;
    }
}

TEST(ScanNamespaces, CannotTellWhatTheParserMightReadOtherwise) {
    for (const char* config : {
             R"({"linux":{"namespaces":[{"type":"netw\u006frk"}]}})",  // an escape in a value
             R"({"linux":{"namespaces":[{"type":"network","type":"pid"}]}})",
             R"({"linux":{"namespaces":[{"type":"network"}]},"linux":{}})",
             R"({"linux":{"namespaces":[{"type":5}]}})",
             R"({"linux":{"namespaces":["network"]}})",
             R"({"linux":{"namespaces":[{"type":"network"}}})",  // cut short
             "",
         })
        EXPECT_FALSE(scan_namespaces(config)) << config;
}

TEST(ScanNamespaces, TheDefaultSpecMakesANetworkNamespace) {
    auto h = scan_namespaces(default_spec_json(false));
    ASSERT_TRUE(h);
    EXPECT_TRUE(h->makes_network);
    EXPECT_FALSE(h->makes_user || h->joins_any);
    h = scan_namespaces(default_spec_json(true));  // rootless
    ASSERT_TRUE(h);
    EXPECT_TRUE(h->makes_user);
}
