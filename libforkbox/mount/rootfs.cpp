#include "libforkbox/mount/rootfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <linux/magic.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <string_view>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/mount/mounts.hpp"

namespace forkbox {

namespace {

// Flags a mount already has that an unprivileged (user namespace) remount must keep:
// the kernel "locks" them (EPERM if a remount drops one).
unsigned long locked_flags(int fd) {
    struct statvfs sv;
    if (::fstatvfs(fd, &sv) < 0) return 0;
    unsigned long f = 0;
    if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
    if (sv.f_flag & ST_RDONLY) f |= MS_RDONLY;
    return f;
}

// Remounts the bind mount at fd with `flags`, keeping locked flags when the kernel insists.
Result<void> remount_bind(int fd, unsigned long flags, unsigned long clear, const std::string& what) {
    std::string target = fd_path(fd);
    unsigned long base = MS_BIND | MS_REMOUNT;
    if (::mount(nullptr, target.c_str(), nullptr, base | flags, nullptr) == 0) return {};
    if (errno != EPERM) return sys_error("remount " + what);
    unsigned long keep = locked_flags(fd) & ~clear & ~MS_RDONLY;
    if (::mount(nullptr, target.c_str(), nullptr, base | flags | keep, nullptr) < 0)
        return sys_error("remount " + what);
    return {};
}

Result<void> apply_recursive_attrs(int fd, const MountFlags& f, const std::string& what) {
    if (f.recursive_set == 0 && f.recursive_clear == 0) return {};
    struct mount_attr attr {};
    attr.attr_set = f.recursive_set;
    attr.attr_clr = f.recursive_clear;
    if (::mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
        return sys_error("mount_setattr " + what);
    return {};
}

// The new mount API, by fd alone: a template's builder, after pivot_root, has no /proc/self
// of its own in the container's procfs, so the /proc/self/fd/N targets of mount(2) fail.
Result<void> attach_tree(int tree, int target_fd, const std::string& what) {
    if (::move_mount(tree, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return sys_error("mount " + what);
    return {};
}

Result<unique_fd> clone_tree(int dirfd, const char* path, bool recursive, const std::string& what) {
    unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0) | (*path ? 0 : AT_EMPTY_PATH);
    unique_fd tree(::open_tree(dirfd, path, flags));
    if (!tree) return sys_error("clone mount of " + what);
    return tree;
}

Result<void> set_mount_attrs(int fd, uint64_t attrs, bool recursive, const std::string& what) {
    struct mount_attr attr {};
    attr.attr_set = attrs;
    if (::mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr) < 0)
        return sys_error("set mount attributes of " + what);
    return {};
}

uint64_t mount_attrs_of(unsigned long flags) {
    return ((flags & MS_RDONLY) ? MOUNT_ATTR_RDONLY : 0) | ((flags & MS_NOSUID) ? MOUNT_ATTR_NOSUID : 0) |
           ((flags & MS_NODEV) ? MOUNT_ATTR_NODEV : 0) | ((flags & MS_NOEXEC) ? MOUNT_ATTR_NOEXEC : 0);
}

// A masked directory: an empty read-only tmpfs, as mount("tmpfs", ..., MS_RDONLY) makes it.
Result<void> mask_directory_by_fd(int target_fd, const std::string& what) {
    unique_fd fs(::fsopen("tmpfs", FSOPEN_CLOEXEC));
    if (!fs) return sys_error("fsopen tmpfs for " + what);
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, "source", "tmpfs", 0) < 0 ||
        ::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) < 0 ||
        ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) < 0)
        return sys_error("make tmpfs for " + what);
    unique_fd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY));
    if (!mnt) return sys_error("fsmount tmpfs for " + what);
    return attach_tree(mnt.get(), target_fd, what);
}

std::string strip_option(const std::string& data, std::string_view prefix) {
    std::string out;
    size_t i = 0;
    while (i <= data.size()) {
        size_t j = data.find(',', i);
        if (j == std::string::npos) j = data.size();
        std::string_view opt(data.data() + i, j - i);
        if (!opt.empty() && !opt.starts_with(prefix)) {
            if (!out.empty()) out += ',';
            out += opt;
        }
        i = j + 1;
    }
    return out;
}

bool data_has(const std::string& data, std::string_view prefix) {
    return strip_option(data, prefix) != data;
}

// A destination that resolves into a procfs (through a symlink in the image, say) would let
// the container cover /proc files with its own: refused unless it is literally /proc or an
// allowed file there (check_proc_destination). CVE-2019-16884 class.
Result<void> refuse_procfs_target(int target_fd, const MountStep& m) {
    struct statfs sf;
    if (::fstatfs(target_fd, &sf) < 0) return sys_error("statfs " + m.destination);
    if (sf.f_type != PROC_SUPER_MAGIC) return {};
    if (m.destination == "/proc" || m.destination.starts_with("/proc/")) return {};  // checked by name
    return fail(EINVAL, "mount destination " + m.destination + " resolves into /proc: refused");
}

