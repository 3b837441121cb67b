// `forkbox daemon`: keeps pools of warm namespace templates for zygote-mode clients.
#pragma once

#include <string>
#include <vector>

#include "libforkbox/error.hpp"

namespace forkbox::zygote {

struct DaemonOptions {
    std::string socket_path;
    int pool_size = 4;               // warm templates kept per key
    int evict_after_seconds = 600;   // a key nobody asked for this long loses its pool
    std::vector<int> warm_keys;      // keys to keep warm from the start (--warm BUNDLE)
};

// Serves until SIGTERM or SIGINT, then releases every template and removes the socket.
Result<void> run_daemon(const DaemonOptions& options);

}  // namespace forkbox::zygote
