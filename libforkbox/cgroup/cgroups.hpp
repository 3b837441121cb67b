// cgroup placement on v1, v2 and hybrid hosts behind one interface. The layout is read once
// per invocation from /proc/self/mountinfo. Limits (linux.resources) are resources.hpp's.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

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

// True when a comma-separated controller list ("cpu,memory,pids") names `controller` (pure).
bool controller_listed(std::string_view list, std::string_view controller);
// True when h is a v1 hierarchy mounted with `controller` ("memory", "cpuacct", "name=systemd").
bool hierarchy_has(const CgroupHierarchy& h, std::string_view controller);
// True when a v1 hierarchy of the layout is mounted with `controller`, or its v2 hierarchy
// lists it in `controllers` (load_v2_controllers, or what a parent enables for its children).
bool layout_offers(const CgroupLayout& layout, std::string_view controller);
// A v2 cgroup.controllers or cgroup.subtree_control text ("cpu memory pids\n") as
// CgroupHierarchy::controllers holds it ("cpu,memory,pids"). Pure.
std::string v2_controller_list(std::string_view text);

// The dir among a container's cgroup dirs that lies in hierarchy h (pure). The longest
// mountpoint wins, so a v1 mount below a v2 one (/sys/fs/cgroup/memory under /sys/fs/cgroup)
// is not mistaken for it.
std::optional<std::string> cgroup_dir_in(const CgroupLayout& layout, const CgroupHierarchy& h,
                                         const std::vector<std::string>& dirs);

// Where a controller's files are for a container (pure): its dir in the v1 hierarchy mounted
// with `controller`, else its dir in the v2 hierarchy (whose files then exist only when the
// controller is enabled there); nullopt when it has neither.
struct ControllerDir {
    std::string dir;
    bool unified = false;
};
std::optional<ControllerDir> controller_dir(const CgroupLayout& layout, const std::vector<std::string>& dirs,
                                            std::string_view controller);

// The cgroup dirs a process is in, one per hierarchy of the layout, from its
// /proc/PID/cgroup text (pure): "" for a hierarchy the text does not name.
std::vector<std::string> cgroup_dirs_of_process(const CgroupLayout& layout, std::string_view proc_cgroup);
// This process's, from /proc/self/cgroup.
Result<std::vector<std::string>> own_cgroup_dirs(const CgroupLayout& layout);

// `exec --cgroup` (runc's): each value is "[CONTROLLER[,CONTROLLER...]:]PATH", PATH under
// the container's cgroup (a leading "/" too). Returns the directory the process joins in
// each hierarchy of the layout: the container's (container_dirs, in layout order) with the
// PATH given for one of that hierarchy's controllers, or with the one PATH given without
// controllers, else the container's own. Refuses, as runc does, a PATH without controllers
// beside other values, a controller named twice or empty; and a PATH with "..", a controller
// no hierarchy has, and controllers on a pure v2 host (pure).
Result<std::vector<std::string>> exec_cgroup_dirs(const CgroupLayout& layout,
                                                  const std::vector<std::string>& container_dirs,
                                                  const std::vector<std::string>& values);

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
    // A directory made for the container after the placement (the systemd driver's joins):
    // removed with the rest if the scope is left before commit().
    void add_created(std::string dir) { created_.push_back(std::move(dir)); }
    // Whether a zygote spare became the container's cgroup in every v1 hierarchy.
    bool spare_taken_everywhere() const { return spare_taken_everywhere_; }

    // Write-only fds of the v1 hierarchies' `tasks` files, for join_v1_cgroups in the child
    // (not of those a manager makes: its process is put there by the manager).
    Result<std::vector<unique_fd>> open_v1_task_files(const CgroupLayout& layout) const;

    friend Result<CgroupPlacement> create_cgroups(const CgroupLayout&, const std::string&, const std::string&,
                                                  const std::vector<bool>&, const std::vector<bool>&);

private:
    std::vector<std::string> dirs_;
    std::vector<std::string> created_;  // parents first
    std::vector<bool> by_manager_;      // per hierarchy: made by systemd, not by us
    unique_fd unified_fd_;
    bool committed_ = false;
    bool spare_taken_everywhere_ = false;
};

// The same for a child that has the container's dirs but not the placement (made after it
// was cloned): every v1 hierarchy's dir but the empty ones.
Result<std::vector<unique_fd>> open_v1_task_files(const CgroupLayout& layout, const std::vector<std::string>& dirs);

