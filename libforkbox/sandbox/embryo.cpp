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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/process/signals.hpp"

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
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return fail(EPROTO, "release: bad number");
        return std::stoull(s);
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

// A user's sandbox (no lower layer from the daemon): in a user namespace the host's root
// cannot be one overlay layer, because the mounts on it are locked to it. Each top-level
// directory without mounts below it becomes an overlay of its own (lowerdir=/usr...), a
// directory with mounts below a read-only recursive bind, a symlink a symlink.
Result<void> build_root_per_directory(const std::string& st, const std::string& root) {
    std::vector<std::string> mounts = mount_points();
    // Replaced by the Plan's own mounts, or hidden by them.
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
            continue;
        }
        if (!S_ISDIR(st_buf.st_mode)) continue;
        FB_TRY(check(::mkdir(target.c_str(), st_buf.st_mode & 07777) == 0, "mkdir " + target));
        if (std::find(kPlanned.begin(), kPlanned.end(), name) != kPlanned.end()) continue;
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
        std::string upper = st + "/upper/" + name, work = st + "/work/" + name;
        FB_TRY(check(::mkdir(upper.c_str(), 0755) == 0 && ::mkdir(work.c_str(), 0755) == 0, "mkdir " + upper));
        std::string options = "lowerdir=" + host + ",upperdir=" + upper + ",workdir=" + work + ",userxattr";
        FB_TRY(check(::mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) == 0,
                     "mount an overlay of " + host));
    }
    return {};
}

