#include "libforkbox/sandbox/embryo.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/landlock.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/sandbox/tree.hpp"
#include "libforkbox/sandbox/warm.hpp"

namespace forkbox::sandbox {

namespace {

void put(std::string& out, std::string_view s) {
    out.append(s);
    out.push_back('\0');
}

// Reads NUL-terminated strings in order.
class Reader {
public:
    explicit Reader(std::string_view d) : d_(d) {}
    Result<std::string> next() {
        size_t end = d_.find('\0');
        if (end == std::string_view::npos) return fail(EPROTO, "release: truncated");
        std::string s(d_.substr(0, end));
        d_.remove_prefix(end + 1);
        return s;
    }
    Result<uint64_t> number() {
        FB_ASSIGN(std::string s, next());
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return fail(EPROTO, "release: bad number");
        return n;
    }
    bool done() const { return d_.empty(); }

private:
    std::string_view d_;
};

[[noreturn]] void die(int control, std::string_view message) {
    std::string m = "F" + std::string(message);
    ::send(control, m.data(), m.size(), MSG_NOSIGNAL);
    ::_exit(1);
}

Result<void> set_batch_scheduling(bool batch) {
    sched_param none{};
    if (::sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &none) < 0)
        return sys_error(batch ? "SCHED_BATCH" : "SCHED_OTHER");
    return {};
}

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

// What a session needs of the sandbox's tree, kept from the build (tree.hpp).
struct Tree {
    unique_fd stage;  // a non-recursive copy of the stage tmpfs mount
    unique_fd lower;  // the lower layer: the idmapped copy of "/", or the host's "/" as seen here
    TreeContext context;
    Manifest base;
};
Tree tree;

// Bytes in use on the stage tmpfs (the sandbox's writable layer), -1 when unknown.
int64_t stage_used() {
    struct statfs fs;
    if (!tree.stage || ::fstatfs(tree.stage.get(), &fs) < 0) return -1;
    return static_cast<int64_t>((fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize));
}

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

// Everything that does not depend on the root's layers: done once the id maps are written
// ("P"), so that a held embryo (embryo.hpp) has it done before its fork asks for it.
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

// The root ("M"): its layers, the Plan's mounts, then the hardening.
Result<void> build(const EmbryoSetup& s, int lower_tree, int fork_source) {
    const Plan& plan = *s.plan;
    FB_TRY(build_root(s, lower_tree, fork_source));
    if (fork_source >= 0) {
        ::close(fork_source);
        ::send(s.control_fd, "C", 1, MSG_NOSIGNAL);  // copied: the parent may go on
    }

    static const std::vector<std::string> no_cgroup_dirs;  // the sandbox mounts no cgroupfs
    RootfsContext ctx{plan, *s.cgroup_layout, no_cgroup_dirs, true, true};
    ctx.bind_source_trees = &s.bind_source_trees;
    FB_TRY(prepare_rootfs(ctx));
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
    return {};
}

void send_text(int control, const std::string& m) { ::send(control, m.data(), m.size(), MSG_NOSIGNAL); }

[[noreturn]] void exec_failed(int control, int err, std::string_view what) {
    send_text(control, "X" + std::to_string(err) + " " + std::string(what) + ": " + std::strerror(err));
    ::_exit(err == ENOENT ? 127 : 126);
}

// A process started before its request (a warm shell, a warm Python) gets the release's
// rlimits as a command started for it would.
void limit_started(int control, pid_t pid, const Release& r) {
    rlimit nproc{r.nproc_limit, r.nproc_limit}, address{r.address_limit, r.address_limit};
    if (r.nproc_limit && ::prlimit(pid, RLIMIT_NPROC, &nproc, nullptr) < 0) exec_failed(control, errno, "RLIMIT_NPROC");
    if (r.address_limit && ::prlimit(pid, RLIMIT_AS, &address, nullptr) < 0) exec_failed(control, errno, "RLIMIT_AS");
}

// Set by the vfork child (which shares our memory) when its execve failed.
volatile int exec_errno = 0;

// The daemon's deadline (SIGUSR1): every process of the sandbox but this one is killed,
// the command's end is reported as usual ("W"), and this process's own teardown comes
// after the reply instead of before it. An init ignores signals it has no handler for, so
// before the handler is there the daemon's fallback, SIGKILL, does it.
void kill_the_sandbox(int) { ::kill(-1, SIGKILL); }

// A command, ready to exec: everything the vfork child needs is made before it, because
// between vfork and execve it only makes syscalls.
struct Command {
    std::vector<char*> argv, envp;
    std::vector<std::string> candidates;  // where argv[0] may be, in PATH order
    rlimit address{};
    bool limit_address = false;
    const char* cwd = nullptr;  // a session's run changes directory in the child
    bool own_group = false;     // a session's run leads a process group of its own
    bool batch = false;         // starts SCHED_BATCH: a warm shell, made while others run
    int script_fd = -1;         // a warm shell's script pipe, its fd 3 (above 2 already)
    sigset_t mask{};
};

Command prepare(const Release& r) {
    Command c;
    for (const auto& a : r.argv) c.argv.push_back(const_cast<char*>(a.c_str()));
    c.argv.push_back(nullptr);
    for (const auto& e : r.env) c.envp.push_back(const_cast<char*>(e.c_str()));
    c.envp.push_back(nullptr);
    const std::string& file = r.argv[0];
    if (file.find('/') != std::string::npos) {
        c.candidates.push_back(file);
    } else {
        // PATH of the command's environment, as a shell would search it.
        std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        for (const auto& e : r.env)
            if (e.starts_with("PATH=")) path = e.substr(5);
        size_t start = 0;
        while (start <= path.size()) {
            size_t end = path.find(':', start);
            if (end == std::string::npos) end = path.size();
            std::string dir = path.substr(start, end - start);
            c.candidates.push_back((dir.empty() ? "." : dir) + "/" + file);
            start = end + 1;
        }
    }
    c.address = rlimit{r.address_limit, r.address_limit};
    c.limit_address = r.address_limit != 0;
    sigemptyset(&c.mask);
    return c;
}

// vforks and execs `c` with `stdio`; the child's exec failure is in exec_errno (0: it ran).
pid_t spawn(const Command& c, const int* stdio) {
    exec_errno = 0;
    pid_t pid = ::vfork();
    if (pid != 0) return pid;
    if (c.own_group) ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &c.mask, nullptr);
    if (c.cwd && ::chdir(c.cwd) < 0) {
        exec_errno = errno;
        ::_exit(errno == ENOENT ? 127 : 126);
    }
    for (int i = 0; i < 3; ++i)
        if (::dup2(stdio[i], i) < 0) {
            exec_errno = errno;
            ::_exit(126);
        }
    if (c.script_fd >= 0 && ::dup2(c.script_fd, 3) < 0) {
        exec_errno = errno;
        ::_exit(126);
    }
    if (c.batch) {
        sched_param none{};
        ::sched_setscheduler(0, SCHED_BATCH, &none);
    }
    // The address-space limit binds the command, not this process.
    if (c.limit_address && ::setrlimit(RLIMIT_AS, &c.address) < 0) {
        exec_errno = errno;
        ::_exit(126);
    }
    int err = ENOENT;
    for (const auto& candidate : c.candidates) {
        ::execve(candidate.c_str(), c.argv.data(), c.envp.data());
        if (errno != ENOENT && errno != ENOTDIR) err = errno;
    }
    exec_errno = err;
    ::_exit(err == ENOENT ? 127 : 126);
}