// Moves the calling (single-threaded) process into each cgroup by writing "0" to the `tasks`
// files opened by the parent. Moving oneself this way skips the global threadgroup lock a
// write of another pid to cgroup.procs takes, which costs an RCU grace period (~10-35 ms
// on v1 hosts); the kernel checks permission against the opener's (root's) credentials.
Result<void> join_v1_cgroups(const std::vector<int>& task_fds);

// Makes (mkdir -p) the cgroup at `path` (absolute, relative to each hierarchy's root). With
// `spare`, the name of a zygote template's spare cgroup under path's parent, each v1
// hierarchy renames the spare instead; spares not renamed are removed. A hierarchy marked in
// `skippable` (per layout index) where the directory cannot be made for want of permission
// (a rootless container in a delegated subtree that does not reach every hierarchy) gets
// "" as its dir: a hole, which every user of the dirs passes over. A hierarchy marked in
// `made_by_manager` gets its dir named but not made (the systemd driver: systemd makes it
// when it starts the unit), and no fd for CLONE_INTO_CGROUP.
Result<CgroupPlacement> create_cgroups(const CgroupLayout& layout, const std::string& path,
                                       const std::string& spare = {}, const std::vector<bool>& skippable = {},
                                       const std::vector<bool>& made_by_manager = {});

// What create_cgroups(layout, path, ..., made_by_manager) will make, named before any of it
// is: the dir in every hierarchy, and those of the path's dirs that do not exist yet
// (parents first; none in a manager's hierarchy), so that a create killed half-way leaves
// `delete --force` the list of cgroups to empty and remove.
struct PlannedCgroups {
    std::vector<std::string> dirs;
    std::vector<std::string> created;
};
PlannedCgroups planned_cgroups(const CgroupLayout& layout, const std::string& path,
                               const std::vector<bool>& made_by_manager = {});

// A zygote template's spare cgroup that no container will take (named `spare` under the
// cgroup parent `parent`, zygote::cgroup_parent): removed from every v1 hierarchy.
void remove_spare_cgroups(const CgroupLayout& layout, const std::string& parent, const std::string& spare);

// Makes each missing directory of `path` (a cgroup path, "/a/b") under `mountpoint`, a
// cpuset's filled from its parent (so is an existing one left empty), and appends what it
// made to `made`; returns the leaf. With refusal_stops, a mkdir refused (EACCES, EPERM,
// EROFS: a hierarchy the user was not given) ends it with none.
Result<std::optional<std::string>> make_cgroup_path(const std::string& mountpoint, std::string_view path, bool cpuset,
                                                    std::vector<std::string>& made, bool refusal_stops);

// A new v1 cpuset cgroup starts with no cpus and no memory nodes: copies its parent's
// (with only_if_empty, only those files of dir that are empty).
Result<void> inherit_cpuset(const std::string& dir, bool only_if_empty = false);

// The parent of the cgroups forkbox names itself (no cgroupsPath: "/forkbox/<id>"; a relative
// one: below it), as Plan resolves them.
inline constexpr std::string_view kDefaultCgroupParent = "/forkbox";

// What delete removes of the cgroup dirs a create made (pure): all but the default parent,
// which stays once made, as runc leaves the parents it makes. Its first cpuset child switches
// on the kernel's cpuset static keys and its removal switches them off, each a patch of the
// kernel's text on every CPU (~1 ms a container on these VMs, half of it in a kworker): kept,
// the cpuset hierarchy never empties between containers. It also saves a mkdir and an rmdir
// per hierarchy and container.
std::vector<std::string> removable_cgroups(const CgroupLayout& layout, std::vector<std::string> created);

// Removes directories forkbox created, children first, and (as runc's delete) every cgroup
// made below a container's own since; retries briefly while the kernel is still
// releasing exited tasks (EBUSY).
Result<void> remove_cgroups(const std::vector<std::string>& created);

// Pids listed in <dir>/cgroup.procs: the processes of that cgroup alone.
std::vector<pid_t> cgroup_pids(const std::string& dir);
// The processes of dir and of every cgroup below it (a container's systemd or nested
// runtime moves its processes into sub-cgroups), as runc's GetAllPids. Holds an fd per
// level of depth while it walks.
std::vector<pid_t> cgroup_tree_pids(const std::string& dir);

// The first of a container's dirs that is not a hole ("" when all are): any hierarchy lists
// every process of the container.
std::string first_cgroup_dir(const std::vector<std::string>& dirs);

}  // namespace forkbox
