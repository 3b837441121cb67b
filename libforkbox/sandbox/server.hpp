// The sandbox service: a process of its own behind the daemon's socket. It accepts every
// connection, serves sandbox requests and hands the zygote loop its own (SCM_RIGHTS on
// `handoff`) without reading them; this process is the parent of every
// sandbox, so it can keep embryos (embryo.hpp) ready, reap them, and watch each run with
// one single-threaded epoll loop: output pipes, stdin, the client, a timerfd deadline and
// the pidfd of the sandbox's pid 1. Why a process of its own: the zygote loop never forks
// or waits (its builder does that work), while sandboxes are children; a sandbox server
// that dies takes no zygote template with it, and the daemon starts a new one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libforkbox/sandbox/request.hpp"

namespace forkbox::sandbox {

struct ServerOptions {
    std::string stage_dir;   // an empty directory the daemon owns (embryos mount on it privately)
    std::string socket_path;  // hidden from sandboxes, with its directory
    int pool_size = 2;       // embryos kept ready per kind asked for
    int evict_after_s = 600;  // a kind nobody asked for this long loses its pool (not the default)
    int max_live = 128;      // sandboxes at once (running or being made for a request)
    Defaults defaults;
    std::vector<gid_t> allowed_groups;  // peers in these groups are served too
    uint32_t uid_base = 1000000000;     // a root daemon maps sandboxes' 0..65535 here
    uint64_t upper_size_mb = 512;       // the overlay's tmpfs, and /tmp's
    bool warm_shell = true;             // embryos start /bin/sh before a line comes (embryo.hpp)
    std::string rootfs;  // sandboxes' lower layer unless a request names one ("": the host's /)
    // A user's daemon on a cgroup v2 host (enter_delegated_v2_cgroup): its delegated cgroup,
    // relative to the hierarchy's root, or why it has none.
    std::string delegated_cgroup;
    std::string no_delegated_cgroup;
};

// A user's daemon on a pure cgroup v2 host, before it starts the service: when its cgroup is
// delegated to it (systemd's Delegate=yes), moves the daemon into a leaf below it
// (`forkbox-daemon`), so that the sandboxes' cgroups can get its controllers beside it
// (`forkbox-sandbox`). Fills options.delegated_cgroup, or options.no_delegated_cgroup.
// Nothing for a root daemon, or on a v1 or hybrid host.
void enter_delegated_v2_cgroup(ServerOptions& options);

// The directory a sandbox's lower layer is made of, from what `--rootfs` or a request's
// "rootfs" names: a directory, or an OCI bundle (its config.json's root.path); resolved
// (realpath), "" for the host's root itself.
Result<std::string> resolve_sandbox_rootfs(const std::string& path);

// Whether this process may give sandboxes a private range of ids: root of the host's user
// namespace with CAP_SETUID and CAP_SETGID. Root without them serves as a user's daemon
// does (its sandboxes' root is this root), and takes no --allow-group.
bool can_map_id_range();

// Accepts on `listener` (the daemon's socket, non-blocking): sandbox requests are served
// here, zygote requests handed to the daemon over `handoff` ("z" + the fd), which can hand
// connections here too ("c" + fd). Serves until SIGTERM or SIGINT (or until `handoff`
// closes), then kills every sandbox and releases its cgroups. Returns the exit code.
int serve_sandboxes(int handoff, int listener, const ServerOptions& options);

}  // namespace forkbox::sandbox