// Now on the service's steady clock, in ns (a sandbox has no time namespace): when a command
// ended, as its end report says, so duration_ms does not count the report's trip.
std::string monotonic_ns_text() {
    auto now = std::chrono::steady_clock::now().time_since_epoch();
    return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

std::string usage_text(int status, const rusage& usage) {
    return std::to_string(status) + " " + std::to_string(usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec) + " " +
           std::to_string(usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec) + " " + std::to_string(usage.ru_maxrss);
}

Result<void> drop_every_capability() {
    FB_TRY(drop_bounding_set(0));
    return apply_capabilities(CapabilitySets{});
}

// Waits for the command (reaping what gets orphaned meanwhile), reports its status and
// usage ("W"), and exits: the kernel then kills whatever else runs in the sandbox.
[[noreturn]] void report_end(int control, pid_t command, int64_t used_before) {
    int status = 0;
    rusage usage{};
    for (;;) {
        pid_t p = ::wait4(-1, &status, 0, &usage);
        if (p == command) break;
        if (p < 0 && errno != EINTR) ::_exit(1);
    }
    std::string reaped_at = monotonic_ns_text();
    trace::mark("embryo: command reaped");
    int64_t used = stage_used();
    send_text(control, "W" + usage_text(status, usage) + " " +
                           std::to_string(used >= 0 && used_before >= 0 ? used - used_before : 0) + " " + reaped_at);
    // The command's code as ours too, for a daemon that reaps us before reading "W".
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

// --- a warm shell ---

// Most of a short shell line's run is the shell's own start (exec, the loader, libc's
// start-up: ~0.5 ms here, in a sandbox or not). So a pooled embryo starts its shell while it
// waits for a request: `/bin/sh -c '. /dev/fd/3'` (as SCHED_BATCH) blocks reading a script
// from a pipe, and a release that fits it is written there as `exec 3<&-; eval 'LINE'`.
// Only a dash: it runs a -c line as eval runs one (each command in a child, its last one
// too, so exit codes and signals read the same); a bash or busybox sh execs the last
// command itself. What differs: the shell's command line, and "eval: " in the shell's own
// messages ("/bin/sh: 1: eval: nosuch: not found").
struct WarmShell {
    pid_t pid = -1;
    unique_fd script;     // the write end of its fd 3
    unique_fd output[2];  // a session's: our copies of its stdout and stderr, for a run it
                          // does not take (or that finds it dead) in its place
};
WarmShell warm_shell;

bool shell_is_dash() {
    char resolved[PATH_MAX];
    if (!::realpath("/bin/sh", resolved)) return false;
    std::string_view path(resolved);
    return path.substr(path.rfind('/') + 1) == "dash";
}

// Started when the embryo gets its output pipes ("N"), with stdin /dev/null; a session's
// leads a process group of its own and has the session's address-space limit, as its runs.
void start_warm_shell(int out, int err, bool own_group, uint64_t address_limit) {
    if (!shell_is_dash()) return;
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) < 0) return;
    unique_fd read_end(ends[0]), write_end(ends[1]);
    unique_fd script_in(::fcntl(read_end.get(), F_DUPFD_CLOEXEC, 10));  // clear of 0-3 in the child
    unique_fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));            // as the daemon's
    if (!script_in || !null) return;
    Release r;
    r.argv = {"/bin/sh", "-c", ::access("/dev/fd/3", F_OK) == 0 || errno != ENOENT ? ". /dev/fd/3" : ". /proc/self/fd/3"};
    r.env = kDefaultEnv;
    Command c = prepare(r);
    c.cwd = "/";
    c.batch = true;
    c.own_group = own_group;
    c.limit_address = address_limit != 0;
    c.address = rlimit{address_limit, address_limit};
    c.script_fd = script_in.get();
    int stdio[3] = {null.get(), out, err};
    mode_t umask_before = ::umask(022);  // a login's, as run() sets
    pid_t pid = spawn(c, stdio);
    ::umask(umask_before);
    if (pid < 0) return;
    if (exec_errno) {
        ::waitpid(pid, nullptr, 0);
        return;
    }
    warm_shell.pid = pid;
    warm_shell.script = std::move(write_end);
}

