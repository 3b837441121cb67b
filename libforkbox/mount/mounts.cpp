#include "libforkbox/mount/mounts.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstdio>
#include <optional>

#include "libforkbox/base/syscalls.hpp"

namespace forkbox {

namespace {
constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
}

std::string fd_path(int fd) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "/proc/self/fd/%d", fd);
    return buf;
}

Result<unique_fd> open_in_root(int root_fd, const std::string& path) {
    const char* rel = path.c_str();
    while (*rel == '/') ++rel;
    if (*rel == 0) rel = ".";
    int fd;
    do {
        fd = sys::openat2(root_fd, rel, O_PATH | O_CLOEXEC, 0, kResolve);
    } while (fd < 0 && errno == EAGAIN);  // openat2 asks to retry when a rename raced it
    if (fd < 0) return sys_error("open " + path + " in rootfs");
    return unique_fd(fd);
}

namespace {
// The common case, a missing last component under an existing parent (/dev/pts,
// /sys/fs/cgroup/cpu): created in the parent, resolved inside the root, in four syscalls
// rather than a walk. Anything else (a missing parent, a dangling symlink, a race) is left
// to the walk below: nullopt.
std::optional<unique_fd> create_last_component(int root_fd, const std::string& path, bool file) {
    size_t end = path.find_last_not_of('/');
    if (end == std::string::npos) return std::nullopt;
    size_t slash = path.rfind('/', end);
    std::string name = path.substr(slash == std::string::npos ? 0 : slash + 1,
                                   end - (slash == std::string::npos ? 0 : slash + 1) + 1);
    if (name == "." || name == "..") return std::nullopt;
    auto parent = open_in_root(root_fd, slash == std::string::npos ? "/" : path.substr(0, slash));
    if (!parent) return std::nullopt;
    if (file) {
        int fd = ::openat(parent->get(), name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) return std::nullopt;  // EEXIST: a dangling symlink, or a race
        ::close(fd);
    } else if (::mkdirat(parent->get(), name.c_str(), 0755) < 0) {
        return std::nullopt;
    }
    auto made = open_in_root(root_fd, path);
    if (!made) return std::nullopt;
    return std::move(*made);
}

Result<unique_fd> create_in_root_depth(int root_fd, const std::string& path, bool file, int depth) {
    auto existing = open_in_root(root_fd, path);
    if (existing) return existing;
    if (existing.error().errnum() != ENOENT) return existing;
    if (depth > 40) return fail(ELOOP, "create " + path + " in rootfs: too many symlinks");
    if (auto made = create_last_component(root_fd, path, file)) return std::move(*made);

    // Walk down the path: each prefix is resolved inside the root, each missing component
    // is created relative to its (already confined) parent fd.
    unique_fd dir;
    FB_ASSIGN(dir, open_in_root(root_fd, "/"));
    size_t i = 0;
    std::string prefix;
    while (i < path.size()) {
        while (i < path.size() && path[i] == '/') ++i;
        if (i >= path.size()) break;
        size_t j = path.find('/', i);
        if (j == std::string::npos) j = path.size();
        std::string name = path.substr(i, j - i);
        std::string parent = prefix;
        prefix += "/" + name;
        bool last = j >= path.size() || path.find_first_not_of('/', j) == std::string::npos;
        auto next = open_in_root(root_fd, prefix);
        if (!next) {
            if (next.error().errnum() != ENOENT) return next;
            if (name == "..") return fail(ENOENT, "open " + prefix + " in rootfs");
            char target[4096];
            ssize_t n = ::readlinkat(dir.get(), name.c_str(), target, sizeof target - 1);
            if (n > 0) {
                // A dangling symlink: create its target instead, read as a path inside the
                // root (absolute targets start at the rootfs, ".." stops at it), as runc does.
                target[n] = 0;
                std::string rest = path.substr(j);
                std::string redirected = target[0] == '/' ? std::string(target) + rest
                                                          : parent + "/" + target + rest;
                return create_in_root_depth(root_fd, redirected, file, depth + 1);
            }
            if (last && file) {
                int fd = ::openat(dir.get(), name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (fd < 0 && errno != EEXIST) return sys_error("create " + prefix + " in rootfs");
                if (fd >= 0) ::close(fd);
            } else if (::mkdirat(dir.get(), name.c_str(), 0755) < 0 && errno != EEXIST) {
                return sys_error("mkdir " + prefix + " in rootfs");
            }
            next = open_in_root(root_fd, prefix);
            if (!next) return next;
        }
        dir = std::move(*next);
        i = j;
    }
    return dir;
}
}  // namespace

Result<unique_fd> create_in_root(int root_fd, const std::string& path, bool file) {
    return create_in_root_depth(root_fd, path, file, 0);
}

Result<void> mount_on_fd(const char* source, int target_fd, const char* fstype, unsigned long flags,
                         const char* data, const std::string& what) {
    std::string target = fd_path(target_fd);
    if (::mount(source, target.c_str(), fstype, flags, data) < 0) return sys_error("mount " + what);
    return {};
}

Result<void> set_propagation(int target_fd, unsigned long flags, const std::string& what) {
    std::string target = fd_path(target_fd);
    if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) < 0)
        return sys_error("set propagation of " + what);
    return {};
}

}  // namespace forkbox
