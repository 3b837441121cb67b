#include "libforkbox/sandbox/tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/syscalls.hpp"

namespace forkbox::sandbox {

namespace {

// Paths inside the sandbox resolve in its root, and /proc's magic links (which can name
// what lies outside the mount namespace's view) are refused.
constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

std::string relative(const std::string& sandbox_path) {
    std::string r = sandbox_path.substr(1);
    return r.empty() ? "." : r;
}

char type_of(const struct stat& st) {
    if (S_ISREG(st.st_mode)) return 'f';
    if (S_ISDIR(st.st_mode)) return 'd';
    if (S_ISLNK(st.st_mode)) return 'l';
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) return 'w';
    return 'o';
}

std::string_view type_name(char t) {
    switch (t) {
        case 'f': return "file";
        case 'd': return "dir";
        case 'l': return "symlink";
        default: return "other";
    }
}

// The sandbox's overlays are mounted with userxattr: an opaque directory says so in user.*.
bool is_opaque(int dir_fd, const char* name) {
    unique_fd fd(::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    char value = 0;
    return fd && ::fgetxattr(fd.get(), "user.overlay.opaque", &value, 1) == 1 && value == 'y';
}

int64_t mtime_ns(const struct stat& st) { return st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec; }

bool write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
}

// Every entry under `dir` (relative to `at`), depth first: its sandbox path, its stat, and
// its directory's fd and name there.
template <typename Visit>
void walk(int at, const std::string& dir, const std::string& sandbox_path, Visit&& visit) {
    unique_fd fd(::openat(at, dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return;
    DIR* d = ::fdopendir(fd.release());
    if (!d) return;
    std::vector<std::pair<std::string, struct stat>> entries;
    while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) entries.emplace_back(e->d_name, st);
    }
    int dfd = ::dirfd(d);
    for (const auto& [name, st] : entries) {
        std::string child = (sandbox_path == "/" ? "" : sandbox_path) + "/" + name;
        visit(child, st, dfd, name.c_str());
        if (S_ISDIR(st.st_mode)) walk(dfd, name, child, visit);
    }
    ::closedir(d);
}

// The entry at `path` of the sandbox (this process's root), opened by the caller's flags.
int open_in_sandbox(const std::string& path, int flags, mode_t mode = 0) {
    static int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    return sys::openat2(root, relative(path).c_str(), static_cast<uint64_t>(flags | O_CLOEXEC), mode, kResolve);
}

// The parent directory of `path` (made, with its parents, when `make`) and the last name.
Result<std::pair<unique_fd, std::string>> open_parent(const std::string& path, bool make) {
    size_t slash = path.find_last_of('/');
    std::string parent = slash == 0 ? "/" : path.substr(0, slash), name = path.substr(slash + 1);
    if (name.empty()) return fail(EISDIR, "Is a directory");
    unique_fd dir(open_in_sandbox(parent, O_PATH | O_DIRECTORY));
    if (!dir && errno == ENOENT && make) {
        // Made one name at a time; each prefix resolves from the sandbox's root, symlinks
        // in it included.
        std::string prefix;
        size_t pos = 1;
        while (pos <= parent.size()) {
            size_t end = parent.find('/', pos);
            if (end == std::string::npos) end = parent.size();
            std::string part = parent.substr(pos, end - pos);
            pos = end + 1;
            std::string above = prefix.empty() ? "/" : prefix;
            prefix += "/" + part;
            dir.reset(open_in_sandbox(prefix, O_PATH | O_DIRECTORY));
            if (dir || errno != ENOENT) continue;
            unique_fd at(open_in_sandbox(above, O_PATH | O_DIRECTORY));
            if (!at || (::mkdirat(at.get(), part.c_str(), 0755) < 0 && errno != EEXIST)) return sys_error("mkdir " + prefix);
            dir.reset(open_in_sandbox(prefix, O_PATH | O_DIRECTORY));
        }
    }
    if (!dir) return sys_error(parent);
    return std::pair{std::move(dir), name};
}

Result<void> remove_tree(int at, const std::string& name) {
    if (::unlinkat(at, name.c_str(), 0) == 0) return {};
    if (errno != EISDIR && errno != EPERM) return sys_error("remove");
    unique_fd dir(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return sys_error("remove");
    DIR* d = ::fdopendir(::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0));
    if (!d) return sys_error("remove");
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& n : names) FB_TRY(remove_tree(dir.get(), n));
    if (::unlinkat(at, name.c_str(), AT_REMOVEDIR) < 0) return sys_error("remove");
    return {};
}