// Killed, and reaped by the caller's wait for its command, or now (`reap`).
void drop_warm_shell(bool reap) {
    if (warm_shell.pid < 0) return;
    ::kill(warm_shell.pid, SIGKILL);
    if (reap) ::waitpid(warm_shell.pid, nullptr, 0);
    warm_shell.pid = -1;
    warm_shell.script.reset();
}

bool is_dev_null(int fd) {
    struct stat st{};
    return ::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

// `/bin/sh -c LINE`, with no positional parameters: the warm shell's own $0 and $#.
bool is_shell_line(const std::vector<std::string>& argv) {
    return argv.size() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c";
}

// For a release the warm shell runs exactly as `/bin/sh -c LINE` would (with every
// capability the embryo has), what makes its environment (warm_shell_environment).
std::optional<std::string> fits_warm_shell(const Release& r, int stdin_fd) {
    if (warm_shell.pid < 0 || r.warm_python || r.drop_all_caps || !is_dev_null(stdin_fd)) return std::nullopt;
    if (!is_shell_line(r.argv)) return std::nullopt;
    return warm_shell_environment(r.env);
}

std::string single_quoted(std::string_view text) {
    std::string out = "'";
    for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return out + "'";
}

// The line to the warm shell, which is then the command's: its pid, or -1 (errno) when it
// died before it could read it (an init ignores the SIGPIPE it has no handler for: EPIPE).
// In another environment, it makes that first (`environment`, from fits_warm_shell); in
// another cwd than its own ("/"), or after PWD was unset, it changes there, physically
// (`cd -P`), as a shell started there has its PWD from getcwd() and no OLDPWD; the caller
// has checked that it can.
pid_t give_line(const std::string& line, const std::string& environment, const std::string& cwd) {
    pid_t pid = warm_shell.pid;
    sched_param none{};
    ::sched_setscheduler(pid, SCHED_OTHER, &none);
    ::kill(pid, SIGCONT);  // a session's run may have stopped everyone else (kill -STOP -1)
    std::string script = "exec 3<&-; " + environment;
    if (cwd != "/" || !environment.empty()) script += "cd -P -- " + single_quoted(cwd) + " || exit; unset OLDPWD; ";
    script += "eval " + single_quoted(line) + "\n";
    std::string_view rest(script);
    while (!rest.empty()) {
        ssize_t n = ::write(warm_shell.script.get(), rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EPIPE;
            drop_warm_shell(false);
            errno = err;
            return -1;
        }
        rest.remove_prefix(static_cast<size_t>(n));
    }
    warm_shell.pid = -1;
    warm_shell.script.reset();
    return pid;
}

// The release's line to the warm shell, under the release's limits.
[[noreturn]] void run_in_warm_shell(int control, const Release& r, const std::string& environment, const int* stdio) {
    pid_t pid = warm_shell.pid;
    limit_started(control, pid, r);
    if (::chdir(r.cwd.c_str()) < 0) exec_failed(control, errno, "cwd " + r.cwd);  // as run() reports it
    int64_t used = stage_used();
    if (give_line(r.argv[2], environment, r.cwd) < 0) send_text(control, "X" + std::to_string(errno) + " warm shell: " + std::strerror(errno));
    trace::mark("embryo: spawned");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);
    report_end(control, pid, used);
}

// The sandbox's init from here on: the command runs as its child (pid 2), so it has a
// process's ordinary signal semantics (pid 1 ignores the signals it has no handler for),
// and it execs from a vfork child, without tearing down this process's address space on
// the way. This process reaps what gets orphaned to it, reports the command's status and
// usage ("W"), and exits: the kernel then kills whatever else runs in the sandbox.
[[noreturn]] void run(int control, const Release& r, const int* stdio) {
    ::umask(022);  // a login's, whatever the daemon's is
    if (::chdir(r.cwd.c_str()) < 0) exec_failed(control, errno, "cwd " + r.cwd);
    if (r.nproc_limit) {
        rlimit l{r.nproc_limit, r.nproc_limit};
        if (::setrlimit(RLIMIT_NPROC, &l) < 0) exec_failed(control, errno, "RLIMIT_NPROC");
    }
    drop_warm_shell(false);
    if (r.drop_all_caps && !drop_every_capability()) exec_failed(control, errno, "drop capabilities");
    Command c = prepare(r);
    int64_t used = stage_used();
    pid_t command = spawn(c, stdio);
    int err = errno;
    trace::mark("embryo: spawned");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);  // the pipes end with the command's side
    if (command < 0) exec_failed(control, err, "start the command");
    if (exec_errno) {
        int e = exec_errno;
        send_text(control, "X" + std::to_string(e) + " exec " + r.argv[0] + ": " + std::strerror(e));
    }
    report_end(control, command, used);
}

