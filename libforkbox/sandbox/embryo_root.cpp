#include "libforkbox/sandbox/embryo_parts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/mount.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/landlock.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/warm.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

// An embryo's sandbox, made ahead of any request: its namespaces, its root (an overlay whose
// upper layer is on a tmpfs of its own), the Plan's mounts, and the hardening.
namespace forkbox::sandbox::embryo {

namespace {

Result<void> check(bool ok, std::string what) {
    if (!ok) return sys_error(std::move(what));
    return {};
}

// Mount points of this mount namespace, from mountinfo (field 5), unescaped enough for
// the paths a host has ("\040" for a space).
std::vector<std::string> mount_points() {
    std::vector<std::string> out;
    auto text = read_file("/proc/self/mountinfo");
    if (!text) return out;
    size_t pos = 0;
    while (pos < text->size()) {
        size_t end = text->find('\n', pos);
        if (end == std::string::npos) end = text->size();
        std::string_view line(text->data() + pos, end - pos);
        pos = end + 1;
        size_t field = 0, start = 0;
        for (size_t i = 0; i <= line.size() && field < 5; ++i) {
            if (i == line.size() || line[i] == ' ') {
                if (++field == 5) out.emplace_back(line.substr(start, i - start));
                start = i + 1;
            }
        }
    }
    return out;
}

// The sandbox's writable directories besides the overlay's: private, empty, in the state
// (tree.hpp), so that a fork carries them and a diff shows them.
struct StateDir {
    const char* name;
    mode_t mode;
};
constexpr StateDir kStateDirs[] = {{"tmp", 01777}, {"run", 0755}, {"root", 0700}};

// A user's sandbox (no lower layer from the daemon): in a user namespace the host's root
// cannot be one overlay layer, because the mounts on it are locked to it. Each top-level
// directory without mounts below it becomes an overlay of its own (lowerdir=/usr...), a
// directory with mounts below a read-only recursive bind, a symlink a symlink: those names
// go into `made`; the rest of the root is plain directories on the stage tmpfs.
Result<void> build_root_per_directory(const std::string& st, const std::string& root, std::set<std::string>& made) {
    std::vector<std::string> mounts = mount_points();
    // Replaced by the Plan's own mounts or the state's directories, or hidden by them.
    static const std::vector<std::string_view> kPlanned = {"proc", "sys", "dev", "run", "tmp", "root", "home"};
    DIR* d = ::opendir("/");
    if (!d) return sys_error("open /");
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& name : names) {
        std::string host = "/" + name, target = root + "/" + name;
        struct stat st_buf;
        if (::lstat(host.c_str(), &st_buf) < 0) continue;
        if (S_ISLNK(st_buf.st_mode)) {
            char link[4096];
            ssize_t n = ::readlink(host.c_str(), link, sizeof link - 1);
            if (n <= 0) continue;
            link[n] = '\0';
            FB_TRY(check(::symlink(link, target.c_str()) == 0, "symlink " + target));
            made.insert(name);
            continue;
        }
        if (!S_ISDIR(st_buf.st_mode)) continue;
        FB_TRY(check(::mkdir(target.c_str(), st_buf.st_mode & 07777) == 0, "mkdir " + target));
        if (std::find(kPlanned.begin(), kPlanned.end(), name) != kPlanned.end()) continue;
        made.insert(name);
        bool has_mounts = false;
        for (const auto& m : mounts) has_mounts |= m == host || m.starts_with(host + "/");
        if (has_mounts) {
            FB_TRY(check(::mount(host.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0, "bind " + host));
            // Adds read-only and keeps the flags the host locked on those mounts.
            mount_attr ro{};
            ro.attr_set = MOUNT_ATTR_RDONLY;
            FB_TRY(check(::syscall(SYS_mount_setattr, AT_FDCWD, target.c_str(), AT_RECURSIVE, &ro, sizeof ro) == 0,
                         "make " + host + " read-only"));
            continue;
        }
        // A fork's copy of its parent's upper layer may have made it already.
        std::string upper = st + "/upper/" + name, work = st + "/work/" + name;
        FB_TRY(check((::mkdir(upper.c_str(), 0755) == 0 || errno == EEXIST) && ::mkdir(work.c_str(), 0755) == 0,
                     "mkdir " + upper));
        std::string options = "lowerdir=" + host + ",upperdir=" + upper + ",workdir=" + work + ",userxattr";
        FB_TRY(check(::mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) == 0,
                     "mount an overlay of " + host));
    }
    for (const auto& dir : kStateDirs) {
        std::string path = root + "/" + dir.name;
        if (::mkdir(path.c_str(), dir.mode) < 0 && errno != EEXIST) return sys_error("mkdir " + path);
        FB_TRY(check(::chmod(path.c_str(), dir.mode) == 0, "chmod " + path));
    }
    return {};
}

// A root daemon's sandbox: the state's directories in the upper layer, opaque so that the
// host's /tmp, /run and /root below them are not seen. A fork's copy has them already (or
// the whiteout its parent made of one).
Result<void> make_state_dirs(const std::string& upper) {
    for (const auto& dir : kStateDirs) {
        std::string path = upper + "/" + dir.name;
        if (::mkdir(path.c_str(), dir.mode) < 0) {
            if (errno == EEXIST) continue;
            return sys_error("mkdir " + path);
        }
        FB_TRY(check(::chmod(path.c_str(), dir.mode) == 0, "chmod " + path));
        FB_TRY(check(::setxattr(path.c_str(), "user.overlay.opaque", "y", 1, 0) == 0, "make " + path + " opaque"));
    }
    return {};
}

Result<void> copy_dir_at(int src_root, const std::string& src, const std::string& dst,
                         const std::set<std::string>* skip = nullptr) {
    unique_fd from(::openat(src_root, src.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!from) return {};  // the parent has none
    unique_fd to(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!to) return sys_error("open " + dst);
    return copy_tree(from.get(), to.get(), skip);
}

}  // namespace

Tree tree;

Result<void> set_batch_scheduling(bool batch) {
    sched_param none{};
    if (::sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &none) < 0)
        return sys_error(batch ? "SCHED_BATCH" : "SCHED_OTHER");
    return {};
}