Result<void> do_write(const FileRequest& r, int in) {
    FB_TRY(open_parent(r.path, true));
    // From the root again: a symlink at the end is followed, inside the sandbox's root.
    unique_fd out(open_in_sandbox(r.path, O_WRONLY | O_CREAT | O_TRUNC, r.mode & 07777));
    if (!out) return sys_error("open");
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error("read the data");
        if (n == 0) break;
        if (!write_all(out.get(), std::string_view(buf, static_cast<size_t>(n)))) return sys_error("write");
    }
    if (::fchmod(out.get(), r.mode & 07777) < 0) return sys_error("chmod");  // the umask aside
    return {};
}

Result<void> do_read(const FileRequest& r, int out) {
    unique_fd in(open_in_sandbox(r.path, O_RDONLY));
    if (!in) return sys_error("open");
    struct stat st;
    if (::fstat(in.get(), &st) < 0) return sys_error("stat");
    if (S_ISDIR(st.st_mode)) return fail(EISDIR, "read: Is a directory");
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(in.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error("read");
        if (n == 0) return {};
        if (!write_all(out, std::string_view(buf, static_cast<size_t>(n)))) return sys_error("send");
    }
}

void write_entry(json::Writer& w, const std::string& name, const struct stat& st) {
    w.begin_object();
    w.key("name").value(name);
    w.key("type").value(type_name(type_of(st)));
    w.key("size").value(static_cast<uint64_t>(st.st_size));
    w.key("mode").value(static_cast<uint64_t>(st.st_mode & 07777));
    w.key("mtime").value(static_cast<double>(mtime_ns(st)) / 1e9);
    w.end_object();
}

Result<void> do_list(const FileRequest& r, int out) {
    unique_fd dir(open_in_sandbox(r.path, O_RDONLY | O_DIRECTORY));
    if (!dir) return sys_error("open");
    DIR* d = ::fdopendir(dir.release());
    if (!d) return sys_error("open");
    std::vector<std::pair<std::string, struct stat>> entries;
    while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) entries.emplace_back(e->d_name, st);
    }
    ::closedir(d);
    std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.first < b.first; });
    json::Writer w;
    w.begin_array();
    for (const auto& [name, st] : entries) write_entry(w, name, st);
    w.end_array();
    if (!write_all(out, w.str())) return sys_error("send");
    return {};
}

