#include "libforkbox/cgroup/delegation.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "libforkbox/base/files.hpp"

namespace forkbox {

Result<std::string> enable_v2_controllers(const std::string& dir, std::span<const std::string_view> wanted) {
    FB_ASSIGN(std::string available, read_file(dir + "/cgroup.controllers"));
    std::string listed = v2_controller_list(available);
    for (auto c : wanted)
        if (controller_listed(listed, c)) (void)write_file(dir + "/cgroup.subtree_control", "+" + std::string(c));
    FB_ASSIGN(std::string enabled, read_file(dir + "/cgroup.subtree_control"));
    return v2_controller_list(enabled);
}

Result<std::string> enter_delegated_cgroup(const CgroupHierarchy& v2, std::string_view leaf,
                                           std::span<const std::string_view> wanted) {
    FB_ASSIGN(auto dirs, own_cgroup_dirs(CgroupLayout{CgroupMode::V2, {v2}}));
    const std::string& own = dirs.front();
    if (own.size() <= v2.mountpoint.size()) return fail("its cgroup is the root of the v2 hierarchy");
    for (const char* file : {"", "/cgroup.procs", "/cgroup.subtree_control"})
        if (::access((own + file).c_str(), W_OK) < 0)
            return fail(errno, own + file + " is not delegated to uid " + std::to_string(::geteuid()));
    for (pid_t pid : cgroup_pids(own))
        if (pid != ::getpid()) return fail(own + " holds other processes than the daemon (pid " + std::to_string(pid) + ")");
    std::string leaf_dir = own + "/" + std::string(leaf);
    if (::mkdir(leaf_dir.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("mkdir " + leaf_dir);
    FB_TRY(write_file(leaf_dir + "/cgroup.procs", std::to_string(::getpid())));
    FB_TRY(enable_v2_controllers(own, wanted));
    return own.substr(v2.mountpoint.size());
}

}  // namespace forkbox
