// A client of the sandbox protocol (docs/sandbox-protocol.md), for `forkbox sandbox` and the
// benchmarks: one connection per call, output handed on as it comes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"

namespace forkbox::sandbox {

struct ClientOutput {
    std::function<void(std::string_view)> stdout_data, stderr_data;
};

// Sends "sandbox/1 <verb>\n<body>" (and `stdin_data` in frames, then its end, when given),
// passes output frames on, and returns the final result's JSON. A '!' reply is an error
// whose message is "<kind>: <message>"; no daemon is ECONNREFUSED/ENOENT naming the socket.
Result<std::string> call_sandbox(const std::string& socket_path, std::string_view verb, std::string_view body,
                                 const std::optional<std::string>& stdin_data = std::nullopt,
                                 const ClientOutput& output = {});

}  // namespace forkbox::sandbox