Result<void> mount_bind(int root_fd, const MountStep& m, int source_tree) {
    struct stat st;
    int stat_r = source_tree >= 0 ? ::fstat(source_tree, &st) : ::stat(m.source.c_str(), &st);
    if (stat_r < 0) return sys_error("bind mount source " + m.source);
    bool is_dir = S_ISDIR(st.st_mode);
    FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, !is_dir));
    FB_TRY(refuse_procfs_target(target.get(), m));
    if (source_tree >= 0) {
        FB_TRY(attach_tree(source_tree, target.get(), m.source + " on " + m.destination));
    } else {
        unsigned long flags = MS_BIND | (m.recursive_bind ? MS_REC : 0);
        FB_TRY(mount_on_fd(m.source.c_str(), target.get(), nullptr, flags, nullptr,
                           m.source + " on " + m.destination));
    }
    FB_ASSIGN(unique_fd mounted, open_in_root(root_fd, m.destination));
    if (m.bind_needs_remount) {
        unsigned long want = m.flags.set & ~(MS_BIND | MS_REC | MS_REMOUNT);
        FB_TRY(remount_bind(mounted.get(), want, m.flags.clear, m.destination));
    }
    if (m.flags.propagation) FB_TRY(set_propagation(mounted.get(), m.flags.propagation, m.destination));
    FB_TRY(apply_recursive_attrs(mounted.get(), m.flags, m.destination));
    return {};
}

// A bind of a host path used when the kernel refuses a fresh instance in a user namespace.
Result<void> bind_host_fallback(int root_fd, const std::string& host, const MountStep& m) {
    MountStep b = m;
    b.kind = MountKind::Bind;
    b.source = host;
    b.recursive_bind = true;
    b.flags.set = (m.flags.set & ~MS_REMOUNT) | MS_BIND | MS_REC;
    b.bind_needs_remount = (m.flags.set & ~(MS_BIND | MS_REC)) != 0;
    FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, false));
    FB_TRY(mount_on_fd(host.c_str(), target.get(), nullptr, MS_BIND | MS_REC, nullptr,
                       host + " on " + m.destination));
    if (b.bind_needs_remount) {
        FB_ASSIGN(unique_fd mounted, open_in_root(root_fd, m.destination));
        FB_TRY(remount_bind(mounted.get(), b.flags.set & ~(MS_BIND | MS_REC), 0, m.destination));
        // And every mount under it: the fresh instance would have none, so nothing the host
        // mounted there (its cgroup hierarchies under /sys/fs/cgroup, tracefs) may stay more
        // open than asked. CVE-2023-25809: a rootless container's writable cgroup mounts,
        // reachable once the container unmounted what covered them.
        if (uint64_t attrs = mount_attrs_of(b.flags.set))
            FB_TRY(set_mount_attrs(mounted.get(), attrs, true, host + " on " + m.destination));
    }
    return {};
}

