// cgroup v2 delegation: a subtree a user may manage (systemd's Delegate=yes, or directories
// root chowned to it), where an unprivileged daemon makes its sandboxes' cgroups. v2 lets a
// cgroup hand controllers to its children only while it holds no process itself ("no
// internal processes"), so the daemon first leaves its own cgroup for a leaf below it.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"

namespace forkbox {

// Enables each of `wanted` that `dir` has (its cgroup.controllers) for dir's children, one
// write each (a write naming one it lacks fails as a whole). Returns the controllers enabled
// there afterwards, in CgroupHierarchy::controllers' form ("memory,pids").
Result<std::string> enable_v2_controllers(const std::string& dir, std::span<const std::string_view> wanted);

// The calling process's v2 cgroup, relative to the hierarchy's root, when it is delegated to
// the process's user: the directory, its cgroup.procs and cgroup.subtree_control writable,
// and no other process in it. Then moves the caller into `<own>/<leaf>` and enables `wanted`
// for the children of <own>. Otherwise an error says why (the caller has not moved).
Result<std::string> enter_delegated_cgroup(const CgroupHierarchy& v2, std::string_view leaf,
                                           std::span<const std::string_view> wanted);

}  // namespace forkbox