// One entry as list has it, symlinks not followed.
Result<void> do_stat(const FileRequest& r, int out) {
    struct stat st;
    std::string name = r.path == "/" ? "/" : r.path.substr(r.path.find_last_of('/') + 1);
    if (r.path == "/") {
        unique_fd root(open_in_sandbox("/", O_PATH | O_DIRECTORY));
        if (!root || ::fstat(root.get(), &st) < 0) return sys_error("stat");
    } else {
        FB_ASSIGN(auto parent, open_parent(r.path, false));
        if (::fstatat(parent.first.get(), parent.second.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) return sys_error("stat");
    }
    json::Writer w;
    write_entry(w, name, st);
    if (!write_all(out, w.str())) return sys_error("send");
    return {};
}

Result<void> move_across_mounts(int from_dir, const std::string& from, int to_dir, const std::string& to);

// rename(2) inside the sandbox: a file or a directory, replacing what the new path names
// as rename does (an empty directory by a directory, a file by a file); between mounts,
// a copy and a removal, as mv.
Result<void> do_rename(const FileRequest& r) {
    if (r.path == "/" || r.to == "/") return fail(EBUSY, "the sandbox's root cannot be renamed");
    FB_ASSIGN(auto from, open_parent(r.path, false));
    FB_ASSIGN(auto to, open_parent(r.to, false));
    if (::renameat(from.first.get(), from.second.c_str(), to.first.get(), to.second.c_str()) == 0) return {};
    if (errno != EXDEV) return sys_error("rename to " + r.to);
    auto moved = move_across_mounts(from.first.get(), from.second, to.first.get(), to.second);
    if (!moved) return std::unexpected(moved.error().wrap("move to " + r.to));
    return {};
}

Result<void> do_remove(const FileRequest& r) {
    if (r.path == "/") return fail(EBUSY, "the sandbox's root cannot be removed");
    FB_ASSIGN(auto parent, open_parent(r.path, false));
    if (::unlinkat(parent.first.get(), parent.second.c_str(), 0) == 0) return {};
    if (errno != EISDIR) return sys_error("remove");
    if (!r.recursive) {
        if (::unlinkat(parent.first.get(), parent.second.c_str(), AT_REMOVEDIR) == 0) return {};
        return sys_error("remove");
    }
    // O_PATH fds cannot be walked: the parent again, readable.
    unique_fd dir(sys::openat2(parent.first.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, kResolve));
    if (!dir) return sys_error("remove");
    return remove_tree(dir.get(), parent.second);
}

Result<void> do_mkdir(const FileRequest& r) {
    FB_ASSIGN(auto parent, open_parent(r.path, r.recursive));
    if (::mkdirat(parent.first.get(), parent.second.c_str(), r.mode & 07777) == 0) return {};
    if (errno == EEXIST && r.recursive) return {};
    return sys_error("mkdir");
}

Result<void> do_diff(int out, const TreeContext& t) {
    Manifest now = take_manifest(t);
    static const Manifest empty;
    auto lower_type = [&](const std::string& path) -> char {
        if (t.lower_fd < 0) return '\0';
        // The lower layer's own symlinks resolve in it.
        unique_fd fd(sys::openat2(t.lower_fd, relative(path).c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, RESOLVE_IN_ROOT));
        struct stat st;
        if (!fd || ::fstat(fd.get(), &st) < 0) return '\0';
        return type_of(st);
    };
    auto lower_below = [&](const std::string& path) {
        std::vector<std::pair<std::string, char>> below;
        if (t.lower_fd < 0) return below;
        unique_fd dir(sys::openat2(t.lower_fd, relative(path).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                                   0, RESOLVE_IN_ROOT));
        if (dir) walk(dir.get(), ".", path, [&](const std::string& p, const struct stat& st, int, const char*) {
            below.emplace_back(p, type_of(st));
        });
        return below;
    };
    auto changes = compute_diff(t.base ? *t.base : empty, now, lower_type, lower_below);
    if (!write_all(out, format_changes(changes))) return sys_error("send");
    return {};
}

// --- copy ---

struct Copier {
    // Hard-linked files copied so far: (device, inode) -> (their directory, their name).
    std::map<std::pair<dev_t, ino_t>, std::pair<int, std::string>> links;
    Result<void> copy_dir(int src, int dst, const std::set<std::string>* skip = nullptr);
    // One entry of any type, `from` in `src` copied as `to` in `dst`.
    Result<void> copy_entry(int src, const std::string& from, int dst, const std::string& to, const struct stat& st);
    Copier() = default;
    Copier(const Copier&) = delete;
    ~Copier();
};

void copy_xattrs(int src, int dst) {
    char names[8192];
    ssize_t n = ::flistxattr(src, names, sizeof names);
    for (ssize_t i = 0; n > 0 && i < n; i += static_cast<ssize_t>(std::strlen(names + i)) + 1) {
        std::string_view name(names + i);
        // What a user namespace can set: overlayfs's user.overlay.* among them.
        if (!name.starts_with("user.") && name != "security.capability") continue;
        char value[65536];
        ssize_t len = ::fgetxattr(src, names + i, value, sizeof value);
        if (len >= 0) ::fsetxattr(dst, names + i, value, static_cast<size_t>(len), 0);
    }
}

void copy_attributes(int dst_dir, const char* name, int dst_fd, const struct stat& st) {
    ::fchownat(dst_dir, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
    if (!S_ISLNK(st.st_mode)) {
        if (dst_fd >= 0) ::fchmod(dst_fd, st.st_mode & 07777);
        else ::fchmodat(dst_dir, name, st.st_mode & 07777, 0);
    }
    timespec times[2] = {st.st_atim, st.st_mtim};
    ::utimensat(dst_dir, name, times, AT_SYMLINK_NOFOLLOW);
}

Result<void> copy_file(int src_dir, const char* name, int dst_dir, const char* dst_name, const struct stat& st) {
    // The parent's code may have swapped the file for a FIFO since it was looked at (a
    // rootless parent runs on while it is copied): never block on one, copy only a file.
    unique_fd in(::openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!in) return sys_error(std::string("open ") + name);
    struct stat opened;
    if (::fstat(in.get(), &opened) < 0 || !S_ISREG(opened.st_mode)) return {};  // gone meanwhile
    unique_fd out(::openat(dst_dir, dst_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return sys_error(std::string("create ") + dst_name);
    off_t left = st.st_size;
    while (left > 0) {
        ssize_t n = ::sendfile(out.get(), in.get(), nullptr, static_cast<size_t>(std::min<off_t>(left, 1 << 30)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error(std::string("copy ") + name);
        if (n == 0) break;  // it shrank
        left -= n;
    }
    copy_xattrs(in.get(), out.get());
    copy_attributes(dst_dir, dst_name, out.get(), st);
    return {};
}

Result<void> Copier::copy_dir(int src, int dst, const std::set<std::string>* skip) {
    DIR* d = ::fdopendir(::fcntl(src, F_DUPFD_CLOEXEC, 0));
    if (!d) return sys_error("read a directory");
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 && !(skip && skip->count(e->d_name)))
            names.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& n : names) {
        struct stat st;
        if (::fstatat(src, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;  // gone meanwhile
        FB_TRY(copy_entry(src, n, dst, n, st));
    }
    return {};
}

Result<void> Copier::copy_entry(int src, const std::string& from, int dst, const std::string& to, const struct stat& st) {
    const char* name = from.c_str();
    const char* dst_name = to.c_str();
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
        // A hard link of a file copied already: linked again.
        auto key = std::pair{st.st_dev, st.st_ino};
        if (auto it = links.find(key); it != links.end()) {
            if (::linkat(it->second.first, it->second.second.c_str(), dst, dst_name, 0) == 0) return {};
        }
    }
    if (S_ISDIR(st.st_mode)) {
        if (::mkdirat(dst, dst_name, 0700) < 0 && errno != EEXIST) return sys_error(std::string("mkdir ") + dst_name);
        unique_fd s(::openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        unique_fd t(::openat(dst, dst_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!s || !t) return sys_error(std::string("open ") + name);
        FB_TRY(copy_dir(s.get(), t.get()));
        copy_xattrs(s.get(), t.get());
        copy_attributes(dst, dst_name, t.get(), st);
    } else if (S_ISREG(st.st_mode)) {
        FB_TRY(copy_file(src, name, dst, dst_name, st));
        if (st.st_nlink > 1) {
            int keep = ::fcntl(dst, F_DUPFD_CLOEXEC, 0);  // the directory stays open while links may follow
            if (keep >= 0) links[{st.st_dev, st.st_ino}] = {keep, to};
        }
    } else if (S_ISLNK(st.st_mode)) {
        char target[4097];
        ssize_t len = ::readlinkat(src, name, target, sizeof target - 1);
        if (len < 0) return {};
        target[len] = '\0';
        ::unlinkat(dst, dst_name, 0);
        if (::symlinkat(target, dst, dst_name) < 0) return sys_error(std::string("symlink ") + dst_name);
        copy_attributes(dst, dst_name, -1, st);
    } else if (S_ISFIFO(st.st_mode) || (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))) {
        // A whiteout: a user namespace may make these 0:0 devices.
        ::unlinkat(dst, dst_name, 0);
        if (::mknodat(dst, dst_name, st.st_mode & (S_IFMT | 07777), st.st_rdev) < 0)
            return sys_error(std::string("mknod ") + dst_name);
        copy_attributes(dst, dst_name, -1, st);
    }
    // Sockets and real devices are not state a fork carries.
    return {};
}

Copier::~Copier() {
    for (auto& [key, where] : links) ::close(where.first);
}

// A rename between two mounts (a user's sandbox has an overlay per top-level directory):
// what mv does, a copy and then the source removed. The copy is made under a temporary
// name beside `to` and renamed into place, so `to` is never half written, what it names is
// replaced as rename replaces it, and a failed copy leaves the source as it was.
Result<void> move_across_mounts(int from_dir, const std::string& from, int to_dir, const std::string& to) {
    struct stat st;
    if (::fstatat(from_dir, from.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) return sys_error("stat");
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return fail(EXDEV, "a socket, a fifo or a device cannot move to another mount");
    std::string temp = ".forkbox-move-" + std::to_string(::getpid());
    (void)remove_tree(to_dir, temp);  // a leftover of a move killed half way
    Copier c;
    auto copied = c.copy_entry(from_dir, from, to_dir, temp, st);
    if (copied && ::renameat(to_dir, temp.c_str(), to_dir, to.c_str()) < 0) copied = sys_error("rename");
    if (!copied) {
        (void)remove_tree(to_dir, temp);
        return copied;
    }
    return remove_tree(from_dir, from);
}

}  // namespace

std::vector<StateRoot> state_roots(const TreeContext& t) {
    if (!t.per_directory) return {{"/", "upper"}};
    std::vector<StateRoot> out;
    for (const char* part : {"upper", "root"}) {
        unique_fd fd(::openat(t.stage_fd, part, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        DIR* d = fd ? ::fdopendir(fd.release()) : nullptr;
        if (!d) continue;
        while (dirent* e = ::readdir(d)) {
            std::string name = e->d_name;
            if (name == "." || name == "..") continue;
            // root/: what the builder made there is not state (mount points, the host's symlinks).
            if (std::string_view(part) == "root" && t.builder_names.count(name)) continue;
            out.push_back({"/" + name, std::string(part) + "/" + name});
        }
        ::closedir(d);
    }
    return out;
}

Manifest take_manifest(const TreeContext& t) {
    Manifest m;
    auto record = [&](const std::string& path, const struct stat& st, int dir_fd, const char* name) {
        char type = type_of(st);
        m[path] = ManifestEntry{type, type == 'f' || type == 'l' ? static_cast<uint64_t>(st.st_size) : 0, mtime_ns(st),
                                type == 'd' && is_opaque(dir_fd, name)};
    };
    for (const auto& root : state_roots(t)) {
        struct stat st;
        if (::fstatat(t.stage_fd, root.stage_path.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
        if (root.sandbox_path != "/") record(root.sandbox_path, st, t.stage_fd, root.stage_path.c_str());
        if (S_ISDIR(st.st_mode)) walk(t.stage_fd, root.stage_path, root.sandbox_path, record);
    }
    // A directory's mtime changes with its entries: directories compare by type alone.
    for (auto& [path, e] : m)
        if (e.type == 'd') e.mtime_ns = 0;
    return m;
}

std::string format_changes(const std::vector<Change>& changes) {
    json::Writer w;
    w.begin_array();
    for (const auto& c : changes) {
        w.begin_object();
        w.key("path").value(c.path).key("change").value(c.change).key("type").value(type_name(c.type));
        w.key("size").value(c.size);
        w.end_object();
    }
    w.end_array();
    return w.take();
}

int run_file_op(const FileRequest& r, int in, int out, int err, const TreeContext& t) {
    Result<void> done;
    switch (r.op) {
        case FileOp::Write: done = do_write(r, in); break;
        case FileOp::Read: done = do_read(r, out); break;
        case FileOp::List: done = do_list(r, out); break;
        case FileOp::Remove: done = do_remove(r); break;
        case FileOp::Mkdir: done = do_mkdir(r); break;
        case FileOp::Diff: done = do_diff(out, t); break;
        case FileOp::Stat: done = do_stat(r, out); break;
        case FileOp::Rename: done = do_rename(r); break;
    }
    if (done) return 0;
    std::string message = r.path + ": " + done.error().what() + "\n";
    write_all(err, message);
    int e = done.error().errnum();
    return e > 0 && e < 126 ? e : EIO;
}

Result<void> copy_tree(int src, int dst, const std::set<std::string>* skip) {
    Copier c;
    return c.copy_dir(src, dst, skip);
}

}  // namespace forkbox::sandbox