// Copies the directory tree under src into dst (both readable directory fds), keeping modes
// and owners: the image's content under a tmpfs mounted with "tmpcopyup". Never follows a
// symlink: links are copied as links.
Result<void> copy_tree(int src, int dst, const std::string& what) {
    int dupfd = ::dup(src);
    if (dupfd < 0) return sys_error("dup");
    DIR* d = ::fdopendir(dupfd);
    if (!d) {
        ::close(dupfd);
        return sys_error("read " + what);
    }
    std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
    while (auto* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st;
        if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) return sys_error("stat " + what + "/" + name);
        std::string child = what + "/" + name;
        if (S_ISDIR(st.st_mode)) {
            if (::mkdirat(dst, name.c_str(), st.st_mode & 07777) < 0 && errno != EEXIST) return sys_error("mkdir " + child);
            unique_fd s2(::openat(src, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            unique_fd d2(::openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (!s2 || !d2) return sys_error("open " + child);
            FB_TRY(copy_tree(s2.get(), d2.get(), child));
        } else if (S_ISREG(st.st_mode)) {
            unique_fd in(::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
            unique_fd out(::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777));
            if (!in || !out) return sys_error("copy " + child);
            off_t left = st.st_size;
            while (left > 0) {
                // sendfile, not copy_file_range: the copy always crosses filesystems (EXDEV).
                ssize_t n = ::sendfile(out.get(), in.get(), nullptr, static_cast<size_t>(left));
                if (n < 0) return sys_error("copy " + child);
                if (n == 0) break;
                left -= n;
            }
        } else if (S_ISLNK(st.st_mode)) {
            char buf[4096];
            ssize_t n = ::readlinkat(src, name.c_str(), buf, sizeof buf - 1);
            if (n < 0) return sys_error("readlink " + child);
            buf[n] = 0;
            if (::symlinkat(buf, dst, name.c_str()) < 0) return sys_error("symlink " + child);
        } else {
            if (::mknodat(dst, name.c_str(), st.st_mode, st.st_rdev) < 0) return sys_error("mknod " + child);
        }
        if (::fchownat(dst, name.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
            return sys_error("chown " + child);
        if (!S_ISLNK(st.st_mode) && ::fchmodat(dst, name.c_str(), st.st_mode & 07777, 0) < 0)
            return sys_error("chmod " + child);
    }
    return {};
}

Result<unique_fd> open_readable_dir(int root_fd, const std::string& path) {
    FB_ASSIGN(unique_fd p, open_in_root(root_fd, path));
    unique_fd fd(::openat(p.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return sys_error("open " + path);
    return fd;
}

// proc and sysfs go on a real directory of the rootfs, never through a symlink there (runc's
// rule and words): a symlinked /proc or /sys would put them wherever the image points.
Result<void> require_ordinary_directory(int root_fd, const MountStep& m, std::string_view fstype) {
    auto slash = m.destination.find_last_of('/');
    std::string parent = slash == 0 ? "/" : m.destination.substr(0, slash), name = m.destination.substr(slash + 1);
    auto dir = open_in_root(root_fd, parent);
    if (!dir) return dir.error().errnum() == ENOENT ? Result<void>{} : Result<void>(std::unexpected(dir.error()));
    struct stat st;
    if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) return {};  // made below
    if (!S_ISDIR(st.st_mode))
        return fail(ENOTDIR, "filesystem \"" + std::string(fstype) + "\" must be mounted on ordinary directory (" +
                                 m.destination + ")");
    return {};
}

Result<void> mount_filesystem(const RootfsContext& ctx, int root_fd, const MountStep& m,
                              const char* fstype, unsigned long flags) {
    if (std::string_view(fstype) == "proc" || std::string_view(fstype) == "sysfs")
        FB_TRY(require_ordinary_directory(root_fd, m, fstype));
    FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, false));
    FB_TRY(refuse_procfs_target(target.get(), m));
    // tmpcopyup: hold the image's directory before the tmpfs covers it.
    unique_fd image_dir;
    unsigned long final_flags = flags;
    if (m.flags.tmpcopyup) {
        FB_ASSIGN(image_dir, open_readable_dir(root_fd, m.destination));
        flags &= ~MS_RDONLY;  // filled first, made read-only after
    }
    std::string data = m.flags.data;
    if (ctx.proc_pidns_fd >= 0 && std::string_view(fstype) == "proc")
        data += (data.empty() ? "pidns=" : ",pidns=") + fd_path(ctx.proc_pidns_fd);
    const char* source = m.source.empty() ? fstype : m.source.c_str();
    std::string what = std::string(fstype) + " on " + m.destination;
    auto r = mount_on_fd(source, target.get(), fstype, flags, data.empty() ? nullptr : data.c_str(), what);
    if (!r && r.error().errnum() == EINVAL && ctx.in_user_namespace && data_has(data, "gid=")) {
        // devpts gid=5 fails when gid 5 is not mapped in the user namespace: drop it.
        data = strip_option(data, "gid=");
        r = mount_on_fd(source, target.get(), fstype, flags, data.empty() ? nullptr : data.c_str(), what);
    }
    if (!r && r.error().errnum() == EPERM && ctx.in_user_namespace) {
        // sysfs and mqueue need their own net / ipc namespace in a user namespace.
        std::string_view t(fstype);
        if (t == "sysfs") return bind_host_fallback(root_fd, "/sys", m);
        if (t == "mqueue") return bind_host_fallback(root_fd, "/dev/mqueue", m);
        // A new proc in a user namespace needs the current one fully visible: a container
        // engine's masked /proc paths forbid it.
        if (t == "proc")
            return fail(EPERM, r.error().what() +
                                   " (the kernel refuses a new proc in a user namespace while paths of the current "
                                   "/proc are masked, as a container engine masks them: unmask them, e.g. podman "
                                   "--security-opt unmask=/proc/*, docker --security-opt systempaths=unconfined)");
    }
    if (!r) return r;
    if (image_dir) {
        FB_ASSIGN(unique_fd fresh, open_readable_dir(root_fd, m.destination));
        FB_TRY(copy_tree(image_dir.get(), fresh.get(), m.destination));
        if ((final_flags & MS_RDONLY) &&
            ::mount(nullptr, fd_path(fresh.get()).c_str(), nullptr, MS_REMOUNT | final_flags,
                    data.empty() ? nullptr : data.c_str()) < 0)
            return sys_error("remount " + m.destination + " read-only");
    }
    if (m.flags.propagation || m.flags.recursive_set || m.flags.recursive_clear) {
        FB_ASSIGN(unique_fd mounted, open_in_root(root_fd, m.destination));
        if (m.flags.propagation) FB_TRY(set_propagation(mounted.get(), m.flags.propagation, m.destination));
        FB_TRY(apply_recursive_attrs(mounted.get(), m.flags, m.destination));
    }
    return {};
}

std::string basename_of(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// cgroup mounts follow the host layout: one cgroup2 mount on pure v2 hosts; a tmpfs holding
// one mount per hierarchy on v1 and hybrid hosts. Without a cgroup namespace the container's
// own cgroup directories are bind-mounted instead, so it never sees its siblings.
Result<void> mount_cgroups(const RootfsContext& ctx, int root_fd, const MountStep& m) {
    unsigned long flags = m.flags.set & ~(MS_REMOUNT | MS_BIND | MS_REC);
    bool ro = (flags & MS_RDONLY) != 0;
    unsigned long rw_flags = flags & ~MS_RDONLY;
    const auto& layout = ctx.cgroup_layout;
    if (layout.mode == CgroupMode::None) return {};
    if (ctx.before_cgroup_mount) FB_TRY(ctx.before_cgroup_mount());
    if (ctx.defer_cgroup_trees) {
        // A template: the mount points now, the container's own cgroups later, except the
        // spare v1 cgroups the builder was given, bound now.
        FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, false));
        if (layout.mode == CgroupMode::V2) return {};
        FB_TRY(mount_on_fd("tmpfs", target.get(), "tmpfs", rw_flags, "mode=755", "tmpfs on " + m.destination));
        for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
            std::string dest = m.destination + "/" + basename_of(layout.hierarchies[i].mountpoint);
            FB_ASSIGN(unique_fd point, create_in_root(root_fd, dest, false));
            if (i < ctx.premount_cgroup_dirs.size() && !ctx.premount_cgroup_dirs[i].empty()) {
                const std::string& dir = ctx.premount_cgroup_dirs[i];
                FB_TRY(mount_on_fd(dir.c_str(), point.get(), nullptr, MS_BIND | MS_REC, nullptr, dir + " on " + dest));
            }
        }
        return {};
    }

    auto mount_one = [&](const CgroupHierarchy& h, size_t index, const std::string& dest, unique_fd target,
                         bool remount) -> Result<void> {
        Result<void> r;
        if (ctx.new_cgroup_namespace) {
            const char* type = h.unified ? "cgroup2" : "cgroup";
            r = mount_on_fd("cgroup", target.get(), type, rw_flags,
                            h.unified ? nullptr : h.controllers.c_str(), std::string(type) + " on " + dest);
        }
        if (!ctx.new_cgroup_namespace || !r) {
            if (index >= ctx.cgroup_dirs.size()) return fail(EINVAL, "no cgroup directory for " + dest);
            if (ctx.cgroup_dirs[index].empty()) return {};  // none in this hierarchy: an empty mount point
            FB_TRY(mount_on_fd(ctx.cgroup_dirs[index].c_str(), target.get(), nullptr, MS_BIND | MS_REC,
                               nullptr, ctx.cgroup_dirs[index] + " on " + dest));
        }
        if (ro && remount) {
            FB_ASSIGN(unique_fd mounted, open_in_root(root_fd, dest));
            FB_TRY(remount_bind(mounted.get(), flags, 0, dest));
        }
        return {};
    };

    if (layout.mode == CgroupMode::V2) {
        FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, false));
        return mount_one(layout.hierarchies[0], 0, m.destination, std::move(target), true);
    }

    FB_ASSIGN(unique_fd target, create_in_root(root_fd, m.destination, false));
    FB_TRY(mount_on_fd("tmpfs", target.get(), "tmpfs", rw_flags, "mode=755", "tmpfs on " + m.destination));
    // The tmpfs is ours and empty: its mount points are made and opened in it directly, not
    // resolved from the root one by one (~3 syscalls a hierarchy fewer, 10 hierarchies here).
    FB_ASSIGN(unique_fd fresh, open_in_root(root_fd, m.destination));
    for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
        const auto& h = layout.hierarchies[i];
        std::string name = basename_of(h.mountpoint), dest = m.destination + "/" + name;
        if (::mkdirat(fresh.get(), name.c_str(), 0755) < 0) return sys_error("mkdir " + dest);
        unique_fd point(::openat(fresh.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!point) return sys_error("open " + dest);
        FB_TRY(mount_one(h, i, dest, std::move(point), false));
    }
    if (!ro) return {};
    // Read-only in one step, the tmpfs and every hierarchy under it, rather than a remount
    // per mount (~10 on v1 hosts). Kernels without mount_setattr: one by one.
    const unique_fd& tree = fresh;
    auto tree_ro = set_mount_attrs(tree.get(), mount_attrs_of(flags), true, m.destination);
    if (tree_ro || tree_ro.error().errnum() != ENOSYS) return tree_ro;
    for (const auto& h : layout.hierarchies) {
        std::string dest = m.destination + "/" + basename_of(h.mountpoint);
        FB_ASSIGN(unique_fd mounted, open_in_root(root_fd, dest));
        FB_TRY(remount_bind(mounted.get(), flags, 0, dest));
    }
    if (::mount(nullptr, fd_path(tree.get()).c_str(), nullptr, MS_REMOUNT | flags, "mode=755") < 0)
        return sys_error("remount " + m.destination + " read-only");
    return {};
}