// --- a warm Python ---

// What both warm Pythons start with: python3 -c SCRIPT FD [MODULE...] imports the modules
// and says "R" on the socket FD (or "F" and why). run() then runs a request (cwd, code and
// the environment, with stdin, stdout and stderr) as `python3 -c CODE` would, in a fresh
// __main__: tracebacks and exit codes are python3's; the program's threads, atexit and
// streams are finished, the interpreter's teardown skipped (the process ends anyway).
constexpr const char* kPythonStart = R"PY(import os, sys, socket
s = socket.socket(fileno=int(sys.argv[1]))
try:
    for m in sys.argv[2:]:
        __import__(m)
except BaseException as e:
    s.send(("Fpreload: %s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")[:4000])
    os._exit(1)
def fds_of(anc):
    return [int.from_bytes(d[i:i + 4], sys.byteorder) for _, _, d in anc for i in range(0, len(d) - 3, 4)]
def run(cwd, code, env, fds):
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
        os.close(fd)
    os.environ.clear()
    for e in env:
        k, _, v = e.partition("=")
        os.environ[k] = v
    os.chdir(cwd)
    main = type(sys)("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        rc = 1
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    import atexit
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            rc = rc or 120
    os._exit(rc & 0xFF)
s.send(b"R")
)PY";

// A sandbox's own warm Python (pid 2): one request, "cwd\0code\0env..." with its stdio.
constexpr const char* kPythonOnce = R"PY(msg, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(12))
s.close()
cwd, code, *env = msg.decode("utf-8", "surrogateescape").split("\0")
run(cwd, code, env, fds_of(anc))
)PY";

// A session's warm Python: a fork per request ("id\0cwd\0code\0env..." with its stdio),
// each a process group of its own; it says "p<id> <pid>" when the request runs and
// "e<id> <wait status> <user us> <system us> <max rss KiB>" when it ended.
constexpr const char* kPythonZygote = R"PY(import select, signal
r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGCHLD, lambda *_: None)
runs = {}
def reap():
    while runs:
        try:
            pid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = runs.pop(pid, None)
        if rid is not None:
            s.send(("e%s %d %d %d %d" % (rid, status, ru.ru_utime * 1e6, ru.ru_stime * 1e6, ru.ru_maxrss)).encode())
while True:
    ready = select.select([s, r], [], [])[0]
    if r in ready:
        while True:
            try:
                os.read(r, 512)
            except BlockingIOError:
                break
        reap()
    if s not in ready:
        continue
    msg, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(12))
    if not msg:
        os._exit(0)
    fds = fds_of(anc)
    rid, cwd, code, *env = msg.decode("utf-8", "surrogateescape").split("\0")
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setpgid(0, 0)
        s.close()
        os.close(r)
        os.close(w)
        run(cwd, code, env, fds)
    for fd in fds:
        os.close(fd)
    runs[pid] = rid
    s.send(("p%s %d" % (rid, pid)).encode())
    reap()
)PY";

struct WarmPython {
    pid_t pid = -1;
    unique_fd socket;
    uint64_t cpu_ns = 0;  // its CPU time when ready: not a request's
};
WarmPython warm_python;  // a sandbox's own (pid 2)

// Starts a warm Python (`script` after kPythonStart) and waits until it has imported its
// modules. `own_group`: a process group of its own (a session's, beside its runs).
Result<WarmPython> start_python(const char* script, const std::vector<std::string>& preload, bool own_group) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
    unique_fd ours(sv[0]), theirs(sv[1]);
    if (::fcntl(theirs.get(), F_SETFD, 0) < 0) return sys_error("fcntl");
    Release r;
    // The script comes in the environment (which each request replaces), so that the
    // sandbox's process list shows a short command line.
    r.argv = {"python3", "-c", "import os; exec(os.environ.pop('FORKBOX_WARM_PYTHON'))", std::to_string(theirs.get())};
    r.argv.insert(r.argv.end(), preload.begin(), preload.end());
    r.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
             "FORKBOX_WARM_PYTHON=" + std::string(kPythonStart) + script};
    Command c = prepare(r);
    c.own_group = own_group;
    unique_fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    int stdio[3] = {null.get(), null.get(), null.get()};
    ::umask(022);
    pid_t pid = spawn(c, stdio);
    if (pid < 0) return sys_error("start python3");
    if (exec_errno) return fail(exec_errno, "exec python3");
    theirs.reset();
    char buf[4096];
    ssize_t n;
    do n = ::recv(ours.get(), buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0 || buf[0] != 'R') {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        if (n > 1 && buf[0] == 'F') return fail(EINVAL, "python3: " + std::string(buf + 1, static_cast<size_t>(n - 1)));
        return fail(EIO, "python3 exited before it was ready");
    }
    WarmPython w;
    w.pid = pid;
    w.socket = std::move(ours);
    if (auto stat = read_file("/proc/" + std::to_string(pid) + "/schedstat")) w.cpu_ns = std::strtoull(stat->c_str(), nullptr, 10);
    return w;
}

// "cwd\0code\0env..." of a python3 -c release.
std::string python_request(const Release& r) {
    std::string m = r.cwd + '\0' + (r.argv.size() > 2 ? r.argv[2] : std::string());
    for (const auto& e : r.env) m += '\0' + e;
    return m;
}

