#include "libforkbox/cgroup/cgroups.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "libforkbox/base/files.hpp"

namespace forkbox {

const CgroupHierarchy* CgroupLayout::unified() const {
    for (const auto& h : hierarchies)
        if (h.unified) return &h;
    return nullptr;
}

namespace {
std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(sep, i);
        if (j == std::string_view::npos) j = s.size();
        out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}
}  // namespace

namespace {

// A mount listed in mountinfo that a path can reach: not covered by a mount on its root (a
// bind of /sys over /sys hides the cgroup mounts below the old /sys, which stay listed), and
// below a mount that is reachable too. A parent not listed (outside our root) counts as reached.
struct MountTree {
    struct Entry {
        std::string_view id, parent, mountpoint;
    };
    std::vector<Entry> entries;
    std::map<std::string_view, size_t> by_id;
    std::set<std::string_view> covered;  // ids with a mount on their own root

    explicit MountTree(const std::vector<Entry>& all) : entries(all) {
        for (size_t i = 0; i < entries.size(); ++i) by_id.emplace(entries[i].id, i);
        for (const auto& e : entries)
            if (auto p = by_id.find(e.parent); p != by_id.end() && entries[p->second].mountpoint == e.mountpoint)
                covered.insert(e.parent);
    }
    bool reached(size_t i, int depth = 0) const {
        auto p = by_id.find(entries[i].parent);
        if (p == by_id.end() || p->second == i || depth > 256) return true;
        const Entry& parent = entries[p->second];
        return reached(p->second, depth + 1) &&
               (!covered.count(parent.id) || parent.mountpoint == entries[i].mountpoint);
    }
    bool visible(size_t i) const { return !covered.count(entries[i].id) && reached(i); }
};

}  // namespace

Result<std::vector<std::string>> exec_cgroup_dirs(const CgroupLayout& layout,
                                                  const std::vector<std::string>& container_dirs,
                                                  const std::vector<std::string>& values) {
    std::optional<std::string> for_all;
    std::vector<std::pair<std::string, std::string>> by_controller;  // (controller, path)
    for (const auto& value : values) {
        auto colon = value.find(':');
        std::string path = colon == std::string::npos ? value : value.substr(colon + 1);
        // Under the container's cgroup whatever the form, as runc joins it ("/a" is "a").
        path.erase(0, path.find_first_not_of('/'));
        bool escapes = path.empty();
        for (auto part : split(path, '/')) escapes |= part == "..";
        if (escapes)
            return fail(EINVAL, "--cgroup " + value + ": the path must name a cgroup under the container's, "
                                "without \"..\"");
        if (colon == std::string::npos) {
            if (values.size() != 1)
                return fail(EINVAL, "--cgroup " + value + ": a path without a CONTROLLER: prefix must be the only --cgroup");
            for_all = path;
            continue;
        }
        if (layout.mode == CgroupMode::V2)
            return fail(EINVAL, "--cgroup " + value + ": cgroup v2 has one hierarchy: give the path without controllers");
        for (auto c : split(std::string_view(value).substr(0, colon), ',')) {
            std::string controller(c);
            if (controller.empty()) return fail(EINVAL, "--cgroup " + value + ": an empty controller name");
            if (!layout_offers(layout, controller) && !layout_offers(layout, "name=" + controller))
                return fail(EINVAL, "--cgroup " + value + ": no cgroup hierarchy has the controller \"" + controller + "\"");
            for (const auto& [known, p] : by_controller)
                if (known == controller) return fail(EINVAL, "--cgroup: the controller " + controller + " is named twice");
            by_controller.emplace_back(controller, path);
        }
    }
    std::vector<std::string> dirs = container_dirs;
    for (size_t i = 0; i < dirs.size() && i < layout.hierarchies.size(); ++i) {
        if (dirs[i].empty()) continue;
        const CgroupHierarchy& h = layout.hierarchies[i];
        const std::string* sub = for_all ? &*for_all : nullptr;
        for (const auto& [controller, path] : by_controller)
            if (controller_listed(h.controllers, controller) || controller_listed(h.controllers, "name=" + controller))
                sub = &path;
        if (sub) dirs[i] += "/" + *sub;
    }
    return dirs;
}

