// `events`: a container's stats and OOM notifications as runc prints them, one JSON object
// per line ({"type":"stats","id":ID,"data":{...}} and {"type":"oom","id":ID}).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/container/state.hpp"

namespace forkbox {

struct EventsOptions {
    bool stats_only = false;  // --stats: one stats event, then return
    std::chrono::nanoseconds interval = std::chrono::seconds(5);
};

// Receives one event line (no newline); returning false ends the stream (output gone).
using EventSink = std::function<bool(const std::string&)>;

// With stats_only, one stats event. Otherwise a stats event every interval (the first one
// after one interval, as runc) and an oom event for each OOM in the container's memory
// cgroup, until the container stops or is deleted (returns success), SIGINT or SIGTERM
// arrives (success), or the sink refuses a line. A stopped container is an error, in
// runc's words.
Result<void> container_events(const StateStore& store, const std::string& id, const EventsOptions& options,
                              const EventSink& sink);

}  // namespace forkbox