// A request for the sandbox's warm Python: its limits, then the code and stdio are its.
[[noreturn]] void run_warm_python(int control, const Release& r, const int* stdio) {
    pid_t pid = warm_python.pid;
    limit_started(control, pid, r);
    int64_t used = stage_used();
    auto sent = send_with_fds(warm_python.socket.get(), python_request(r), std::span<const int>(stdio, 3), "warm python");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);
    if (!sent) {
        send_text(control, "X" + std::to_string(sent.error().errnum()) + " " + sent.error().what());
        ::kill(pid, SIGKILL);
    }
    warm_python.socket.reset();
    report_end(control, pid, used);
}

// --- sessions ---

// SIGSTOP to every other process of the sandbox, and a wait (bounded) until each is stopped:
// a fork copies a state nobody writes.
void stop_everyone() {
    ::kill(-1, SIGSTOP);
    for (int round = 0; round < 500; ++round) {
        bool all = true;
        DIR* d = ::opendir("/proc");
        while (d && all) {
            dirent* e = ::readdir(d);
            if (!e) break;
            if (e->d_name[0] < '0' || e->d_name[0] > '9' || std::strcmp(e->d_name, "1") == 0) continue;
            auto stat = read_file("/proc/" + std::string(e->d_name) + "/stat");
            if (!stat) continue;
            size_t paren = stat->rfind(')');
            char state = paren != std::string::npos && paren + 2 < stat->size() ? (*stat)[paren + 2] : 'T';
            all = state == 'T' || state == 't' || state == 'Z' || state == 'X';
        }
        if (d) ::closedir(d);
        if (all) return;
        ::usleep(200);
    }
}

// Whether a process of this sandbox is gone or about to: reaped, a zombie, or SIGKILL pending.
bool python_is_going(pid_t pid) {
    auto status = read_file("/proc/" + std::to_string(pid) + "/status");
    if (!status) return true;
    for (std::string_view key : {"State:\t", "SigPnd:\t", "ShdPnd:\t"}) {
        size_t at = status->find(key);
        if (at == std::string::npos) continue;
        std::string_view value = std::string_view(*status).substr(at + key.size());
        if (key[1] == 't') {
            if (value.starts_with('Z') || value.starts_with('X')) return true;
        } else if (std::strtoull(std::string(value.substr(0, 16)).c_str(), nullptr, 16) & (1ULL << (SIGKILL - 1))) {
            return true;
        }
    }
    return false;
}