CgroupLayout parse_cgroup_layout(std::string_view mountinfo) {
    CgroupLayout layout;
    std::set<std::string> seen_controllers;
    bool any_v1 = false, any_v2 = false;
    std::vector<std::string_view> lines;
    std::vector<MountTree::Entry> entries;
    for (auto line : split(mountinfo, '\n')) {
        auto fields = split(line.substr(0, line.find(" - ")), ' ');
        if (line.empty() || fields.size() < 5) continue;
        lines.push_back(line);
        entries.push_back({fields[0], fields[1], fields[4]});
    }
    MountTree tree(entries);
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string_view line = lines[i];
        // id parent maj:min root mountpoint options [optional...] - fstype source superopts
        auto dash = line.find(" - ");
        if (dash == std::string_view::npos) continue;
        auto left = split(line.substr(0, dash), ' ');
        auto right = split(line.substr(dash + 3), ' ');
        if (left.size() < 5 || right.size() < 3) continue;
        std::string_view root = left[3], mountpoint = left[4], fstype = right[0], super = right[2];
        if ((fstype == "cgroup" || fstype == "cgroup2") && !tree.visible(i)) continue;
        if (root != "/") continue;  // a bind of a sub-cgroup (inside a container): not a root
        CgroupHierarchy h;
        h.mountpoint = std::string(mountpoint);
        if (fstype == "cgroup2") {
            if (any_v2) continue;
            h.unified = true;
            any_v2 = true;
        } else if (fstype == "cgroup") {
            std::string ctrls;
            for (auto opt : split(super, ',')) {
                if (opt == "rw" || opt == "ro" || opt.empty() || opt == "clone_children" ||
                    opt == "noprefix" || opt == "xattr" || opt.starts_with("release_agent=") ||
                    opt == "cpuset_v2_mode" || opt == "favordynmods")
                    continue;
                if (!ctrls.empty()) ctrls += ',';
                ctrls += opt;
            }
            if (ctrls.empty() || !seen_controllers.insert(ctrls).second) continue;
            h.controllers = ctrls;
            any_v1 = true;
        } else {
            continue;
        }
        layout.hierarchies.push_back(std::move(h));
    }
    if (any_v1 && any_v2)
        layout.mode = CgroupMode::Hybrid;
    else if (any_v1)
        layout.mode = CgroupMode::V1;
    else if (any_v2)
        layout.mode = CgroupMode::V2;
    return layout;
}

Result<CgroupLayout> detect_cgroup_layout() {
    FB_ASSIGN(auto text, read_file("/proc/self/mountinfo"));
    return parse_cgroup_layout(text);
}

bool controller_listed(std::string_view list, std::string_view controller) {
    for (auto c : split(list, ','))
        if (c == controller) return true;
    return false;
}

bool hierarchy_has(const CgroupHierarchy& h, std::string_view controller) {
    return !h.unified && controller_listed(h.controllers, controller);
}

bool layout_offers(const CgroupLayout& layout, std::string_view controller) {
    for (const auto& h : layout.hierarchies)
        if (controller_listed(h.controllers, controller)) return true;
    return false;
}

std::string v2_controller_list(std::string_view text) {
    std::string list;
    for (auto word : split(text, ' ')) {
        while (!word.empty() && (word.back() == '\n' || word.back() == ' ')) word.remove_suffix(1);
        if (word.empty()) continue;
        if (!list.empty()) list += ',';
        list += word;
    }
    return list;
}

