// cgroup placement on v1, v2 and hybrid hosts behind one interface. The layout is read once
// per invocation from /proc/self/mountinfo. Limits (linux.resources) are not applied yet.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "libforkbox/error.hpp"
#include "libforkbox/fd.hpp"

namespace forkbox {

struct CgroupHierarchy {
    std::string mountpoint;   // /sys/fs/cgroup/memory, /sys/fs/cgroup/unified, /sys/fs/cgroup
    bool unified = false;     // cgroup2
    std::string controllers;  // v1 super options naming the controllers: "memory", "name=systemd"
};

enum class CgroupMode { None, V1, V2, Hybrid };

struct CgroupLayout {
    CgroupMode mode = CgroupMode::None;
    std::vector<CgroupHierarchy> hierarchies;
    const CgroupHierarchy* unified() const;
};

// Parses mountinfo text (pure, unit-tested).
CgroupLayout parse_cgroup_layout(std::string_view mountinfo);
Result<CgroupLayout> detect_cgroup_layout();

// The container's cgroup directories, one per hierarchy. Removes what it created if the
// scope is left before commit().
class CgroupPlacement {
public:
    CgroupPlacement() = default;
    CgroupPlacement(CgroupPlacement&&) = default;
    CgroupPlacement& operator=(CgroupPlacement&&) = default;
    ~CgroupPlacement();

    const std::vector<std::string>& dirs() const { return dirs_; }
    const std::vector<std::string>& created() const { return created_; }
    // O_PATH fd of the v2 directory for clone3(CLONE_INTO_CGROUP), or -1.
    int unified_fd() const { return unified_fd_.get(); }
    void commit() { committed_ = true; }

    // Writes pid into cgroup.procs of every hierarchy (v2 too, unless clone3 put it there).
    Result<void> attach(pid_t pid, bool skip_unified) const;

    friend Result<CgroupPlacement> create_cgroups(const CgroupLayout&, const std::string& path);

private:
    std::vector<std::string> dirs_;
    std::vector<std::string> created_;  // parents first
    unique_fd unified_fd_;
    bool committed_ = false;
};

// Makes (mkdir -p) the cgroup at `path` (absolute, relative to each hierarchy's root).
Result<CgroupPlacement> create_cgroups(const CgroupLayout& layout, const std::string& path);

// Removes directories forkbox created, children first; retries briefly while the kernel
// is still releasing exited tasks (EBUSY).
Result<void> remove_cgroups(const std::vector<std::string>& created);

// Pids listed in <dir>/cgroup.procs.
std::vector<pid_t> cgroup_pids(const std::string& dir);

}  // namespace forkbox