// `dir_fd`: the node's parent directory, resolved (made) inside the root by the caller.
// Who a node made in the directory belongs to: our fs ids, or the directory's group when
// it is setgid. uid -1: unknown.
struct NodeOwner {
    uid_t uid = static_cast<uid_t>(-1);
    gid_t gid = static_cast<gid_t>(-1);
};
NodeOwner owner_of_new_nodes(int dir_fd) {
    struct stat st;
    if (::fstat(dir_fd, &st) < 0) return {};
    return {::geteuid(), (st.st_mode & S_ISGID) ? st.st_gid : ::getegid()};
}

Result<void> create_device(const RootfsContext& ctx, int root_fd, int dir_fd, const NodeOwner& owner,
                           const DeviceNode& d) {
    std::string name = d.path.substr(d.path.find_last_of('/') + 1);
    if (ctx.in_user_namespace) {
        // mknod is not allowed in a user namespace: bind the host's node instead, onto a file
        // made here (the usual case: the image has no such node), which the mount takes by fd.
        unique_fd made(::openat(dir_fd, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644));
        if (made) return mount_on_fd(d.path.c_str(), made.get(), nullptr, MS_BIND, nullptr, "device " + d.path);
        // Something is there already (a node, a symlink): resolved inside the root, as any target.
        FB_ASSIGN(unique_fd target, create_in_root(root_fd, d.path, true));
        return mount_on_fd(d.path.c_str(), target.get(), nullptr, MS_BIND, nullptr, "device " + d.path);
    }
    mode_t type = S_IFCHR;
    if (d.type == 'b') type = S_IFBLK;
    else if (d.type == 'p') type = S_IFIFO;
    mode_t mode = type | (d.mode & 07777);
    dev_t dev = makedev(d.major, d.minor);
    // A node of the same name in the image loses (removed only when there is one).
    if (::mknodat(dir_fd, name.c_str(), mode, dev) < 0) {
        if (errno != EEXIST || ::unlinkat(dir_fd, name.c_str(), 0) < 0 || ::mknodat(dir_fd, name.c_str(), mode, dev) < 0)
            return sys_error("mknod " + d.path);
    }
    // Made by us, it is ours already, unless the directory hands its group down (setgid).
    if (d.uid == owner.uid && d.gid == owner.gid) return {};
    if (::fchownat(dir_fd, name.c_str(), d.uid, d.gid, AT_SYMLINK_NOFOLLOW) < 0)
        return sys_error("chown " + d.path);
    return {};
}