int64_t stage_used() { return filesystem_bytes_used(tree.stage.get()); }

// The sandbox's root: a tmpfs on the stage directory holding the overlay's upper and work
// directories and the lower layer's mount point, and the overlay on <stage>/root. A fork
// (`fork_source`: its parent's stage) starts with a copy of its parent's state.
Result<void> build_root(const EmbryoSetup& s, int lower_tree, int fork_source) {
    const std::string& st = s.stage;
    FB_TRY(check(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private"));
    // Inodes capped as well: an empty file takes no block but ~1 KiB of kernel memory, which
    // only a cgroup (a root daemon's) would otherwise bound. One per 4 KiB of the size cap.
    std::string size = "size=" + std::to_string(s.upper_size_mb) + "m,nr_inodes=" +
                       std::to_string(tmpfs_inode_cap(s.upper_size_mb << 10)) + ",mode=755";
    FB_TRY(check(::mount("sandbox", st.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) == 0, "mount the stage tmpfs"));
    for (const char* d : {"/upper", "/work", "/lower", "/root"})
        FB_TRY(check(::mkdir((st + d).c_str(), 0755) == 0, "mkdir " + st + d));
    if (fork_source >= 0) FB_TRY_CTX(copy_dir_at(fork_source, "upper", st + "/upper"), "copy the parent's upper layer");
    std::string lower = st + "/lower";
    std::string root = st + "/root";
    if (lower_tree < 0 && s.kind && !s.kind->rootfs.empty()) {
        // A user's sandbox of a chosen root: a plain directory, one overlay layer (only the
        // host's root has mounts locked below it). Named through our fd: the path may hold
        // the commas and colons overlayfs's options split on.
        FB_TRY(make_state_dirs(st + "/upper"));
        tree.lower.reset(::open(s.kind->rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!tree.lower) return sys_error("open the root " + s.kind->rootfs);
        std::string options = "lowerdir=/proc/self/fd/" + std::to_string(tree.lower.get()) + ",upperdir=" + st +
                              "/upper,workdir=" + st + "/work,userxattr";
        FB_TRY(check(::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) == 0,
                     "mount an overlay of " + s.kind->rootfs));
        return {};
    }
    if (lower_tree < 0) {
        tree.context.per_directory = true;
        tree.lower.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        FB_TRY(build_root_per_directory(st, st + "/root", tree.context.builder_names));
        // The parent's plain directories (/tmp, /root, what it made at the top), merged
        // into this root's; what the builder made here is this sandbox's own.
        if (fork_source >= 0)
            FB_TRY_CTX(copy_dir_at(fork_source, "root", st + "/root", &tree.context.builder_names), "copy the parent's root");
        return {};
    }
    FB_TRY(make_state_dirs(st + "/upper"));
    // The daemon's idmapped copy of "/": the host's root-owned files are the sandbox root's,
    // as seen from inside.
    FB_TRY(check(::syscall(SYS_move_mount, lower_tree, "", AT_FDCWD, lower.c_str(), MOVE_MOUNT_F_EMPTY_PATH) == 0,
                 "attach the lower layer"));
    ::close(lower_tree);
    FB_TRY(check(::mount(nullptr, lower.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0,
                 "make the lower layer read-only"));
    tree.lower.reset(::open(lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    std::string options = "lowerdir=" + lower + ",upperdir=" + st + "/upper,workdir=" + st + "/work";
    // In a user namespace overlayfs keeps its metadata in user.* xattrs (tmpfs has them).
    if (::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, (options + ",userxattr").c_str()) < 0 &&
        ::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) < 0)
        return sys_error("mount the overlay");
    return {};
}

Result<void> enter_namespaces(const EmbryoSetup& s) {
    const Plan& plan = *s.plan;
    FB_TRY_CTX(join_v1_cgroups(s.cgroup_task_fds), "sandbox cgroups");
    FB_TRY(check(::setresgid(0, 0, 0) == 0, "setresgid 0"));
    if (s.mapped_range) {
        // None of the daemon's groups; a member's own (builder.cpp: open_as_member).
        std::vector<gid_t> groups = s.kind && s.kind->member ? member_groups_inside(*s.kind->member) : std::vector<gid_t>{};
        FB_TRY(check(::setgroups(groups.size(), groups.data()) == 0, "setgroups"));
    }
    FB_TRY(check(::setresuid(0, 0, 0) == 0, "setresuid 0"));
    // The kernel clears the death signal on a change of credentials: armed again, or a
    // one-shot run (whose pid 1 waits for its command, not on the control socket) would
    // outlive a SIGKILLed service. A service dead already shows as the socket's hang-up.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (struct pollfd p {s.control_fd, 0, 0}; ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) ::_exit(1);
    int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
    bool own_network = (plan.new_namespaces & CLONE_NEWNET) != 0;
    if (own_network) flags |= CLONE_NEWNET;
    FB_TRY(check(::unshare(flags) == 0, "unshare namespaces"));
    if (own_network) FB_TRY(bring_up_loopback());
    // A container engine's seccomp profile may refuse sethostname without CAP_SYS_ADMIN,
    // even in a UTS namespace of our own (podman's does): the sandbox then keeps the name
    // its parent had, which is all the name is for.
    if (auto named = set_hostname(plan.hostname); !named && named.error().errnum() != EPERM) return named;
    return {};
}

Result<void> build(const EmbryoSetup& s, int lower_tree, int fork_source) {
    const Plan& plan = *s.plan;
    FB_TRY(build_root(s, lower_tree, fork_source));
    trace::mark("embryo: layers made");
    if (fork_source >= 0) {
        ::close(fork_source);
        ::send(s.control_fd, "C", 1, MSG_NOSIGNAL);  // copied: the parent may go on
    }

    static const std::vector<std::string> no_cgroup_dirs;  // the sandbox mounts no cgroupfs
    RootfsContext ctx{plan, *s.cgroup_layout, no_cgroup_dirs, true, true};
    ctx.bind_source_trees = &s.bind_source_trees;
    FB_TRY(prepare_rootfs(ctx));
    trace::mark("embryo: mounts made");
    for (int fd : s.bind_source_trees)
        if (fd >= 0) ::close(fd);
    // The state, for a session's diff and forks: the stage tmpfs alone, without the mounts
    // on it, which pivot_root takes out of reach.
    tree.stage.reset(static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, s.stage.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
    if (!tree.stage) return sys_error("open_tree " + s.stage);
    FB_TRY(enter_rootfs(plan.rootfs, false));
    FB_TRY(finalize_rootfs(ctx));
    // A shell line is `/bin/sh -c`: its start's lookups are made now, off the request's path.
    warm_program_lookups("/bin/sh");

    // Hardening, in the order the kernel needs: the bounding set (needs CAP_SETPCAP), the
    // other sets, no_new_privs, then the filter (which allows what the release still does).
    FB_ASSIGN(CapabilitySets caps, capability_sets(*plan.process.capabilities));
    FB_TRY(drop_bounding_set(caps.bounding));
    FB_TRY(apply_capabilities(caps));
    FB_TRY(check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs"));
    // Abstract Unix sockets and signals only within the sandbox: with the host's network
    // namespace (--network), every abstract socket on the host would be in reach.
    FB_TRY(scope_to_own_domain());
    // Made, as SCHED_BATCH (embryo_main): what runs in the sandbox from now on is ordinary.
    FB_TRY(set_batch_scheduling(false));
    FB_TRY(load_seccomp(*s.seccomp));
    trace::mark("embryo: hardened");
    return {};
}

}  // namespace forkbox::sandbox::embryo