namespace {
bool under(const std::string& dir, const std::string& mountpoint) {
    return dir == mountpoint || (dir.size() > mountpoint.size() && dir.starts_with(mountpoint) &&
                                 (mountpoint.ends_with('/') || dir[mountpoint.size()] == '/'));
}
}  // namespace

std::optional<std::string> cgroup_dir_in(const CgroupLayout& layout, const CgroupHierarchy& h,
                                         const std::vector<std::string>& dirs) {
    for (const auto& d : dirs) {
        if (!under(d, h.mountpoint)) continue;
        bool deeper = false;
        for (const auto& other : layout.hierarchies)
            if (&other != &h && other.mountpoint.size() > h.mountpoint.size() && under(d, other.mountpoint))
                deeper = true;
        if (!deeper) return d;
    }
    return std::nullopt;
}

std::optional<ControllerDir> controller_dir(const CgroupLayout& layout, const std::vector<std::string>& dirs,
                                            std::string_view controller) {
    for (const auto& h : layout.hierarchies) {
        if (!hierarchy_has(h, controller)) continue;
        if (auto d = cgroup_dir_in(layout, h, dirs)) return ControllerDir{*d, false};
    }
    if (const auto* u = layout.unified())
        if (auto d = cgroup_dir_in(layout, *u, dirs)) return ControllerDir{*d, true};
    return std::nullopt;
}

namespace {
// A new v1 cpuset starts with empty cpus and mems, and attaching a task to it fails with
// ENOSPC: copy the parent's values first, as runc does.
}  // namespace

Result<void> inherit_cpuset(const std::string& dir, bool only_if_empty) {
    std::string parent = dir.substr(0, dir.find_last_of('/'));
    for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
        std::string path = dir + "/" + file;
        if (only_if_empty) {
            auto own = read_file(path);
            if (!own) return std::unexpected(own.error());
            if (own->find_first_not_of(" \n") != std::string::npos) continue;
        }
        auto value = read_file(parent + "/" + file);
        if (!value) return std::unexpected(value.error());
        unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd) return sys_error("open " + path);
        if (!value->empty() && ::write(fd.get(), value->data(), value->size()) < 0)
            return sys_error("write " + path);
    }
    return {};
}

CgroupPlacement::~CgroupPlacement() {
    if (!committed_ && !created_.empty()) (void)remove_cgroups(created_);
}

namespace {
// "cpu,cpuacct" names the same hierarchy as "cpuacct,cpu".
std::vector<std::string_view> controller_set(std::string_view list) {
    auto v = split(list, ',');
    std::sort(v.begin(), v.end());
    return v;
}
}  // namespace

std::vector<std::string> cgroup_dirs_of_process(const CgroupLayout& layout, std::string_view text) {
    std::vector<std::string> dirs(layout.hierarchies.size());
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        // "ID:controllers:path"; cgroup v2's line is "0::path".
        size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos) continue;
        std::string_view controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
            const auto& h = layout.hierarchies[i];
            bool match = h.unified ? controllers.empty()
                                   : !controllers.empty() && controller_set(controllers) == controller_set(h.controllers);
            if (match) dirs[i] = h.mountpoint + (path == "/" ? "" : std::string(path));
        }
    }
    return dirs;
}

Result<std::vector<std::string>> own_cgroup_dirs(const CgroupLayout& layout) {
    FB_ASSIGN(std::string text, read_file("/proc/self/cgroup"));
    return cgroup_dirs_of_process(layout, text);
}

