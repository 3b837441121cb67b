// Building the container's root filesystem in its mount namespace: the spec's mounts,
// devices, pivot_root, then masked and read-only paths.
#pragma once

#include <string>
#include <vector>

#include "libforkbox/cgroups.hpp"
#include "libforkbox/error.hpp"
#include "libforkbox/plan.hpp"

namespace forkbox {

struct RootfsContext {
    const Plan& plan;
    const CgroupLayout& cgroup_layout;
    const std::vector<std::string>& cgroup_dirs;  // the container's dir per hierarchy
    bool in_user_namespace = false;
    bool new_cgroup_namespace = false;
};

// Before pivot_root: propagation of "/", the rootfs bind, every mount, devices, the cwd.
Result<void> prepare_rootfs(const RootfsContext& ctx);

// pivot_root into the rootfs and detach the old root (or MS_MOVE + chroot with --no-pivot).
Result<void> enter_rootfs(const std::string& rootfs, bool no_pivot);

// After pivot_root: propagation of the new "/", masked paths, read-only paths, ro remounts.
Result<void> finalize_rootfs(const RootfsContext& ctx);

// Refuses mounts that would cover /proc (CVE-2019-16884 class): only a procfs on /proc
// itself and binds onto a few well-known files (lxcfs) are allowed.
Result<void> check_proc_destination(const MountStep& step);

}  // namespace forkbox