// A session's init: each run ("G") and file verb ("O") is a new process group of its own
// beside the others; their ends are reported by id ("w", "x"), and the daemon kills one by
// id ("K"). The sandbox ends when the daemon kills this process.
[[noreturn]] void session_loop(int control, const Release& limits) {
    ::umask(022);
    if (limits.nproc_limit) {
        rlimit l{limits.nproc_limit, limits.nproc_limit};
        ::setrlimit(RLIMIT_NPROC, &l);
    }
    if (limits.drop_all_caps && !drop_every_capability()) ::_exit(1);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    unique_fd children(::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!children) ::_exit(1);
    std::map<pid_t, uint64_t> leaders;  // a run's first process -> its id
    std::map<uint64_t, pid_t> groups;   // a run's id -> its process group
    std::map<uint64_t, int64_t> used_at_start;  // a run's id -> stage_used() when it began
    // Warm Pythons, one per preload list, started by the first run that asks; their runs are
    // their children, whose ends they report.
    std::map<std::vector<std::string>, WarmPython> pythons;
    std::map<uint64_t, pid_t> python_runs;  // a run's id -> the warm Python running it
    std::map<uint64_t, int> pending_kills;  // "K" before the warm Python said the run's pid
    auto ended = [&](uint64_t id, const std::string& usage) {
        python_runs.erase(id);
        pending_kills.erase(id);
        std::string ended_at = monotonic_ns_text();
        int64_t before = used_at_start.count(id) ? used_at_start[id] : -1, now = stage_used();
        send_text(control, "w" + std::to_string(id) + " " + usage + " " +
                               std::to_string(before >= 0 && now >= 0 ? now - before : 0) + " " + ended_at);
        used_at_start.erase(id);
        groups.erase(id);
    };
    // A warm Python that died (or was killed): the next run starts another. Its runs still
    // alive are this process's children now (it is the namespace's reaper): reaped as
    // leaders; the others ended with it.
    auto python_gone = [&](std::map<std::vector<std::string>, WarmPython>::iterator it) {
        pid_t zygote = it->second.pid;
        std::vector<uint64_t> orphaned;
        for (auto& [id, z] : python_runs)
            if (z == zygote) orphaned.push_back(id);
        for (uint64_t id : orphaned) {
            auto g = groups.find(id);
            if (g != groups.end() && ::kill(g->second, 0) == 0) {
                leaders[g->second] = id;
                python_runs.erase(id);
            } else {
                ended(id, std::to_string(SIGKILL) + " 0 0 0");
            }
        }
        ::kill(zygote, SIGKILL);
        return pythons.erase(it);
    };
    std::string buf = receive_buffer(kReleaseBufferBytes);
    for (;;) {
        std::vector<pollfd> p = {{control, POLLIN, 0}, {children.get(), POLLIN, 0}};
        for (auto& [key, py] : pythons) p.push_back({py.socket.get(), POLLIN, 0});
        if (::poll(p.data(), p.size(), -1) < 0) {
            if (errno == EINTR) continue;
            ::_exit(1);
        }
        if (p[1].revents) {
            signalfd_siginfo si;
            while (::read(children.get(), &si, sizeof si) == sizeof si) {
            }
            int status;
            rusage usage{};
            pid_t pid;
            while ((pid = ::wait4(-1, &status, WNOHANG, &usage)) > 0) {
                if (pid == warm_shell.pid) {  // killed by a run: its pipes serve the next run
                    warm_shell.pid = -1;
                    warm_shell.script.reset();
                }
                auto it = leaders.find(pid);
                if (it == leaders.end()) continue;  // an orphan, or a warm Python
                trace::mark("embryo: session run reaped");
                ended(it->second, usage_text(status, usage));
                leaders.erase(it);
            }
        }
        size_t at = 2;
        for (auto it = pythons.begin(); it != pythons.end(); ++at) {
            if (!p[at].revents) {
                ++it;
                continue;
            }
            char msg[512];
            ssize_t n = ::recv(it->second.socket.get(), msg, sizeof msg - 1, MSG_DONTWAIT);
            if (n < 0 && errno == EAGAIN) {
                ++it;
                continue;
            }
            if (n <= 0) {
                it = python_gone(it);
                continue;
            }
            msg[n] = '\0';
            unsigned long long id = 0;
            long long a = 0, b = 0, c = 0, d = 0;
            if (msg[0] == 'p' && std::sscanf(msg + 1, "%llu %lld", &id, &a) == 2 && python_runs.count(id)) {
                groups[id] = static_cast<pid_t>(a);  // the run's process group, for "K"
                if (auto k = pending_kills.find(id); k != pending_kills.end()) {
                    ::kill(-static_cast<pid_t>(a), k->second);
                    pending_kills.erase(k);
                }
            } else if (msg[0] == 'e' && std::sscanf(msg + 1, "%llu %lld %lld %lld %lld", &id, &a, &b, &c, &d) == 5) {
                ended(id, std::to_string(a) + " " + std::to_string(b) + " " + std::to_string(c) + " " + std::to_string(d));
            }
            ++it;
        }
        if (!p[0].revents) continue;
        std::vector<unique_fd> fds;
        auto n = receive_message(control, buf, fds, "sandbox control");
        if (!n || *n == 0) ::_exit(0);  // the daemon is gone: so is the sandbox
        std::string_view m(buf.data(), *n);
        char tag = m.front();
        m.remove_prefix(1);
        uint64_t id = std::strtoull(std::string(m.substr(0, 24)).c_str(), nullptr, 10);
        size_t nl = m.find('\n');
        std::string_view body = nl == std::string_view::npos ? std::string_view{} : m.substr(nl + 1);
        if (tag == 'K') {
            int sig = static_cast<int>(std::strtol(std::string(m.substr(m.find(' ') + 1, 8)).c_str(), nullptr, 10));
            if (sig <= 0 || sig >= 65) continue;
            if (auto g = groups.find(id); g != groups.end()) {
                ::kill(-g->second, sig);
            } else if (python_runs.count(id)) {
                pending_kills[id] = sig;
            }
            continue;
        }
        if (tag == 'S') {
            stop_everyone();
            send_text(control, "s");
            continue;
        }
        if (tag == 'T') {
            ::kill(-1, SIGCONT);
            send_text(control, "t");
            continue;
        }
        if (tag == 'N' && fds.size() == 2) {  // the next warm shell's pipes
            drop_warm_shell(true);
            warm_shell.output[0] = std::move(fds[0]);
            warm_shell.output[1] = std::move(fds[1]);
            start_warm_shell(warm_shell.output[0].get(), warm_shell.output[1].get(), true, limits.address_limit);
            continue;
        }
        // A line for the warm shell comes with stdin alone: its output is the "N" pipes'.
        bool line = tag == 'G' && fds.size() == 1 && warm_shell.output[0] && warm_shell.output[1];
        if (line) {
            fds.push_back(std::move(warm_shell.output[0]));
            fds.push_back(std::move(warm_shell.output[1]));
        }
        if (tag != 'G' && tag != 'O') continue;
        if (fds.size() != 3) {  // never from our daemon: said, so that the run does not wait for its deadline
            send_text(control, "x" + std::to_string(id) + " " + std::to_string(EPROTO) + " the run's stdio is missing");
            send_text(control, "w" + std::to_string(id) + " " + std::to_string(126 << 8) + " 0 0 0 0");
            continue;
        }
        trace::mark("embryo: session run received");
        int stdio[3] = {fds[0].get(), fds[1].get(), fds[2].get()};
        pid_t pid = -1;
        if (tag == 'G') {
            auto release = Release::decode(body);
            if (!release) {
                send_text(control, "x" + std::to_string(id) + " " + std::to_string(EPROTO) + " the release is malformed");
                continue;
            }
            if (release->warm_python) {
                auto py = pythons.find(release->preload);
                // Killed a moment ago (by a run of this sandbox, say) but not yet seen to go:
                // not given this run, which it would never start.
                if (py != pythons.end() && python_is_going(py->second.pid)) {
                    python_gone(py);
                    py = pythons.end();
                }
                if (py == pythons.end()) {
                    auto started = start_python(kPythonZygote, release->preload, true);
                    if (!started) {
                        std::string why = "a warm Python: " + started.error().what();
                        send_text(control, "x" + std::to_string(id) + " " + std::to_string(started.error().errnum()) + " " + why);
                        ::write(stdio[2], (why + "\n").data(), why.size() + 1);
                        send_text(control, "w" + std::to_string(id) + " " + std::to_string(1 << 8) + " 0 0 0 0");
                        continue;
                    }
                    py = pythons.emplace(release->preload, std::move(*started)).first;
                }
                used_at_start[id] = stage_used();
                python_runs[id] = py->second.pid;
                auto sent = send_with_fds(py->second.socket.get(), std::to_string(id) + '\0' + python_request(*release),
                                          std::span<const int>(stdio, 3), "warm python");
                if (!sent) ended(id, std::to_string(SIGKILL) + " 0 0 0");
                continue;
            }
            // A cwd that is not a directory it may enter is reported as a command's is.
            struct stat cwd{};
            bool enterable = ::stat(release->cwd.c_str(), &cwd) == 0 && S_ISDIR(cwd.st_mode) &&
                             ::access(release->cwd.c_str(), X_OK) == 0;
            auto environment = line && enterable ? fits_warm_shell(*release, stdio[0]) : std::nullopt;
            if (environment) {
                used_at_start[id] = stage_used();
                pid = give_line(release->argv[2], *environment, release->cwd);
                trace::mark("embryo: session run spawned");
                if (pid > 0) {
                    leaders[pid] = id;
                    groups[id] = pid;
                    continue;
                }
            }
            if (line) drop_warm_shell(false);  // its pipes are this run's
            Command c = prepare(*release);
            c.cwd = release->cwd.c_str();
            c.own_group = true;
            c.limit_address = limits.address_limit != 0;
            c.address = rlimit{limits.address_limit, limits.address_limit};
            pid = spawn(c, stdio);
            trace::mark("embryo: session run spawned");
            if (pid > 0 && exec_errno) {
                int e = exec_errno;
                std::string what = e == ENOENT && ::access(release->cwd.c_str(), F_OK) < 0 ? "cwd " + release->cwd
                                                                                           : "exec " + release->argv[0];
                send_text(control, "x" + std::to_string(id) + " " + std::to_string(e) + " " + what + ": " + std::strerror(e));
            }
        } else {
            auto request = FileRequest::decode(body);
            pid = request ? ::fork() : -1;
            if (pid == 0) {
                ::setpgid(0, 0);
                ::close(control);
                sigset_t none;
                sigemptyset(&none);
                ::sigprocmask(SIG_SETMASK, &none, nullptr);
                ::_exit(run_file_op(*request, stdio[0], stdio[1], stdio[2], tree.context));
            }
        }
        if (pid < 0) {
            send_text(control, "x" + std::to_string(id) + " " + std::to_string(errno) + " start: " + std::strerror(errno));
            send_text(control, "w" + std::to_string(id) + " " + std::to_string(126 << 8) + " 0 0 0 0");
            continue;
        }
        leaders[pid] = id;
        groups[id] = pid;
        used_at_start[id] = stage_used();
    }
}

}  // namespace

