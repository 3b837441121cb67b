// Rootless: forkbox without real root. Either an unprivileged user runs it (it makes the
// user namespace itself), or it runs as root inside a user namespace someone else made
// (rootless podman calls it so). Either way cgroups may be out of reach and the state root
// belongs to the user.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace forkbox {

struct RootlessMode {
    bool unprivileged = false;       // euid != 0
    bool in_user_namespace = false;  // /proc/self/uid_map is not the initial namespace's identity map
    bool any() const { return unprivileged || in_user_namespace; }
};

// Read once per process (a look at /proc/self/uid_map), then cached.
const RootlessMode& rootless_mode();

// The id `inside` is in the parent user namespace, from a uid_map or gid_map text ("inside
// outside count" lines); nullopt when no line maps it (pure).
std::optional<uid_t> outer_id(std::string_view map, uid_t inside);
// This process's effective uid as the parent user namespace (the host, one level up) sees
// it: what a peer on a Unix socket outside gets as our credentials.
uid_t host_euid();

// runc's default state root, for forkbox: $XDG_RUNTIME_DIR/forkbox for an unprivileged user,
// and for root in a user namespace unless $USER is root; /run/forkbox otherwise.
std::string default_state_root();

}  // namespace forkbox