Result<void> create_dev_symlinks(int root_fd, bool with_kcore) {
    FB_ASSIGN(unique_fd dev, create_in_root(root_fd, "/dev", false));
    struct Link {
        const char* target;
        const char* name;
    };
    constexpr std::array links{Link{"/proc/self/fd", "fd"}, Link{"/proc/self/fd/0", "stdin"},
                               Link{"/proc/self/fd/1", "stdout"}, Link{"/proc/self/fd/2", "stderr"}};
    for (const auto& l : links) {
        if (::symlinkat(l.target, dev.get(), l.name) < 0 && errno != EEXIST)
            return sys_error(std::string("symlink /dev/") + l.name);
    }
    if (with_kcore && ::symlinkat("/proc/kcore", dev.get(), "core") < 0 && errno != EEXIST)
        return sys_error("symlink /dev/core");
    // /dev/ptmx must be the devpts instance of this container.
    ::unlinkat(dev.get(), "ptmx", 0);
    if (::symlinkat("pts/ptmx", dev.get(), "ptmx") < 0) return sys_error("symlink /dev/ptmx");
    return {};
}

}  // namespace

Result<void> check_proc_destination(const MountStep& step) {
    const std::string& d = step.destination;
    if (d != "/proc" && !d.starts_with("/proc/")) return {};
    if (d == "/proc") {
        if (step.kind == MountKind::Proc) return {};
        // A bind of a real procfs is what a container sharing the host's pid namespace uses
        // where it cannot mount one (rootless podman's --pid host), and runc accepts it; the
        // CVE-2019-16884 class is anything else there.
        struct statfs fs;
        if (step.kind == MountKind::Bind && ::statfs(step.source.c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC)
            return {};
        return fail(EINVAL, "mount destination /proc: only a proc filesystem may be mounted there");
    }
    // Files lxcfs and similar tools legitimately cover.
    static constexpr std::array<std::string_view, 10> allowed{
        "/proc/cpuinfo", "/proc/diskstats", "/proc/meminfo", "/proc/stat",
        "/proc/swaps",   "/proc/uptime",    "/proc/loadavg", "/proc/slabinfo",
        "/proc/net/dev", "/proc/sys/kernel/ns_last_pid"};
    for (auto a : allowed)
        if (d == a) return {};
    return fail(EINVAL, "mount destination " + d + " is not allowed: it would cover part of /proc");
}

Result<void> prepare_rootfs(const RootfsContext& ctx) {
    const Plan& plan = ctx.plan;
    ::umask(0);
    // Without a mount namespace of its own, "/" is the host's: leave its propagation alone.
    if (plan.has_mount_namespace && ::mount(nullptr, "/", nullptr, plan.root_propagation, nullptr) < 0)
        return sys_error("set propagation of /");
    // The rootfs must be a mount point of its own for pivot_root.
    if (::mount(plan.rootfs.c_str(), plan.rootfs.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0)
        return sys_error("bind mount rootfs " + plan.rootfs);
    unique_fd root_fd(::open(plan.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root_fd) return sys_error("open rootfs " + plan.rootfs);

    for (const auto& m : plan.mounts) {
        FB_TRY(check_proc_destination(m));
        unsigned long flags = m.flags.set & ~(MS_REMOUNT | MS_BIND | MS_REC);
        // /dev is made read-only only after its device nodes exist.
        if (m.destination == "/dev") flags &= ~MS_RDONLY;
        switch (m.kind) {
        case MountKind::Bind: {
            size_t index = static_cast<size_t>(&m - plan.mounts.data());
            int tree = ctx.bind_source_trees && index < ctx.bind_source_trees->size() ? (*ctx.bind_source_trees)[index] : -1;
            FB_TRY(mount_bind(root_fd.get(), m, tree));
            break;
        }
        case MountKind::Proc: FB_TRY(mount_filesystem(ctx, root_fd.get(), m, "proc", flags)); break;
        case MountKind::Sysfs: FB_TRY(mount_filesystem(ctx, root_fd.get(), m, "sysfs", flags)); break;
        case MountKind::Cgroup: FB_TRY(mount_cgroups(ctx, root_fd.get(), m)); break;
        case MountKind::Other:
            if (m.flags.tmpcopyup && m.fstype != "tmpfs")
                return fail(EINVAL, "mount " + m.destination + ": tmpcopyup needs a tmpfs");
            FB_TRY(mount_filesystem(ctx, root_fd.get(), m, m.fstype.c_str(), flags));
            break;
        }
    }

    if (!plan.dev_is_bind_mounted) {
        // Each parent directory opened once (all of them are /dev, usually): ~6 syscalls a node fewer.
        std::string parent;
        unique_fd parent_fd;
        NodeOwner owner;
        for (const auto& d : plan.devices) {
            std::string p = d.path.substr(0, d.path.find_last_of('/'));
            if (p.empty()) p = "/";
            if (!parent_fd || p != parent) {
                FB_ASSIGN(parent_fd, create_in_root(root_fd.get(), p, false));
                parent = p;
                owner = owner_of_new_nodes(parent_fd.get());
            }
            FB_TRY(create_device(ctx, root_fd.get(), parent_fd.get(), owner, d));
        }
        struct stat st;
        FB_TRY(create_dev_symlinks(root_fd.get(), ::stat("/proc/kcore", &st) == 0));
    }
    // The working directory is created if the image lacks it, as runc does.
    FB_TRY(create_in_root(root_fd.get(), plan.process.cwd, false));
    return {};
}

Result<void> enter_rootfs(const std::string& rootfs, bool no_pivot) {
    if (no_pivot) {
        if (::chdir(rootfs.c_str()) < 0) return sys_error("chdir " + rootfs);
        if (::mount(rootfs.c_str(), "/", nullptr, MS_MOVE, nullptr) < 0) return sys_error("move rootfs to /");
        if (::chroot(".") < 0) return sys_error("chroot");
        if (::chdir("/") < 0) return sys_error("chdir /");
        return {};
    }
    unique_fd old_root(::open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!old_root) return sys_error("open /");
    unique_fd new_root(::open(rootfs.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!new_root) return sys_error("open " + rootfs);
    if (::fchdir(new_root.get()) < 0) return sys_error("chdir " + rootfs);
    // pivot_root(".", "."): the old root ends up stacked under the new one, so no
    // directory for it is needed inside the image.
    if (sys::pivot_root(".", ".") < 0) return sys_error("pivot_root " + rootfs);
    if (::fchdir(old_root.get()) < 0) return sys_error("chdir old root");
    // Never let the unmount propagate back to the host.
    if (::mount(nullptr, ".", nullptr, MS_SLAVE | MS_REC, nullptr) < 0) return sys_error("make old root rslave");
    if (::umount2(".", MNT_DETACH) < 0) return sys_error("detach old root");
    if (::chdir("/") < 0) return sys_error("chdir /");
    return {};
}

// The container's /dev/null, the source of every masked file: opened once and refused unless
// it is the null device. CVE-2025-31133: runc bound whatever "/dev/null" named when it masked,
// so a /dev/null swapped for a symlink to a procfs file (core_pattern) made that file
// writable at a masked path.
namespace {
Result<unique_fd> open_null_device(int root_fd) {
    FB_ASSIGN(unique_fd null, open_in_root(root_fd, "/dev/null"));
    struct stat st;
    if (::fstat(null.get(), &st) < 0) return sys_error("stat /dev/null");
    if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3))
        return fail(EPERM, "masked paths: the container's /dev/null is not the null device (char 1:3), refusing to "
                           "bind it over them");
    return null;
}
}  // namespace

Result<void> finalize_rootfs(const RootfsContext& ctx) {
    const Plan& plan = ctx.plan;
    unique_fd root_fd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root_fd) return sys_error("open /");

    if (plan.rootfs_propagation_after &&
        ::mount(nullptr, "/", nullptr, plan.rootfs_propagation_after, nullptr) < 0)
        return sys_error("set rootfs propagation");

    unique_fd null;  // opened at the first masked file
    for (const auto& p : plan.masked_paths) {
        auto fd = open_in_root(root_fd.get(), p);
        if (!fd) {
            if (fd.error().errnum() == ENOENT) continue;
            return std::unexpected(fd.error());
        }
        struct stat st;
        if (::fstat(fd->get(), &st) < 0) return sys_error("stat " + p);
        if (!S_ISDIR(st.st_mode) && !null) {
            FB_ASSIGN(null, open_null_device(root_fd.get()));
        }
        if (S_ISDIR(st.st_mode)) {
            FB_TRY(mask_directory_by_fd(fd->get(), "masked path " + p));
        } else {
            FB_ASSIGN(unique_fd tree, clone_tree(null.get(), "", false, "/dev/null"));
            FB_TRY(attach_tree(tree.get(), fd->get(), "masked path " + p));
        }
    }
    for (const auto& p : plan.readonly_paths) {
        auto fd = open_in_root(root_fd.get(), p);
        if (!fd) {
            if (fd.error().errnum() == ENOENT) continue;
            return std::unexpected(fd.error());
        }
        FB_ASSIGN(unique_fd tree, clone_tree(fd->get(), "", true, "read-only path " + p));
        FB_TRY(set_mount_attrs(tree.get(), MOUNT_ATTR_RDONLY, false, "read-only path " + p));
        FB_TRY(attach_tree(tree.get(), fd->get(), "read-only path " + p));
    }
    for (const auto& m : plan.mounts) {
        if (m.destination == "/dev" && m.kind != MountKind::Bind && (m.flags.set & MS_RDONLY)) {
            FB_ASSIGN(unique_fd dev, open_in_root(root_fd.get(), "/dev"));
            FB_TRY(set_mount_attrs(dev.get(), mount_attrs_of(m.flags.set), false, "/dev"));
        }
    }
    if (plan.rootfs_readonly) {
        // By path: the container may have no /proc for the fd-based form.
        unsigned long keep = locked_flags(root_fd.get()) & ~MS_RDONLY;
        if (::mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | keep, nullptr) < 0)
            return sys_error("remount / read-only");
    }
    return {};
}

