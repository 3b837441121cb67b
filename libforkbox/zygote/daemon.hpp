// `forkbox daemon`: keeps pools of warm namespace templates for zygote-mode clients.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/sandbox/server.hpp"

namespace forkbox::zygote {

struct DaemonOptions {
    std::string socket_path;
    int pool_size = 4;               // warm templates kept per key
    int evict_after_seconds = 600;   // a key nobody asked for this long loses its pool
    int refill_delay_ms = 10;        // refill after this long without a request (or when low)
    int rootfs_after = 2;            // requests for a bundle before its rootfs templates are made
    // Kinds of container to keep warm from the start (--warm BUNDLE).
    struct WarmKind {
        int key = 0;
        std::string cgroup_parent;
        std::string rootfs;  // "<config fingerprint> <bundle>" when a rootfs template fits
        std::string id_maps;  // encode_id_maps() of a user namespace's maps
    };
    std::vector<WarmKind> warm_keys;
    // The sandbox service (sandbox/server.hpp), behind the same socket.
    bool sandboxes = true;
    sandbox::ServerOptions sandbox;
};

// Serves until SIGTERM or SIGINT, then releases every template (namespaces and spare
// cgroups) and removes the socket. On start, removes spare cgroups left by daemons that died.
Result<void> run_daemon(const DaemonOptions& options);

}  // namespace forkbox::zygote