Result<std::optional<std::string>> make_cgroup_path(const std::string& mountpoint, std::string_view path, bool cpuset,
                                                    std::vector<std::string>& made, bool refusal_stops) {
    // The leaf first: its parents usually exist (forkbox's own, a manager's slice), and a
    // mkdir refused with EEXIST costs ~20 us on cgroupfs (PVM guest). Not for cpuset, whose
    // parents are checked on the way down (below); a missing parent (ENOENT): the walk.
    bool plain = path.size() > 1 && path.front() == '/' && path.back() != '/' && path.find("//") == std::string_view::npos;
    if (!cpuset && plain) {
        std::string leaf = mountpoint + std::string(path);
        if (::mkdir(leaf.c_str(), 0755) == 0) {
            made.push_back(leaf);
            return leaf;
        }
        if (errno == EEXIST) return leaf;
        if (refusal_stops && (errno == EACCES || errno == EPERM || errno == EROFS)) return std::nullopt;
        if (errno != ENOENT) return sys_error("create cgroup " + leaf);
    }
    std::string dir = mountpoint;
    size_t i = 1;
    while (i <= path.size()) {
        size_t j = path.find('/', i);
        if (j == std::string_view::npos) j = path.size();
        if (j > i) {
            dir += "/";
            dir.append(path, i, j - i);
            if (::mkdir(dir.c_str(), 0755) == 0) {
                made.push_back(dir);
                if (cpuset) FB_TRY(inherit_cpuset(dir));
            } else if (refusal_stops && (errno == EACCES || errno == EPERM || errno == EROFS)) {
                return std::nullopt;
            } else if (errno != EEXIST) {
                return sys_error("create cgroup " + dir);
            } else if (cpuset) {
                // A parent someone else made (a pod's) may have been left empty: a task
                // cannot join a cpuset without cpus and mems (ENOSPC), so fill it as runc does.
                FB_TRY(inherit_cpuset(dir, true));
            }
        }
        i = j + 1;
    }
    return dir;
}

Result<CgroupPlacement> create_cgroups(const CgroupLayout& layout, const std::string& path,
                                       const std::string& spare, const std::vector<bool>& skippable,
                                       const std::vector<bool>& made_by_manager) {
    CgroupPlacement p;
    // Spares under the parent that no hierarchy renamed are removed, success or not.
    std::string parent = path.substr(0, path.find_last_of('/'));
    std::vector<std::string> unused_spares;
    struct RemoveUnused {
        std::vector<std::string>* dirs;
        ~RemoveUnused() {
            for (const auto& d : *dirs) ::rmdir(d.c_str());
        }
    } remove_unused{&unused_spares};
    p.spare_taken_everywhere_ = !spare.empty();
    for (size_t index = 0; index < layout.hierarchies.size(); ++index) {
        const CgroupHierarchy& h = layout.hierarchies[index];
        bool is_cpuset = hierarchy_has(h, "cpuset");
        bool may_skip = index < skippable.size() && skippable[index];
        p.by_manager_.push_back(index < made_by_manager.size() && made_by_manager[index]);
        if (p.by_manager_.back()) {
            p.dirs_.push_back(h.mountpoint + (path == "/" ? "" : path));
            continue;
        }
        if (!spare.empty() && !h.unified) {
            // The zygote daemon's spare (parent made, cpuset filled): one rename.
            std::string spare_dir = h.mountpoint + parent + "/" + spare;
            std::string leaf = h.mountpoint + path;
            if (::rename(spare_dir.c_str(), leaf.c_str()) == 0) {
                p.created_.push_back(leaf);
                p.dirs_.push_back(leaf);
                continue;
            }
            unused_spares.push_back(spare_dir);
            p.spare_taken_everywhere_ = false;
        }
        FB_ASSIGN(auto made, make_cgroup_path(h.mountpoint, path, is_cpuset, p.created_, may_skip));
        if (!made) {  // refused, in a hierarchy the user was not given
            p.dirs_.emplace_back();
            continue;
        }
        std::string dir = std::move(*made);
        p.dirs_.push_back(dir);
        if (h.unified) {
            p.unified_fd_.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
            if (!p.unified_fd_) return sys_error("open cgroup " + dir);
        }
    }
    return p;
}