bool takes_warm_shell(const std::vector<std::string>& argv, const std::vector<std::string>& env, bool has_stdin) {
    return !has_stdin && is_shell_line(argv) && warm_shell_environment(env);
}

std::optional<std::string> warm_shell_environment(const std::vector<std::string>& env) {
    if (env == kDefaultEnv) return std::string();
    static const std::set<std::string_view> kSetByDash = {"IFS", "PPID", "OPTIND", "LINENO", "PWD", "OLDPWD", "PS1",
                                                          "PS2", "PS4", "ENV", "MAIL", "MAILPATH", "MAILCHECK",
                                                          "HISTSIZE", "ATTY", "TERMCAP"};
    std::set<std::string> names;
    std::string exports;
    for (const auto& entry : env) {
        size_t eq = entry.find('=');
        if (eq == std::string::npos) return std::nullopt;
        std::string name = entry.substr(0, eq);
        bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                          std::all_of(name.begin(), name.end(), [](char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); });
        if (!identifier || kSetByDash.count(name) || !names.insert(name).second) return std::nullopt;
        exports += " " + name + "=" + single_quoted(std::string_view(entry).substr(eq + 1));
    }
    std::string unset = "unset";
    for (const auto& entry : kDefaultEnv) unset += " " + entry.substr(0, entry.find('='));
    return unset + " PWD;" + (exports.empty() ? std::string() : " export" + exports + ";") + " ";
}

std::string Release::encode() const {
    std::string out;
    put(out, cwd);
    put(out, std::to_string(nproc_limit));
    put(out, std::to_string(address_limit));
    put(out, drop_all_caps ? "1" : "0");
    put(out, warm_python ? "1" : "0");
    std::string modules;  // module names have no comma
    for (const auto& m : preload) modules += (modules.empty() ? "" : ",") + m;
    put(out, modules);
    put(out, std::to_string(argv.size()));
    for (const auto& a : argv) put(out, a);
    for (const auto& e : env) put(out, e);
    return out;
}

Result<Release> Release::decode(std::string_view data) {
    Reader in(data);
    Release r;
    FB_ASSIGN(r.cwd, in.next());
    FB_ASSIGN(r.nproc_limit, in.number());
    FB_ASSIGN(r.address_limit, in.number());
    FB_ASSIGN(uint64_t drop, in.number());
    r.drop_all_caps = drop != 0;
    FB_ASSIGN(uint64_t python, in.number());
    r.warm_python = python != 0;
    FB_ASSIGN(std::string modules, in.next());
    for (size_t start = 0; start < modules.size();) {
        size_t end = std::min(modules.find(',', start), modules.size());
        if (end == start || end + 1 == modules.size()) return fail(EPROTO, "release: an empty module name");
        r.preload.push_back(modules.substr(start, end - start));
        start = end + 1;
    }
    FB_ASSIGN(uint64_t argc, in.number());
    if (argc == 0 || argc > data.size()) return fail(EPROTO, "release: bad argc");
    for (uint64_t i = 0; i < argc; ++i) {
        FB_ASSIGN(std::string a, in.next());
        r.argv.push_back(std::move(a));
    }
    while (!in.done()) {
        FB_ASSIGN(std::string e, in.next());
        r.env.push_back(std::move(e));
    }
    return r;
}