Result<void> mount_dev_console(int pty_fd) {
    unique_fd dev(sys::openat2(AT_FDCWD, "/dev", O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                               RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
    if (!dev) return sys_error("open /dev for /dev/console");
    // O_NOFOLLOW: a symlink there (the image's, or one swapped in) is never followed.
    unique_fd console(::openat(dev.get(), "console", O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!console && errno == ENOENT) {
        unique_fd made(::openat(dev.get(), "console", O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!made && errno == EROFS) return {};
        if (!made) return sys_error("create /dev/console");
        console.reset(::openat(dev.get(), "console", O_PATH | O_NOFOLLOW | O_CLOEXEC));
    }
    if (!console) return sys_error("open /dev/console");
    struct stat st;
    if (::fstat(console.get(), &st) < 0) return sys_error("stat /dev/console");
    if (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode))
        return fail(EPERM, "/dev/console is a symlink or a directory: refusing to mount the terminal over it");
    FB_ASSIGN(unique_fd tree, clone_tree(pty_fd, "", false, "the terminal"));
    return attach_tree(tree.get(), console.get(), "the terminal on /dev/console");
}

namespace {
// resolve: openat2's RESOLVE_* flags for the lookup, 0 for open_tree's own (one call less).
Result<std::vector<unique_fd>> clone_bind_sources(const Plan& plan, bool idmapped_only, uint64_t resolve) {
    std::vector<unique_fd> trees(plan.mounts.size());
    for (size_t i = 0; i < plan.mounts.size(); ++i) {
        const MountStep& m = plan.mounts[i];
        if (m.kind != MountKind::Bind || (idmapped_only && !m.idmap)) continue;
        std::string what = "bind mount source " + m.source;
        if (!resolve) {
            FB_ASSIGN(trees[i], clone_tree(AT_FDCWD, m.source.c_str(), m.recursive_bind, what));
            continue;
        }
        unique_fd source(sys::openat2(AT_FDCWD, m.source.c_str(), O_PATH | O_CLOEXEC, 0, resolve));
        if (!source) return sys_error(what);
        FB_ASSIGN(trees[i], clone_tree(source.get(), "", m.recursive_bind, what));
    }
    return trees;
}
}  // namespace

Result<std::vector<unique_fd>> open_bind_sources(const Plan& plan, bool idmapped_only) {
    return clone_bind_sources(plan, idmapped_only, 0);
}

Result<std::vector<unique_fd>> open_bind_sources_no_magic_links(const Plan& plan) {
    return clone_bind_sources(plan, false, RESOLVE_NO_MAGICLINKS);
}

Result<void> idmap_tree(int tree, int userns_fd, bool recursive, const std::string& what) {
    struct mount_attr attr {};
    attr.attr_set = MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns_fd);
    if (::mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr) == 0) return {};
    int err = errno;
    // EINVAL: the filesystem cannot idmap (or the kernel predates 5.12); EPERM: the source
    // is idmapped already, or we are not root of the initial user namespace.
    std::string why = err == EINVAL   ? recursive ? " (do its filesystem and those mounted below it support idmapped mounts?)"
                                                  : " (does its filesystem support idmapped mounts?)"
                      : err == EPERM ? " (is the source an idmapped mount already?)"
                                     : "";
    errno = err;
    return sys_error("idmap the bind mount " + what + why);
}

Result<std::vector<unique_fd>> clone_cgroup_trees(const RootfsContext& ctx) {
    std::vector<unique_fd> trees;
    const auto& layout = ctx.cgroup_layout;
    bool wanted = false;
    for (const auto& m : ctx.plan.mounts) wanted |= m.kind == MountKind::Cgroup;
    if (!wanted || layout.mode == CgroupMode::None) return trees;
    for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
        if (i >= ctx.cgroup_dirs.size()) return fail(EINVAL, "no cgroup directory for " + layout.hierarchies[i].mountpoint);
        if (ctx.v1_cgroups_premounted && !layout.hierarchies[i].unified) {
            trees.emplace_back();  // bound by the template already
            continue;
        }
        if (ctx.new_cgroup_namespace && layout.hierarchies[i].unified) {
            trees.emplace_back();  // mounted fresh inside the cgroup namespace, as cold
            if (layout.mode == CgroupMode::V2) break;
            continue;
        }
        if (ctx.cgroup_dirs[i].empty()) {  // none in this hierarchy: an empty mount point
            trees.emplace_back();
            continue;
        }
        FB_ASSIGN(unique_fd tree, clone_tree(AT_FDCWD, ctx.cgroup_dirs[i].c_str(), true, ctx.cgroup_dirs[i]));
        trees.push_back(std::move(tree));
        if (layout.mode == CgroupMode::V2) break;
    }
    return trees;
}