PlannedCgroups planned_cgroups(const CgroupLayout& layout, const std::string& path,
                               const std::vector<bool>& made_by_manager) {
    PlannedCgroups p;
    std::string rel = path == "/" ? "" : path;
    for (size_t index = 0; index < layout.hierarchies.size(); ++index) {
        const CgroupHierarchy& h = layout.hierarchies[index];
        p.dirs.push_back(h.mountpoint + rel);
        if (index < made_by_manager.size() && made_by_manager[index]) continue;
        // From the leaf up to the first dir that exists: one stat each, usually two.
        std::vector<std::string> missing;
        std::string dir = p.dirs.back();
        struct stat st;
        while (dir.size() > h.mountpoint.size() && ::stat(dir.c_str(), &st) < 0 && errno == ENOENT) {
            missing.push_back(dir);
            dir.resize(dir.find_last_of('/'));
        }
        p.created.insert(p.created.end(), missing.rbegin(), missing.rend());
    }
    return p;
}

void remove_spare_cgroups(const CgroupLayout& layout, const std::string& parent, const std::string& spare) {
    if (spare.empty()) return;
    std::string under = parent == "/" ? "" : parent;
    for (const auto& h : layout.hierarchies)
        if (!h.unified) ::rmdir((h.mountpoint + under + "/" + spare).c_str());
}

std::vector<std::string> removable_cgroups(const CgroupLayout& layout, std::vector<std::string> created) {
    std::erase_if(created, [&](const std::string& dir) {
        for (const auto& h : layout.hierarchies)
            if (dir.size() == h.mountpoint.size() + kDefaultCgroupParent.size() && dir.starts_with(h.mountpoint) &&
                dir.ends_with(kDefaultCgroupParent))
                return true;
        return false;
    });
    return created;
}

