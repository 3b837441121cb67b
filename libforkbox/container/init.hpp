// The container's init: everything between clone and execve, in the child.
#pragma once

#include <string>
#include <vector>

#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox {

struct InitArgs {
    const Plan* plan = nullptr;
    const CgroupLayout* cgroup_layout = nullptr;
    std::vector<std::string> cgroup_dirs;
    std::vector<int> cgroup_task_fds;  // v1 `tasks` files the child joins itself
    // The v1 cgroups (cgroup_dirs names them) are made by `create` after the clone: joined
    // once CgroupsPlaced says they exist, before a cgroup mount or anything of the container.
    bool v1_cgroups_follow = false;
    std::vector<OpenNamespace>* namespaces = nullptr;  // to join (intermediate path only)
    int sync_fd = -1;
    int state_dir_fd = -1;  // holds the exec fifo
    int lock_fd = -1;       // the parent's flock: closed at once, or the child would hold it
    bool no_pivot = false;
    bool unprivileged_parent = false;  // create runs as a user: it maps our ids through /proc/PID
    bool in_user_namespace = false;    // create runs in a user namespace already (rootless podman)
    bool new_keyring = true;  // a fresh session keyring, named after the container (runc's default)
    int preserve_fds = 0;
    int console_fd = -1;  // connected console socket when process.terminal
    int warm_namespaces = 0;    // CLONE_NEW* that came ready-made from a zygote template
    int template_mount_ns = -1;  // a zygote rootfs template's mount namespace: joined, not built
    // Its /sys/fs/cgroup already binds the spare v1 cgroups: they are the container's
    // (every spare was renamed), or they are to be replaced by the container's own.
    bool template_v1_cgroups_bound = false;
    bool template_v1_cgroups_ours = false;
    bool intermediate = false;  // this process joins namespaces and forks init itself
    const SeccompProgram* seccomp = nullptr;  // compiled by the parent; null without linux.seccomp
    int exec_stub_fd = -1;  // make_exec_stub()'s sealed memfd: the final exec goes through it
    std::vector<int> bind_source_trees;  // open_bind_sources' fds per plan mount, or empty
};

// Runs in the cloned child and never returns: it execs the container process or reports
// an error to the parent over the sync socket and exits.
[[noreturn]] void container_init(InitArgs& args);

}  // namespace forkbox
