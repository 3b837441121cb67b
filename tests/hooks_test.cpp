#include <gtest/gtest.h>

#include "libforkbox/process/hooks.hpp"

using forkbox::config_may_have_hooks;

TEST(ConfigMayHaveHooks, NoHooksKeyMeansNone) {
    EXPECT_FALSE(config_may_have_hooks(R"({"ociVersion":"1.0.2","process":{"args":["sh"]}})", "poststart"));
}

TEST(ConfigMayHaveHooks, TheNameAnywhereMeansMaybe) {
    EXPECT_TRUE(config_may_have_hooks(R"({"hooks":{"poststart":[{"path":"/bin/true"}]}})", "poststart"));
    EXPECT_FALSE(config_may_have_hooks(R"({"hooks":{"poststart":[{"path":"/bin/true"}]}})", "poststop"));
    // A string value naming it is a false "maybe": harmless, the config is then parsed.
    EXPECT_TRUE(config_may_have_hooks(R"({"annotations":{"x":"poststop"}})", "poststop"));
}

TEST(ConfigMayHaveHooks, AnEscapeMeansMaybe) {
    // "\u0070oststop" is "poststop" once decoded.
    EXPECT_TRUE(config_may_have_hooks(R"({"hooks":{"\u0070oststop":[{"path":"/bin/true"}]}})", "poststop"));
}