void embryo_main(const EmbryoSetup& s) {
    int control = s.control_fd;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The daemon's signal mask (signalfd) must not reach the command.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The dispositions are the builder's, reset once when it started (builder.cpp).
    // Built in the background, never by preempting whoever woke us: the service sending a
    // held embryo its "M" (a fork of 8 sent its children one per preemption), a command
    // a pool refill would otherwise interrupt. A SCHED_BATCH wakee does not preempt.
    if (auto batch = set_batch_scheduling(true); !batch) die(control, batch.error().what());
    struct sigaction deadline {};
    deadline.sa_handler = kill_the_sandbox;
    deadline.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &deadline, nullptr);

    std::string buf = receive_buffer(kReleaseBufferBytes);
    std::vector<unique_fd> fds;
    auto n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n == 0 || buf[0] != 'P') ::_exit(1);  // the daemon gave up on us
    if (auto entered = enter_namespaces(s); !entered) die(control, entered.error().what());
    n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n == 0 || buf[0] != 'M') ::_exit(1);
    // Not dumpable: the sandbox's processes share this one's credentials, and must not
    // reach its memory or fds (/proc/1/mem, /proc/1/fd) where the daemon's socket is.
    // Only now: a user's builder writes our id maps through /proc, which a process that
    // is not dumpable closes to it.
    ::prctl(PR_SET_DUMPABLE, 0);
    // "M" [L: the lower layer] [F: a fork's parent stage], the fds in that order.
    std::string_view flags(buf.data() + 1, *n - 1);
    size_t next = 0;
    int lower = flags.find('L') != std::string_view::npos && next < fds.size() ? fds[next++].release() : -1;
    int fork_source = flags.find('F') != std::string_view::npos && next < fds.size() ? fds[next++].release() : -1;
    auto built = build(s, lower, fork_source);
    if (!built) die(control, built.error().what());
    std::string ready = "R";
    if (s.kind && s.kind->python) {
        auto python = start_python(kPythonOnce, s.kind->preload, false);
        if (!python) die(control, "a warm Python: " + python.error().what());
        warm_python = std::move(*python);
        ready += " " + std::to_string(warm_python.cpu_ns);
    }
    if (::send(control, ready.data(), ready.size(), MSG_NOSIGNAL) < 0) ::_exit(1);

    fds.clear();
    n = receive_message(control, buf, fds, "sandbox control");
    // "N": our command's stdout and stderr, made while we wait in a pool; the release then
    // carries stdin alone.
    unique_fd output[2];
    if (n && *n == 1 && buf[0] == 'N' && fds.size() == 2) {
        output[0] = std::move(fds[0]);
        output[1] = std::move(fds[1]);
        fds.clear();
        if (s.warm_shell && (!s.kind || !s.kind->python)) start_warm_shell(output[0].get(), output[1].get(), false, 0);
        n = receive_message(control, buf, fds, "sandbox control");
    }
    if (!n || *n < 1) ::_exit(1);
    if (buf[0] == 'L') {
        drop_warm_shell(true);
        output[0].reset();  // a session's runs have pipes of their own
        output[1].reset();
        // A session: its limits, then its state as it begins (a diff's base) and "l" with
        // the stage, which the daemon keeps for forks.
        Release limits;
        unsigned long long nproc = 0, address = 0;
        int drop = 0;
        if (std::sscanf(std::string(buf.data() + 1, *n - 1).c_str(), "%llu %llu %d", &nproc, &address, &drop) != 3) ::_exit(1);
        limits.nproc_limit = nproc;
        limits.address_limit = address;
        limits.drop_all_caps = drop != 0;
        tree.context.stage_fd = tree.stage.get();
        tree.context.lower_fd = tree.lower.get();
        tree.base = take_manifest(tree.context);
        tree.context.base = &tree.base;
        int stage = tree.stage.get();
        if (!send_with_fds(control, "l", std::span<const int>(&stage, 1), "sandbox control")) ::_exit(1);
        session_loop(control, limits);
    }
    if (fds.size() == 1 && output[0] && output[1]) {
        fds.push_back(std::move(output[0]));
        fds.push_back(std::move(output[1]));
    }
    if (*n <= 1 || buf[0] != 'G' || fds.size() != 3) ::_exit(1);
    trace::mark("embryo: released");
    tree.lower.reset();  // a one-shot run keeps only the stage open (its tmpfs's usage)
    auto release = Release::decode(std::string_view(buf.data() + 1, *n - 1));
    if (!release) exec_failed(control, EPROTO, "release");
    int stdio[3] = {fds[0].release(), fds[1].release(), fds[2].release()};
    if (release->warm_python && warm_python.pid > 0) run_warm_python(control, *release, stdio);
    if (auto environment = fits_warm_shell(*release, stdio[0])) run_in_warm_shell(control, *release, *environment, stdio);
    run(control, *release, stdio);
}

}  // namespace forkbox::sandbox
