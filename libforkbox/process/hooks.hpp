// OCI hooks: each runs with the container state JSON on stdin, with an optional timeout.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// Runs one hook and waits for it. A non-zero exit, a signal or a timeout is an error that
// carries what the hook printed.
// The hook runs in `cwd` (the bundle, as runc does) when given.
Result<void> run_hook(const oci::Hook& hook, std::string_view state_json, const std::string& cwd = {});

// Runs hooks in order, stopping at the first failure ("<phase> hook #N: ...").
Result<void> run_hooks(const std::vector<oci::Hook>& hooks, std::string_view state_json, const char* phase,
                       const std::string& cwd = {});

// False when config.json text cannot hold hooks of `phase` ("poststart", "poststop"): then
// `start` and `delete` skip parsing the whole config (a few hundred us with a seccomp
// profile) just to find none. A \u escape could spell the name, so any escape says maybe.
bool config_may_have_hooks(std::string_view config_text, std::string_view phase);

}  // namespace forkbox
