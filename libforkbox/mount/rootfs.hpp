// Building the container's root filesystem in its mount namespace: the spec's mounts,
// devices, pivot_root, then masked and read-only paths.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/plan/plan.hpp"

namespace forkbox {

struct RootfsContext {
    const Plan& plan;
    const CgroupLayout& cgroup_layout;
    const std::vector<std::string>& cgroup_dirs;  // the container's dir per hierarchy
    bool in_user_namespace = false;
    bool new_cgroup_namespace = false;
    // A zygote rootfs template, made ahead by the daemon's builder, which is not (and never
    // will be) in the container's pid namespace:
    int proc_pidns_fd = -1;           // procfs shows this pid namespace (pidns=), not the mounter's
    bool defer_cgroup_trees = false;  // cgroup mounts get their mount points only (attach_cgroup_trees)
    // With defer_cgroup_trees: per hierarchy, a directory to bind now instead ("" for none).
    // The builder binds the template's spare v1 cgroups, which the client then renames to
    // the container's own: a bind follows its directory through a rename.
    std::vector<std::string> premount_cgroup_dirs = {};
    // In init, joining a template whose v1 cgroup trees were bound ahead: whether those
    // binds are the container's cgroups (every spare renamed), else they are replaced.
    bool v1_cgroups_premounted = false;
    bool replace_premounted_v1 = false;
    // Bind sources opened by `create` before the clone, per plan.mounts index (-1: none): a
    // source the container's root cannot reach (in its user namespace) still mounts.
    const std::vector<int>* bind_source_trees = nullptr;
    // Called before the first cgroup mount (cold path): init joins the v1 cgroups `create`
    // made while it mounted, which the mount binds.
    std::function<Result<void>()> before_cgroup_mount = {};
};

// Detached copies (open_tree) of the plan's bind sources, per plan.mounts index (empty fds
// for the other mounts), taken by the caller before a new user namespace is entered: as
// runc, a bind source the caller can reach mounts even where the container's root could not.
// idmapped_only: the idmapped binds' alone (the others mount by path).
Result<std::vector<unique_fd>> open_bind_sources(const Plan& plan, bool idmapped_only = false);

// The same, each source looked up without magic links (no /proc/PID/root, /proc/PID/cwd or
// /proc/PID/fd/N on the way): for sources a caller other than the daemon named, looked up
// with that caller's rights (BorrowedFsIdentity), which those links would get around.
Result<std::vector<unique_fd>> open_bind_sources_no_magic_links(const Plan& plan);

// Gives a detached tree the id maps of the user namespace `userns_fd` (mount_setattr
// MOUNT_ATTR_IDMAP): its top mount, or with `recursive` every mount in it.
Result<void> idmap_tree(int tree, int userns_fd, bool recursive, const std::string& what);

// The container's cgroup directories as detached mount trees (open_tree), one per hierarchy,
// taken in the host's mount namespace for attach_cgroup_trees (none for v1 hierarchies a
// template bound ahead, unless they are to be replaced).
Result<std::vector<unique_fd>> clone_cgroup_trees(const RootfsContext& ctx);

// In the template's mount namespace (after setns): the cgroup mounts a template left for
// the container, attached at their mount points and made read-only as the spec asks.
Result<void> attach_cgroup_trees(const RootfsContext& ctx, std::vector<unique_fd>& trees);

// Before pivot_root: propagation of "/", the rootfs bind, every mount, devices, the cwd.
Result<void> prepare_rootfs(const RootfsContext& ctx);

// pivot_root into the rootfs and detach the old root (or MS_MOVE + chroot with --no-pivot).
Result<void> enter_rootfs(const std::string& rootfs, bool no_pivot);

// After pivot_root: propagation of the new "/", masked paths, read-only paths, ro remounts.
Result<void> finalize_rootfs(const RootfsContext& ctx);

// With process.terminal, after pivot_root: the container's pty (pty_fd, opened from its
// master, never by path) bound over /dev/console, made if missing, as runc does and the
// runtime-spec asks. A /dev/console that is a symlink is refused (CVE-2025-52565 class); a
// read-only /dev without one is left without.
Result<void> mount_dev_console(int pty_fd);

// Refuses mounts that would cover /proc (CVE-2019-16884 class): only a procfs on /proc
// itself and binds onto a few well-known files (lxcfs) are allowed.
Result<void> check_proc_destination(const MountStep& step);

}  // namespace forkbox