namespace {

// rmdir at dirfd, backing off while the cgroup is busy: one stays busy for a moment while
// the kernel releases exited tasks (from 50 us up to 10 ms, about 2 s in all). An errno
// other than EBUSY is returned at once; 0 when it is gone.
int remove_cgroup_dir(int dirfd, const char* name) {
    for (int tries = 0;;) {
        if (::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return 0;
        if (errno != EBUSY || ++tries >= 220) return errno;
        long us = std::min(50L << std::min(tries, 8), 10000L);
        struct timespec ts {0, us * 1000};
        nanosleep(&ts, nullptr);
    }
}

// The names of the subdirectories of the directory at fd.
std::vector<std::string> subdirectories(int fd) {
    std::vector<std::string> names;
    int copy = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (copy < 0) return names;
    DIR* d = ::fdopendir(copy);
    if (!d) {
        ::close(copy);
        return names;
    }
    while (dirent* e = ::readdir(d))
        if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            names.emplace_back(e->d_name);
    ::closedir(d);
    return names;
}

// Removes every cgroup below dir, deepest first: sub-cgroups the container made (systemd or
// a nested runtime in it) or `exec --cgroup` used, as runc's delete does. One fd at a
// time, going down by name and back up through "..", so no depth runs out of fds or of
// PATH_MAX.
Result<void> remove_sub_cgroups(const std::string& dir) {
    unique_fd cur(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!cur) return errno == ENOENT ? Result<void>{} : sys_error("open cgroup " + dir);
    std::vector<std::string> names;  // the path from dir down to cur
    for (;;) {
        if (auto subs = subdirectories(cur.get()); !subs.empty()) {
            unique_fd next(::openat(cur.get(), subs[0].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (!next) return sys_error("open cgroup " + dir + "/.../" + subs[0]);
            cur = std::move(next);
            names.push_back(std::move(subs[0]));
            continue;
        }
        if (names.empty()) return {};
        unique_fd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!parent) return sys_error("open cgroup " + dir + "/...");
        cur = std::move(parent);
        if (int e = remove_cgroup_dir(cur.get(), names.back().c_str()))
            return fail(e, "remove cgroup " + dir + "/.../" + names.back());
        names.pop_back();
    }
}

}  // namespace

Result<void> remove_cgroups(const std::vector<std::string>& created) {
    std::vector<std::string> dirs = created;
    // Children before parents: longest paths first.
    std::sort(dirs.begin(), dirs.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    auto is_leaf = [&](const std::string& d) {
        for (const auto& other : dirs)
            if (other.size() > d.size() && other.starts_with(d) && other[d.size()] == '/') return false;
        return true;
    };
    Result<void> result;
    for (const auto& d : dirs) {
        if (!is_leaf(d)) {
            // A parent we made may since hold other containers' cgroups: leave it then.
            if (::rmdir(d.c_str()) < 0 && errno != ENOENT && errno != EBUSY && errno != ENOTEMPTY && result)
                result = sys_error("remove cgroup " + d);
            continue;
        }
        // The container's own. Busy: tasks still being released, or cgroups made below it,
        // which go first (looked for only then: a delete's usual rmdir stays one syscall).
        if (::rmdir(d.c_str()) == 0 || errno == ENOENT) continue;
        // Best effort (out of fds, say): the rmdir below still waits out a release.
        Result<void> subs;
        if (errno == EBUSY) subs = remove_sub_cgroups(d);
        if (int e = remove_cgroup_dir(AT_FDCWD, d.c_str()); e && result)
            result = subs ? fail(e, "remove cgroup " + d) : std::unexpected(subs.error());
    }
    return result;
}

Result<std::vector<unique_fd>> CgroupPlacement::open_v1_task_files(const CgroupLayout& layout) const {
    std::vector<std::string> dirs = dirs_;
    for (size_t i = 0; i < dirs.size() && i < by_manager_.size(); ++i)
        if (by_manager_[i]) dirs[i].clear();
    return forkbox::open_v1_task_files(layout, dirs);
}

Result<std::vector<unique_fd>> open_v1_task_files(const CgroupLayout& layout, const std::vector<std::string>& dirs) {
    std::vector<unique_fd> fds;
    for (size_t i = 0; i < layout.hierarchies.size() && i < dirs.size(); ++i) {
        if (layout.hierarchies[i].unified || dirs[i].empty()) continue;
        std::string path = dirs[i] + "/tasks";
        unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd) return sys_error("open " + path);
        fds.push_back(std::move(fd));
    }
    return fds;
}

Result<void> join_v1_cgroups(const std::vector<int>& task_fds) {
    for (int fd : task_fds) {
        if (::write(fd, "0", 1) < 0) return sys_error("join cgroup");
        ::close(fd);
    }
    return {};
}

std::string first_cgroup_dir(const std::vector<std::string>& dirs) {
    for (const auto& d : dirs)
        if (!d.empty()) return d;
    return {};
}

namespace {

void append_pids(std::string_view text, std::vector<pid_t>& pids) {
    std::string copy(text);
    const char* p = copy.c_str();
    while (*p) {
        char* end;
        long v = std::strtol(p, &end, 10);
        if (end == p) break;
        if (v > 0) pids.push_back(static_cast<pid_t>(v));
        p = end;
        while (*p == '\n') ++p;
    }
}

void append_tree_pids(int dirfd, std::vector<pid_t>& pids) {
    if (auto text = read_file_at(dirfd, "cgroup.procs")) append_pids(*text, pids);
    for (const auto& name : subdirectories(dirfd)) {
        unique_fd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub) append_tree_pids(sub.get(), pids);
    }
}

}  // namespace

std::vector<pid_t> cgroup_pids(const std::string& dir) {
    std::vector<pid_t> pids;
    if (auto text = read_file(dir + "/cgroup.procs")) append_pids(*text, pids);
    return pids;
}

std::vector<pid_t> cgroup_tree_pids(const std::string& dir) {
    std::vector<pid_t> pids;
    unique_fd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root) append_tree_pids(root.get(), pids);
    return pids;
}

}  // namespace forkbox