// The sandbox's root: a tmpfs on the stage directory holding the overlay's upper and work
// directories and the lower layer's mount point, and the overlay on <stage>/root.
Result<void> build_root(const EmbryoSetup& s, int lower_tree) {
    const std::string& st = s.stage;
    FB_TRY(check(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private"));
    std::string size = "size=" + std::to_string(s.upper_size_mb) + "m,mode=755";
    FB_TRY(check(::mount("sandbox", st.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) == 0, "mount the stage tmpfs"));
    for (const char* d : {"/upper", "/work", "/lower", "/root"})
        FB_TRY(check(::mkdir((st + d).c_str(), 0755) == 0, "mkdir " + st + d));
    std::string lower = st + "/lower";
    if (lower_tree >= 0) {
        // The daemon's idmapped copy of "/": the host's root-owned files are the sandbox
        // root's, as seen from inside.
        FB_TRY(check(::syscall(SYS_move_mount, lower_tree, "", AT_FDCWD, lower.c_str(), MOVE_MOUNT_F_EMPTY_PATH) == 0,
                     "attach the lower layer"));
        ::close(lower_tree);
    } else {
        return build_root_per_directory(st, st + "/root");
    }
    FB_TRY(check(::mount(nullptr, lower.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0,
                 "make the lower layer read-only"));
    std::string options = "lowerdir=" + lower + ",upperdir=" + st + "/upper,workdir=" + st + "/work";
    // In a user namespace overlayfs keeps its metadata in user.* xattrs (tmpfs has them).
    std::string root = st + "/root";
    if (::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, (options + ",userxattr").c_str()) < 0 &&
        ::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) < 0)
        return sys_error("mount the overlay");
    return {};
}

Result<void> build(const EmbryoSetup& s, int lower_tree) {
    const Plan& plan = *s.plan;
    FB_TRY_CTX(join_v1_cgroups(s.cgroup_task_fds), "sandbox cgroups");
    FB_TRY(check(::setresgid(0, 0, 0) == 0, "setresgid 0"));
    if (s.mapped_range) FB_TRY(check(::setgroups(0, nullptr) == 0, "setgroups"));
    FB_TRY(check(::setresuid(0, 0, 0) == 0, "setresuid 0"));
    int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
    bool own_network = (plan.new_namespaces & CLONE_NEWNET) != 0;
    if (own_network) flags |= CLONE_NEWNET;
    FB_TRY(check(::unshare(flags) == 0, "unshare namespaces"));
    if (own_network) FB_TRY(bring_up_loopback());
    FB_TRY(set_hostname(plan.hostname));
    FB_TRY(build_root(s, lower_tree));

    static const std::vector<std::string> no_cgroup_dirs;  // the sandbox mounts no cgroupfs
    RootfsContext ctx{plan, *s.cgroup_layout, no_cgroup_dirs, true, true};
    ctx.bind_source_trees = &s.bind_source_trees;
    FB_TRY(prepare_rootfs(ctx));
    for (int fd : s.bind_source_trees)
        if (fd >= 0) ::close(fd);
    FB_TRY(enter_rootfs(plan.rootfs, false));
    FB_TRY(finalize_rootfs(ctx));

    // Hardening, in the order the kernel needs: the bounding set (needs CAP_SETPCAP), the
    // other sets, no_new_privs, then the filter (which allows what the release still does).
    FB_ASSIGN(CapabilitySets caps, capability_sets(*plan.process.capabilities));
    FB_TRY(drop_bounding_set(caps.bounding));
    FB_TRY(apply_capabilities(caps));
    FB_TRY(check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs"));
    FB_TRY(load_seccomp(*s.seccomp));
    return {};
}

void send_text(int control, const std::string& m) { ::send(control, m.data(), m.size(), MSG_NOSIGNAL); }

[[noreturn]] void exec_failed(int control, int err, std::string_view what) {
    send_text(control, "X" + std::to_string(err) + " " + std::string(what) + ": " + std::strerror(err));
    ::_exit(err == ENOENT ? 127 : 126);
}

// Set by the vfork child (which shares our memory) when its execve failed.
volatile int exec_errno = 0;

// The daemon's deadline (SIGUSR1): every process of the sandbox but this one is killed,
// the command's end is reported as usual ("W"), and this process's own teardown comes
// after the reply instead of before it. An init ignores signals it has no handler for, so
// before the handler is there the daemon's fallback, SIGKILL, does it.
void kill_the_sandbox(int) { ::kill(-1, SIGKILL); }

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
    if (r.drop_all_caps) {
        if (!drop_bounding_set(0) || !apply_capabilities(CapabilitySets{})) exec_failed(control, errno, "drop capabilities");
    }
    // Everything the child needs is made here: between vfork and execve it only makes syscalls.
    std::vector<char*> argv, envp;
    for (const auto& a : r.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : r.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    std::vector<std::string> candidates;
    const std::string& file = r.argv[0];
    if (file.find('/') != std::string::npos) {
        candidates.push_back(file);
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
            candidates.push_back((dir.empty() ? "." : dir) + "/" + file);
            start = end + 1;
        }
    }
    rlimit address{r.address_limit, r.address_limit};
    pid_t command = ::vfork();
    if (command == 0) {
        for (int i = 0; i < 3; ++i)
            if (::dup2(stdio[i], i) < 0) {
                exec_errno = errno;
                ::_exit(126);
            }
        // The address-space limit binds the command, not this process.
        if (r.address_limit && ::setrlimit(RLIMIT_AS, &address) < 0) {
            exec_errno = errno;
            ::_exit(126);
        }
        int err = ENOENT;
        for (const auto& c : candidates) {
            ::execve(c.c_str(), argv.data(), envp.data());
            if (errno != ENOENT && errno != ENOTDIR) err = errno;
        }
        exec_errno = err;
        ::_exit(err == ENOENT ? 127 : 126);
    }
    int err = errno;
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);  // the pipes end with the command's side
    if (command < 0) exec_failed(control, err, "start the command");
    if (exec_errno) {
        int e = exec_errno;
        send_text(control, "X" + std::to_string(e) + " exec " + file + ": " + std::strerror(e));
    }
    int status = 0;
    rusage usage{};
    for (;;) {
        pid_t p = ::wait4(-1, &status, 0, &usage);
        if (p == command) break;
        if (p < 0 && errno != EINTR) ::_exit(1);
    }
    send_text(control, "W" + std::to_string(status) + " " +
                           std::to_string(usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec) + " " +
                           std::to_string(usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec) + " " +
                           std::to_string(usage.ru_maxrss));
    // The command's code as ours too, for a daemon that reaps us before reading "W".
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

}  // namespace

std::string Release::encode() const {
    std::string out;
    put(out, cwd);
    put(out, std::to_string(nproc_limit));
    put(out, std::to_string(address_limit));
    put(out, drop_all_caps ? "1" : "0");
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
    reset_signal_dispositions();
    struct sigaction deadline {};
    deadline.sa_handler = kill_the_sandbox;
    deadline.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &deadline, nullptr);

    std::string buf(kReleaseBufferBytes, '\0');
    std::vector<unique_fd> fds;
    auto n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n == 0 || buf[0] != 'M') ::_exit(1);  // the daemon gave up on us
    auto built = build(s, fds.empty() ? -1 : fds[0].release());
    if (!built) die(control, built.error().what());
    if (::send(control, "R", 1, MSG_NOSIGNAL) < 0) ::_exit(1);

    fds.clear();
    n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n <= 1 || buf[0] != 'G' || fds.size() != 3) ::_exit(1);
    auto release = Release::decode(std::string_view(buf.data() + 1, *n - 1));
    if (!release) exec_failed(control, EPROTO, "release");
    int stdio[3] = {fds[0].release(), fds[1].release(), fds[2].release()};
    run(control, *release, stdio);
}

}  // namespace forkbox::sandbox