Result<void> attach_cgroup_trees(const RootfsContext& ctx, std::vector<unique_fd>& trees) {
    if (trees.empty()) return {};
    const auto& layout = ctx.cgroup_layout;
    unique_fd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root) return sys_error("open /");
    for (const auto& m : ctx.plan.mounts) {
        if (m.kind != MountKind::Cgroup) continue;
        unsigned long flags = m.flags.set & ~(MS_REMOUNT | MS_BIND | MS_REC);
        // cgroup2 in a cgroup namespace: a fresh mount shows the namespace's root, which is
        // the container's cgroup (init unshared it there), and reads as a cold init's does.
        auto attach = [&](size_t i, const std::string& dest_path) -> Result<void> {
            FB_ASSIGN(unique_fd dest, open_in_root(root.get(), dest_path));
            if (trees[i]) return attach_tree(trees[i].get(), dest.get(), "cgroup on " + dest_path);
            unsigned long rw_flags = flags & ~MS_RDONLY;
            return mount_on_fd("cgroup", dest.get(), "cgroup2", rw_flags, nullptr, "cgroup2 on " + dest_path);
        };
        if (layout.mode == CgroupMode::V2) {
            FB_TRY(attach(0, m.destination));
        } else {
            for (size_t i = 0; i < layout.hierarchies.size() && i < trees.size(); ++i) {
                bool fresh = ctx.new_cgroup_namespace && layout.hierarchies[i].unified;
                if (!trees[i] && !fresh) continue;  // the template's bind is the container's cgroup
                std::string dest_path = m.destination + "/" + basename_of(layout.hierarchies[i].mountpoint);
                if (ctx.replace_premounted_v1 && !layout.hierarchies[i].unified) {
                    // The template bound a spare this container did not take.
                    FB_ASSIGN(unique_fd stale, open_in_root(root.get(), dest_path));
                    if (::umount2(fd_path(stale.get()).c_str(), MNT_DETACH) < 0)
                        return sys_error("unmount the template's cgroup on " + dest_path);
                }
                FB_TRY(attach(i, dest_path));
            }
        }
        if (flags & MS_RDONLY) {
            FB_ASSIGN(unique_fd mounted, open_in_root(root.get(), m.destination));
            FB_TRY(set_mount_attrs(mounted.get(), mount_attrs_of(flags), true, m.destination));
        }
        break;  // zygote::rootfs_template_fits allows one cgroup mount
    }
    return {};
}

}  // namespace forkbox
