#include "libforkbox/container/state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>

#include "libforkbox/base/flock.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"

namespace forkbox {

Result<void> write_pid_file(const std::string& path, pid_t pid) {
    std::string dir = ".", name = path;
    if (auto slash = path.find_last_of('/'); slash != std::string::npos) {
        dir = slash == 0 ? "/" : path.substr(0, slash);
        name = path.substr(slash + 1);
    }
    unique_fd dfd(::open(dir.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!dfd) return sys_error("open pid file directory " + dir);
    FB_TRY_CTX(write_file_atomic(dfd.get(), name, std::to_string(pid), 0644), "pid file " + path);
    return {};
}

std::string serialize_state(const ContainerState& s) {
    json::Writer w;
    w.begin_object();
    w.key("ociVersion").value(s.oci_version);
    w.key("id").value(s.id);
    w.key("pid").value(static_cast<int64_t>(s.pid));
    w.key("pidStartTime").value(s.pid_start_time);
    w.key("bundle").value(s.bundle);
    w.key("rootfs").value(s.rootfs);
    w.key("created").value(s.created);
    w.key("owner").value(s.owner);
    w.key("ownPidNamespace").value(s.own_pid_namespace);
    w.key("annotations").begin_object();
    for (const auto& [k, v] : s.annotations) w.key(k).value(v);
    w.end_object();
    w.key("cgroupDirs").begin_array();
    for (const auto& d : s.cgroup_dirs) w.value(d);
    w.end_array();
    w.key("cgroupDirsCreated").begin_array();
    for (const auto& d : s.cgroup_dirs_created) w.value(d);
    w.end_array();
    // Only with the systemd driver: cgroupfs containers' state stays as it was.
    if (!s.systemd_unit.empty()) {
        w.key("cgroupDriver").value("systemd");
        w.key("systemdUnit").value(s.systemd_unit);
    }
    if (!s.net_devices.empty()) {
        w.key("netDevices").begin_object();
        for (const auto& [host, inside] : s.net_devices) w.key(host).value(inside);
        w.end_object();
    }
    w.end_object();
    return w.take();
}

namespace {
Result<std::vector<std::string>> string_array(const json::Value& root, const char* key) {
    std::vector<std::string> out;
    auto v = root.get(key);
    if (!v) return out;
    FB_TRY(v->expect_array());
    for (size_t i = 0; i < v->size(); ++i) {
        FB_ASSIGN(auto s, v->at(i).as_string());
        out.push_back(std::move(s));
    }
    return out;
}

Result<std::string> opt_string(const json::Value& root, const char* key) {
    auto v = root.get(key);
    if (!v) return std::string();
    return v->as_string();
}
}  // namespace

Result<ContainerState> parse_state(std::string_view text) {
    FB_ASSIGN(auto doc, json::Document::parse(text));
    auto root = doc.root();
    FB_TRY(root.expect_object());
    ContainerState s;
    FB_ASSIGN(s.oci_version, opt_string(root, "ociVersion"));
    FB_ASSIGN(s.id, opt_string(root, "id"));
    if (auto v = root.get("pid")) {
        FB_ASSIGN(int64_t pid, v->as_int64());
        // A value cut to pid_t would name another process (4294967297 is pid 1).
        if (pid < 0 || pid > std::numeric_limits<pid_t>::max())
            return fail(EINVAL, "pid: out of range: " + std::to_string(pid));
        s.pid = static_cast<pid_t>(pid);
    }
    if (auto v = root.get("pidStartTime")) {
        FB_ASSIGN(s.pid_start_time, v->as_uint64());
    }
    FB_ASSIGN(s.bundle, opt_string(root, "bundle"));
    FB_ASSIGN(s.rootfs, opt_string(root, "rootfs"));
    FB_ASSIGN(s.created, opt_string(root, "created"));
    FB_ASSIGN(s.owner, opt_string(root, "owner"));
    if (auto v = root.get("ownPidNamespace")) {
        FB_ASSIGN(s.own_pid_namespace, v->as_bool());
    }
    if (auto v = root.get("annotations")) {
        FB_TRY(v->for_each_member([&](std::string_view k, const json::Value& val) -> Result<void> {
            FB_ASSIGN(auto str, val.as_string());
            s.annotations.emplace(std::string(k), std::move(str));
            return {};
        }));
    }
    if (auto v = root.get("netDevices")) {
        FB_TRY(v->for_each_member([&](std::string_view k, const json::Value& val) -> Result<void> {
            FB_ASSIGN(auto name, val.as_string());
            s.net_devices.emplace(std::string(k), std::move(name));
            return {};
        }));
    }
    FB_ASSIGN(s.cgroup_dirs, string_array(root, "cgroupDirs"));
    FB_ASSIGN(s.cgroup_dirs_created, string_array(root, "cgroupDirsCreated"));
    FB_ASSIGN(std::string driver, opt_string(root, "cgroupDriver"));
    if (!driver.empty() && driver != "systemd") return fail(EINVAL, "state.json: unknown cgroupDriver \"" + driver + "\"");
    FB_ASSIGN(s.systemd_unit, opt_string(root, "systemdUnit"));
    if (driver == "systemd" && s.systemd_unit.empty()) return fail(EINVAL, "state.json: cgroupDriver systemd without systemdUnit");
    return s;
}

namespace {
// runc's rule: letters, digits and _ + - . only, so an id is always one safe path element.
bool id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '+' ||
           c == '-' || c == '.';
}
}  // namespace

Result<void> validate_container_id(const std::string& id) {
    if (id.empty()) return fail(EINVAL, "container id cannot be empty");
    if (id.size() > 1024) return fail(EINVAL, "invalid container ID format: longer than 1024 bytes");
    for (char c : id)
        if (!id_char(c)) return fail(EINVAL, "invalid container ID format: " + id);
    if (id == "." || id == "..") return fail(EINVAL, "invalid container ID format: " + id);
    return {};
}

std::string container_id_for_bundle(std::string_view bundle_name, std::string_view suffix) {
    std::string name;
    for (char c : bundle_name.substr(0, 64)) name += id_char(c) ? c : '-';
    // Dots alone ("." or "..", the cwd as a bundle) say nothing about the bundle.
    if (name.find_first_not_of(".-") == std::string::npos) name = "bundle";
    return name + "-" + std::string(suffix);
}

std::string random_id_suffix() {
    uint32_t bits = 0;
    if (::getrandom(&bits, sizeof bits, 0) != sizeof bits) {
        // No entropy this early in boot: time and pid still make a collision unlikely, and
        // create refuses a taken id anyway.
        struct timespec ts;
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        bits = static_cast<uint32_t>(ts.tv_nsec) ^ (static_cast<uint32_t>(::getpid()) << 16);
    }
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", bits);
    return buf;
}

Result<void> ContainerDir::write_state(const ContainerState& s) const {
    return write_file_atomic(dirfd_.get(), kStateFile, serialize_state(s), 0644);
}

Result<ContainerState> ContainerDir::read_state() const {
    FB_ASSIGN(auto text, read_file_at(dirfd_.get(), kStateFile));
    auto st = parse_state(text);
    if (!st) return std::unexpected(st.error().wrap("parse " + file(kStateFile)));
    return st;
}

bool ContainerDir::locked_elsewhere() const {
    if (lock_.valid()) return false;
    unique_fd fd(::openat(dirfd_.get(), kLockFile, O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;
    return errno == EWOULDBLOCK;
}

bool ContainerDir::being_removed() const {
    struct stat st;
    return ::fstatat(dirfd_.get(), kLockFile, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT;
}

bool ContainerDir::fifo_exists() const {
    struct stat st;
    return ::fstatat(dirfd_.get(), kExecFifo, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<void> ContainerDir::remove() {
    // Flat directory: unlink every entry, then the directory itself.
    int dupfd = ::dup(dirfd_.get());
    if (dupfd < 0) return sys_error("dup");
    DIR* d = ::fdopendir(dupfd);
    if (!d) {
        ::close(dupfd);
        return sys_error("opendir " + path_);
    }
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    // The lock file first: a reader that finds no state.json and no lock file knows the
    // container is being deleted, not half-made.
    std::partition(names.begin(), names.end(), [](const std::string& n) { return n == kLockFile; });
    for (const auto& n : names) {
        if (::unlinkat(dirfd_.get(), n.c_str(), 0) < 0 && errno != ENOENT)
            return sys_error("remove " + path_ + "/" + n);
    }
    if (::rmdir(path_.c_str()) < 0 && errno != ENOENT) return sys_error("remove " + path_);
    return {};
}

namespace {
Result<void> mkdir_p(const std::string& path, mode_t mode) {
    if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return {};
    if (errno != ENOENT) return sys_error("mkdir " + path);
    auto slash = path.find_last_of('/');
    if (slash == std::string::npos || slash == 0) return sys_error("mkdir " + path);
    FB_TRY(mkdir_p(path.substr(0, slash), 0755));
    if (::mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return sys_error("mkdir " + path);
    return {};
}

// A verb that holds a container's lock this long is stuck (a hook that never returns):
// `delete --force` kills it, since a killed verb leaves nothing that delete --force cannot end.
constexpr auto kStuckHolder = std::chrono::seconds(10);

// The same program as ours (by its file, or by its name for another build of it): only
// forkbox locks these files, and only forkbox is ever killed for holding one.
bool runs_forkbox(pid_t pid) {
    struct stat theirs, ours;
    std::string proc = "/proc/" + std::to_string(pid);
    if (::stat((proc + "/exe").c_str(), &theirs) == 0 && ::stat("/proc/self/exe", &ours) == 0 &&
        theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino)
        return true;
    auto their_name = read_file(proc + "/comm"), our_name = read_file("/proc/self/comm");
    return their_name && our_name && *their_name == *our_name;
}

// True when it killed the holder.
bool end_stuck_holder(int lock, const std::string& path) {
    auto holder = flock_holder(lock);
    if (!holder || *holder == ::getpid() || !runs_forkbox(*holder)) return false;
    unique_fd pidfd(sys::pidfd_open(*holder));
    // Checked again through the pidfd: the process we signal is the one holding the lock.
    if (!pidfd || flock_holder(lock) != holder) return false;
    log::warn("killing forkbox process " + std::to_string(*holder) + ", which has held " + path + " for " +
              std::to_string(kStuckHolder.count()) + " s");
    return sys::pidfd_send_signal(pidfd.get(), SIGKILL) == 0;
}

Result<void> lock_ending_a_stuck_holder(int lock, const std::string& path) {
    auto stuck_after = std::chrono::steady_clock::now() + kStuckHolder;
    int nap_us = 500;
    for (;;) {
        if (::flock(lock, LOCK_EX | LOCK_NB) == 0) return {};
        if (errno != EWOULDBLOCK && errno != EINTR) return sys_error("lock " + path);
        // Once per holder: the next one (or this one, still dying) gets its own 10 s.
        if (auto now = std::chrono::steady_clock::now(); now >= stuck_after && end_stuck_holder(lock, path))
            stuck_after = now + kStuckHolder;
        ::usleep(nap_us);
        nap_us = std::min(nap_us * 2, 50'000);
    }
}

// Only create makes the lock file: a verb that made it again in a directory being removed
// (after its lock file went, before its rmdir) would keep it alive (ENOTEMPTY), empty.
enum class MakeLock { No, Yes };
Result<unique_fd> lock_dir(int dirfd, const std::string& path, MakeLock make = MakeLock::No,
                           StateStore::Lock how = StateStore::Lock::Exclusive) {
    unique_fd lock(make == MakeLock::Yes ? ::openat(dirfd, kLockFile, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                                         : ::openat(dirfd, kLockFile, O_RDWR | O_CLOEXEC));
    if (!lock) {
        if (errno == ENOENT) return fail(ENOENT, "container does not exist");
        return sys_error("open lock in " + path);
    }
    if (how == StateStore::Lock::Force) {
        FB_TRY(lock_ending_a_stuck_holder(lock.get(), path));
        return lock;
    }
    while (::flock(lock.get(), LOCK_EX) < 0) {
        if (errno != EINTR) return sys_error("lock " + path);
    }
    return lock;
}
}  // namespace

// A user's root is private to the user, and sticky as runc's: files in $XDG_RUNTIME_DIR
// without the bit may be cleaned up after six hours (XDG Base Directory spec). Root's lets
// containers' users reach nothing but what they are told the path of.
Result<void> StateStore::ensure_root() const { return mkdir_p(root_, ::geteuid() == 0 ? 0711 : 01700); }

namespace {
// A directory being made: '~' is in no id, so neither list nor open ever takes one for a
// container. The id's head only helps whoever looks (ids may be 1024 bytes, names 255).
std::string staging_name(const std::string& id) { return "~" + random_id_suffix() + "~" + id.substr(0, 200); }

void remove_staging(const std::string& staging) {
    ::unlink((staging + "/" + kLockFile).c_str());
    ::rmdir(staging.c_str());
}
}  // namespace

// The directory is made under a staging name, locked, and only then named after the id
// (RENAME_NOREPLACE): made in place, a `delete --force ID` or any verb could open it before
// its create held the lock, find no state, and remove it under the create.
Result<ContainerDir> StateStore::create(const std::string& id) const {
    FB_TRY(validate_container_id(id));
    FB_TRY(ensure_root());
    ContainerDir dir;
    dir.path_ = root_ + "/" + id;
    std::string staging = root_ + "/" + staging_name(id);
    if (::mkdir(staging.c_str(), 0711) < 0) return sys_error("mkdir " + staging);
    dir.dirfd_.reset(::open(staging.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!dir.dirfd_) {
        int e = errno;
        remove_staging(staging);
        return sys_error(e, "open " + staging);
    }
    auto lock = lock_dir(dir.dirfd_.get(), staging, MakeLock::Yes);
    if (!lock) {
        remove_staging(staging);
        return std::unexpected(lock.error());
    }
    dir.lock_ = std::move(*lock);
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.path_.c_str(), RENAME_NOREPLACE) < 0) {
        int e = errno;
        remove_staging(staging);
        if (e == EINVAL) return create_in_place(id);  // a filesystem without RENAME_NOREPLACE (NFS)
        // ENOTEMPTY: an old kernel's answer for an existing directory.
        if (e == EEXIST || e == ENOTEMPTY) return fail(EEXIST, "container with id exists: " + id);
        return sys_error(e, "rename " + staging + " to " + dir.path_);
    }
    return dir;
}

// The old way, racy against a concurrent open of the id: for filesystems that cannot do better.
Result<ContainerDir> StateStore::create_in_place(const std::string& id) const {
    ContainerDir dir;
    dir.path_ = root_ + "/" + id;
    if (::mkdir(dir.path_.c_str(), 0711) < 0) {
        if (errno == EEXIST) return fail(EEXIST, "container with id exists: " + id);
        return sys_error("mkdir " + dir.path_);
    }
    dir.dirfd_.reset(::open(dir.path_.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!dir.dirfd_) return sys_error("open " + dir.path_);
    FB_ASSIGN(dir.lock_, lock_dir(dir.dirfd_.get(), dir.path_, MakeLock::Yes));
    return dir;
}

void StateStore::remove_stale_staging(int older_than_seconds) const {
    DIR* d = ::opendir(root_.c_str());
    if (!d) return;
    std::vector<std::string> stale;
    struct timespec now;
    ::clock_gettime(CLOCK_REALTIME, &now);
    while (auto* e = ::readdir(d)) {
        if (e->d_name[0] != '~') continue;
        std::string path = root_ + "/" + e->d_name;
        struct stat st;
        // Young ones may belong to a create between its mkdir and its lock.
        if (::lstat(path.c_str(), &st) < 0 || !S_ISDIR(st.st_mode) || now.tv_sec - st.st_mtime < older_than_seconds)
            continue;
        unique_fd lock(::open((path + "/" + kLockFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) < 0) continue;  // its create still runs
        stale.push_back(path);
    }
    ::closedir(d);
    for (const auto& p : stale) remove_staging(p);
}

Result<ContainerDir> StateStore::open(const std::string& id, Lock lock) const {
    FB_TRY(validate_container_id(id));
    ContainerDir dir;
    dir.path_ = root_ + "/" + id;
    dir.dirfd_.reset(::open(dir.path_.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!dir.dirfd_) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
            return fail(ENOENT, "container does not exist");
        return sys_error("open " + dir.path_);
    }
    if (lock != Lock::None) {
        FB_ASSIGN(dir.lock_, lock_dir(dir.dirfd_.get(), dir.path_, MakeLock::No, lock));
    }
    // The directory may have been deleted while we waited for the lock.
    struct stat st;
    if (::fstat(dir.dirfd_.get(), &st) < 0 || st.st_nlink == 0)
        return fail(ENOENT, "container does not exist");
    return dir;
}

Result<std::vector<std::string>> StateStore::list() const {
    std::vector<std::string> ids;
    DIR* d = ::opendir(root_.c_str());
    if (!d) {
        if (errno == ENOENT) return ids;
        return sys_error("open " + root_);
    }
    while (auto* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (e->d_type != DT_DIR || !validate_container_id(n)) continue;  // ".", "..", staging dirs
        ids.push_back(n);
    }
    ::closedir(d);
    std::sort(ids.begin(), ids.end());
    return ids;
}

}  // namespace forkbox
