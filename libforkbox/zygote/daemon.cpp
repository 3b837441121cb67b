// The daemon's event loop. Single-threaded and never blocking on template construction:
// templates are made by one long-lived builder process (nice 19) that, per request,
// unshares fresh namespaces for itself (the kernel's cost lands there, not here), brings
// lo up, makes the template's spare cgroups (zygote.hpp) and sends its nsfs fds back over
// a socket. No process is forked or reaped per template. Requests are answered from the
// pool only.
#include "libforkbox/zygote/daemon.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/cgroup/bpf.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "libforkbox/sandbox/server.hpp"
#include "libforkbox/zygote/zygote.hpp"
#include "oci/linux_names.hpp"
#include "oci/parse.hpp"
#include "oci/validate.hpp"

#ifndef PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE
#define PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE _IO(0xFF, 6)  // linux/pidfd.h, 6.11
#endif

namespace forkbox::zygote {

namespace {

using Clock = std::chrono::steady_clock;

// After a template of a kind failed to build, its pool is left alone this long.
constexpr int kBuildRetrySeconds = 10;

// A template's spare cgroup: the same directory name in every cgroup v1 hierarchy, removed
// unless a client took it.
class SpareCgroup {
public:
    SpareCgroup() = default;
    SpareCgroup(std::string name, std::vector<std::string> dirs) : name_(std::move(name)), dirs_(std::move(dirs)) {}
    SpareCgroup(SpareCgroup&& o) noexcept : name_(std::move(o.name_)), dirs_(std::move(o.dirs_)) { o.dirs_.clear(); }
    SpareCgroup& operator=(SpareCgroup&& o) noexcept {
        if (this != &o) {
            remove();
            name_ = std::move(o.name_);
            dirs_ = std::move(o.dirs_);
            o.dirs_.clear();
        }
        return *this;
    }
    ~SpareCgroup() { remove(); }

    const std::string& name() const { return name_; }
    // The client renames them: no longer ours.
    std::string hand_over() {
        dirs_.clear();
        return name_;
    }

private:
    void remove() {
        for (const auto& d : dirs_) ::rmdir(d.c_str());
        dirs_.clear();
    }
    std::string name_;
    std::vector<std::string> dirs_;
};

struct Template {
    std::vector<unique_fd> fds;  // the key's namespaces in kTemplateOrder; then mount and pid (rootfs)
    SpareCgroup spare;
    bool rootfs = false;
    bool v1_cgroups_bound = false;  // its rootfs has the spare v1 cgroups bound in
    bool device_program = false;    // its last fd is the config's cgroup v2 device program
};

// A spare given to a client, which renames it (the container's cgroup then) or removes
// it. A client that dies in between (a create SIGKILLed after taking the template) leaves
// it to us: removed once the client is gone (rmdir of a renamed one finds nothing).
struct HandedSpare {
    SpareCgroup spare;
    unique_fd client;  // a pidfd: readable once the client has exited
};

// A kind of container: its template key, cgroup parent, the id maps of its user namespace
// (encode_id_maps) and, for a rootfs template, the config's fingerprint and bundle
// ("<fingerprint> <bundle>").
struct PoolKey {
    int key = 0;
    std::string cgroup_parent;
    std::string rootfs;
    std::string id_maps;
    auto operator<=>(const PoolKey&) const = default;
};

// A template asked of the builder and not answered yet (the builder answers in order).
struct PendingBuild {
    PoolKey key;
    SpareCgroup spare;
};

struct Pool {
    std::deque<Template> ready;
    int building = 0;
    bool broken = false;  // its templates cannot be built here: not refilled again
    Clock::time_point retry_at{};  // a failed build: no refill before then
    // A rootfs template is worth building once its bundle comes back: a manager that makes
    // a bundle per container (podman, containerd) would otherwise leave a pool per container.
    int asked = 0;
    bool warmed = false;  // --warm: built from the start
    Clock::time_point last_used = Clock::now();
};

// What a rootfs template of one config is built from, planned once per config and bundle.
struct RootfsRecipe {
    Plan plan;
    CgroupLayout layout;
    // On a cgroup v2 host with device rules: the program, loaded once and handed to every
    // template's client, which attaches it (the kernel takes ~0.45 ms to verify and JIT it).
    unique_fd device_program;
};

Result<const RootfsRecipe*> recipe_for(std::map<std::string, RootfsRecipe>& recipes, const std::string& fingerprint,
                                       const std::string& bundle) {
    std::string id = fingerprint + " " + bundle;
    if (auto it = recipes.find(id); it != recipes.end()) return &it->second;
    FB_ASSIGN(std::string text, read_file(bundle + "/config.json"));
    if (config_fingerprint(text) != fingerprint) return fail(ESTALE, bundle + "/config.json changed");
    auto spec = oci::parse_config(text);
    if (!spec) return std::unexpected(spec.error());
    FB_TRY(oci::validate(*spec));
    RootfsRecipe recipe;
    FB_ASSIGN(recipe.plan, make_plan(*spec, PlanOptions{"zygote-template", bundle, !rootless_mode().any()}));
    if (!rootfs_template_fits(recipe.plan)) return fail(EINVAL, "no rootfs template fits " + bundle);
    FB_ASSIGN(recipe.layout, detect_cgroup_layout());
    // The program a client's plan gives it, from the same Plan::resources. Clients load it
    // themselves when this fails.
    auto program = plan_device_program(recipe.plan.resources, recipe.layout);
    if (program && *program) {
        auto loaded = bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, **program, kDeviceProgramName);
        if (loaded) recipe.device_program = std::move(*loaded);
    }
    if (recipes.size() >= 64) recipes.clear();  // kinds come and go: a bound, not an LRU
    return &recipes.emplace(id, std::move(recipe)).first->second;
}

// The spare cgroup of each v1 hierarchy, in layout order ("" for v2); empty unless every
// v1 hierarchy has one (and on a pure v2 host).
std::vector<std::string> spare_binds(const CgroupLayout& layout, const std::vector<std::string>& spares) {
    if (layout.mode == CgroupMode::V2) return {};
    std::vector<std::string> binds;
    for (const auto& h : layout.hierarchies) {
        if (h.unified) {
            binds.emplace_back();
            continue;
        }
        auto it = std::find_if(spares.begin(), spares.end(),
                               [&](const std::string& s) { return s.starts_with(h.mountpoint + "/"); });
        if (it == spares.end()) return {};
        binds.push_back(*it);
    }
    return binds;
}

// A rootfs template, in namespaces the builder has just unshared: a mount namespace with the
// rootfs built and pivoted into, /proc for a fresh, empty pid namespace. Returns the mount
// and pid namespace fds; the builder is back in its own mount and pid namespaces either way.
// When the template's spare cgroups exist in every v1 hierarchy they are bound in already
// (v1_cgroups_bound): the client renames them to the container's own.
Result<std::vector<unique_fd>> build_rootfs(const RootfsRecipe& recipe, const std::vector<std::string>& spares,
                                            bool& v1_cgroups_bound, int home_mnt, int home_pid) {
    trace::mark("builder: rootfs");
    const Plan& plan = recipe.plan;
    const CgroupLayout& layout = recipe.layout;
    if (plan.set_hostname) FB_TRY(set_hostname(plan.hostname));
    if (plan.set_domainname) FB_TRY(set_domainname(plan.domainname));
    trace::mark("builder: planned");
    if (::unshare(CLONE_NEWNS | CLONE_NEWPID) < 0) return sys_error("unshare mount and pid namespaces");
    trace::mark("builder: unshared");
    std::vector<unique_fd> out;
    mode_t old_umask = ::umask(022);
    auto built = [&]() -> Result<void> {
        out.emplace_back(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
        if (!out.back()) return sys_error("open the template's mount namespace");
        // /proc/self/ns/pid_for_children is ENOENT until the pid namespace has a pid 1.
        unique_fd self(sys::pidfd_open(::getpid()));
        if (!self) return sys_error("pidfd_open");
        out.emplace_back(::ioctl(self.get(), PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE, 0));
        if (!out.back()) return sys_error("get the template's pid namespace (kernel 6.11 or later)");
        std::vector<std::string> no_cgroup_dirs;
        RootfsContext ctx{plan, layout, no_cgroup_dirs};
        ctx.proc_pidns_fd = out.back().get();
        ctx.defer_cgroup_trees = true;
        ctx.premount_cgroup_dirs = spare_binds(layout, spares);
        v1_cgroups_bound = !ctx.premount_cgroup_dirs.empty();
        FB_TRY(prepare_rootfs(ctx));
        trace::mark("builder: mounts done");
        FB_TRY(enter_rootfs(plan.rootfs, false));
        trace::mark("builder: pivoted");
        FB_TRY(apply_sysctls(plan.sysctl));
        return finalize_rootfs(ctx);
    }();
    ::umask(old_umask);
    trace::mark("builder: finalized");
    bool home = ::setns(home_mnt, CLONE_NEWNS) == 0 && ::setns(home_pid, CLONE_NEWPID) == 0 && ::chdir("/") == 0;
    trace::mark("builder: home");
    if (!home) _exit(1);  // never build the next template from inside this one
    if (!built) return std::unexpected(built.error());
    return out;
}

// The namespaces of a template with a user namespace, made by a child of the builder (a
// process cannot leave a user namespace it entered): the child unshares the user
// namespace, the builder writes its id maps as create would for a cold container, then the
// child unshares the rest inside it (so the user namespace owns them) and brings lo up.
// The builder opens them all through /proc and the child exits.
Result<std::vector<unique_fd>> build_in_user_namespace(int key, const IdMaps& maps) {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd child_rd(to_child[0]), parent_wr(to_child[1]);
    if (::pipe2(from_child, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd parent_rd(from_child[0]), child_wr(from_child[1]);
    pid_t pid = ::fork();
    if (pid < 0) return sys_error("fork");
    if (pid == 0) {
        parent_rd.reset();
        parent_wr.reset();  // else the builder's EOF never comes
        char c = 0;
        bool ok = ::unshare(CLONE_NEWUSER) == 0 && ::write(child_wr.get(), "u", 1) == 1 &&
                  ::read(child_rd.get(), &c, 1) == 1 && c == 'm' && ::unshare(key & ~CLONE_NEWUSER) == 0 &&
                  (!(key & CLONE_NEWNET) || bring_up_loopback());
        if (ok) (void)!::write(child_wr.get(), "n", 1);
        (void)!::read(child_rd.get(), &c, 1);  // until the builder has opened the namespaces
        _exit(ok ? 0 : 1);
    }
    child_rd.reset();
    child_wr.reset();
    auto finish = [&] {
        parent_wr.reset();
        int status;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    };
    char c = 0;
    if (::read(parent_rd.get(), &c, 1) != 1 || c != 'u') {
        finish();
        return fail(EPERM, "unshare of a user namespace refused");
    }
    // A user's daemon maps as a user's create does: its own ids directly, ranges through
    // newuidmap/newgidmap (the child, a plain fork of ours, is dumpable).
    auto writer = plan_id_map_writer(maps.uids, maps.gids, ::geteuid(), ::getegid());
    if (!writer) {
        finish();
        return std::unexpected(writer.error());
    }
    if (auto mapped = write_id_mappings(pid, maps.uids, maps.gids, *writer); !mapped) {
        finish();
        return std::unexpected(mapped.error());
    }
    if (::write(parent_wr.get(), "m", 1) != 1 || ::read(parent_rd.get(), &c, 1) != 1 || c != 'n') {
        finish();
        return fail(EPERM, "namespaces inside the user namespace refused");
    }
    std::vector<unique_fd> fds;
    for (int flag : kTemplateOrder) {
        if (!(key & flag)) continue;
        std::string path = "/proc/" + std::to_string(pid) + "/ns/" + std::string(oci::namespace_kind_by_flag(flag)->proc_name);
        fds.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fds.back()) {
            int e = errno;
            finish();
            return sys_error(e, "open " + path);
        }
    }
    finish();
    return fds;
}

// The builder. Request: the key on the first line; for a rootfs template, "R<fingerprint>
// <bundle>" on the second; for a user namespace, "U<id maps>"; then one line per spare cgroup directory, "c" (a cpuset
// hierarchy) or "-" and the path. Reply: "1" with the key's nsfs fds in kTemplateOrder
// (then the mount and pid namespaces of a rootfs template), or "0". A spare cgroup that
// cannot be made (its parent missing in a hierarchy) is simply not there: the client then
// makes that one itself.
[[noreturn]] void builder_main(int sock) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Refill runs on the cores the requests need: at the lowest priority, the builder takes
    // what the containers being created leave idle instead of competing with them.
    (void)::setpriority(PRIO_PROCESS, 0, 19);
    if (::dup2(sock, 3) < 0) _exit(1);
    // The listener and the signalfd are the daemon's (a FORKBOX_TRACE file stays).
    if (int keep = trace::fd(); keep > 4) {
        sys::close_range(4, static_cast<unsigned>(keep) - 1, 0);
        sys::close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);
    } else {
        sys::close_range(4, ~0U, 0);
    }
    // Where a rootfs build returns to.
    int home_mnt = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    int home_pid = ::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (home_mnt < 0 || home_pid < 0) _exit(1);
    std::map<std::string, RootfsRecipe> recipes;
    for (;;) {
        char buf[8192];
        ssize_t n = ::recv(3, buf, sizeof buf, 0);
        if (n <= 0) _exit(0);
        std::string_view req(buf, static_cast<size_t>(n));
        size_t nl = req.find('\n');
        int key = std::atoi(std::string(req.substr(0, nl)).c_str());
        std::string fingerprint, bundle, id_maps;
        std::vector<std::string> spares;  // the spare cgroups made for this template
        while (nl != std::string_view::npos && nl + 2 < req.size()) {
            size_t next = req.find('\n', nl + 1);
            std::string_view line = req.substr(nl + 1, next == std::string_view::npos ? std::string_view::npos : next - nl - 1);
            if (line.empty()) {
                nl = next;
                continue;
            }
            if (line[0] == 'U') {
                id_maps = std::string(line.substr(1));
            } else if (line[0] == 'R') {
                size_t space = line.find(' ');
                fingerprint = std::string(line.substr(1, space - 1));
                bundle = space == std::string_view::npos ? "" : std::string(line.substr(space + 1));
            } else {
                std::string dir(line.substr(1));
                if (::mkdir(dir.c_str(), 0755) == 0) {
                    if (line[0] == 'c') (void)inherit_cpuset(dir);
                    spares.push_back(std::move(dir));
                }
            }
            nl = next;
        }
        std::vector<unique_fd> fds;
        std::string note;
        bool v1_cgroups_bound = false;
        bool device_program = false;
        bool ok = key != 0;
        if (ok && (key & CLONE_NEWUSER)) {
            auto maps = decode_id_maps(id_maps);
            auto made = maps ? build_in_user_namespace(key, *maps)
                             : Result<std::vector<unique_fd>>(std::unexpected(maps.error()));
            if (made) {
                fds = std::move(*made);
            } else {
                ok = false;
                note = made.error().what();
            }
        } else {
            ok = ok && ::unshare(key) == 0 && (!(key & CLONE_NEWNET) || bring_up_loopback());
            for (int flag : kTemplateOrder) {
                if (!ok || !(key & flag)) continue;
                std::string path = "/proc/self/ns/" + std::string(oci::namespace_kind_by_flag(flag)->proc_name);
                fds.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
                ok = static_cast<bool>(fds.back());
            }
        }
        if (ok && !fingerprint.empty()) {
            auto recipe = recipe_for(recipes, fingerprint, bundle);
            auto rootfs = recipe ? build_rootfs(**recipe, spares, v1_cgroups_bound, home_mnt, home_pid)
                                 : Result<std::vector<unique_fd>>(std::unexpected(recipe.error()));
            if (rootfs) {
                for (auto& f : *rootfs) fds.push_back(std::move(f));
                if ((*recipe)->device_program) {
                    fds.emplace_back(::fcntl((*recipe)->device_program.get(), F_DUPFD_CLOEXEC, 0));
                    device_program = static_cast<bool>(fds.back());
                    if (!device_program) fds.pop_back();
                }
            } else {
                ok = false;
                note = rootfs.error().what();
            }
        }
        std::vector<int> raw;
        for (const auto& f : fds) raw.push_back(f.get());
        if (!ok) raw.clear();
        // "1", then "c" when the spare v1 cgroups are bound, "d" when a device program follows.
        std::string reply = ok ? std::string("1") + (v1_cgroups_bound ? "c" : "") + (device_program ? "d" : "") : "0" + note;
        if (!send_with_fds(3, reply, raw, "builder reply")) _exit(1);
    }
}

// Whether this kernel can make rootfs templates: a pid namespace fd from a pidfd
// (PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE, 6.11) and a procfs for it (pidns=). Asked once, in
// a throwaway child with private mount and pid namespaces. "" when it can, else why not.
std::string probe_rootfs_templates() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return "pipe failed";
    unique_fd rd(p[0]), wr(p[1]);
    pid_t child = ::fork();
    if (child < 0) return "fork failed";
    if (child == 0) {
        auto say = [&](const char* why) {
            (void)!::write(wr.get(), why, std::strlen(why));
            _exit(0);
        };
        if (::unshare(CLONE_NEWNS | CLONE_NEWPID) < 0) say("unshare of mount and pid namespaces refused");
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) say("no private mounts");
        unique_fd self(sys::pidfd_open(::getpid()));
        unique_fd ns(self ? ::ioctl(self.get(), PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE, 0) : -1);
        if (!ns) say("no PIDFD_GET_PID_FOR_CHILDREN_NAMESPACE (kernel before 6.11)");
        std::string data = "pidns=/proc/self/fd/" + std::to_string(ns.get());
        if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, data.c_str()) < 0)
            say("procfs has no pidns= option");
        _exit(0);
    }
    wr.reset();
    char why[128] = {};
    ssize_t n = ::read(rd.get(), why, sizeof why - 1);
    int status;
    ::waitpid(child, &status, 0);
    if (n > 0) return std::string(why, static_cast<size_t>(n));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the probe failed";
    return "";
}

class Daemon {
public:
    explicit Daemon(const DaemonOptions& o) : opt_(o) {}
    Result<void> run();

private:
    Result<void> listen_socket();
    int refill();
    bool kept_warm(const PoolKey& key, const Pool& pool, Clock::time_point now) const;
    void start_builder(const PoolKey& key);
    void ensure_cgroup_parent(const std::string& parent);
    void remove_stale_spares();
    void finish_builder();
    void stop_builder();
    void serve(int conn);
    void evict_idle();
    void reap();
    void start_sandbox_server();
    void stop_sandbox_server();
    void hand_to_sandbox_server(unique_fd conn);

    DaemonOptions opt_;
    unique_fd listener_, signals_;
    std::optional<Acceptor> acceptor_;  // sheds clients at EMFILE instead of spinning
    std::map<PoolKey, Pool> pools_;
    unique_fd builder_;  // our end of the builder's socket
    pid_t builder_pid_ = -1;
    std::deque<PendingBuild> pending_;
    std::vector<HandedSpare> handed_;
    long served_ = 0, missed_ = 0, served_rootfs_ = 0, failed_ = 0;
    bool rootfs_templates_ = false;  // probe_rootfs_templates() said yes
    Clock::time_point last_request_{};
    CgroupLayout cgroups_;  // the v1 hierarchies hold spare cgroups
    long spare_sequence_ = 0;
    std::set<std::string> parents_checked_;  // containers' cgroup parents, made if missing
    std::vector<std::string> parents_made_;  // by us: removed when we stop, if empty
    // The sandbox service: its process, and the socket its connections go over.
    unique_fd sandbox_handoff_;
    pid_t sandbox_pid_ = -1;
    Clock::time_point sandbox_restart_at_{}, sandbox_started_at_{};
};

void Daemon::start_sandbox_server() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        log::warn("sandbox: socketpair: " + std::string(std::strerror(errno)));
        return;
    }
    unique_fd ours(sv[0]), theirs(sv[1]);
    pid_t pid = ::fork();
    if (pid < 0) {
        log::warn("sandbox: fork: " + std::string(std::strerror(errno)));
        return;
    }
    if (pid == 0) {
        // It stops with the daemon, whatever kills the daemon.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() == 1) ::_exit(1);
        signals_.reset();
        builder_.reset();
        ours.reset();
        ::_exit(sandbox::serve_sandboxes(theirs.get(), listener_.get(), opt_.sandbox));
    }
    sandbox_handoff_ = std::move(ours);
    sandbox_pid_ = pid;
    sandbox_started_at_ = Clock::now();
}

void Daemon::stop_sandbox_server() {
    if (sandbox_pid_ > 0) ::kill(sandbox_pid_, SIGTERM);
    sandbox_handoff_.reset();
}

// The sandbox service reads the request itself: the connection goes over unread.
void Daemon::hand_to_sandbox_server(unique_fd conn) {
    if (!sandbox_handoff_ && sandbox_pid_ < 0 && opt_.sandboxes && Clock::now() >= sandbox_restart_at_)
        start_sandbox_server();
    int fd = conn.get();
    if (sandbox_handoff_ && send_with_fds(sandbox_handoff_.get(), "c", std::span<const int>(&fd, 1), "sandbox handoff"))
        return;
    // Read what it sent, or closing resets the connection before the client reads our reply.
    char buf[512];
    for (int i = 0; i < 1024 && ::recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC) > 0; ++i) {
    }
    std::string m = sandbox::format_error(sandbox::ErrorKind::SandboxError,
                                          opt_.sandboxes ? "the daemon's sandbox service is not running (see its log)"
                                                         : "this daemon serves no sandboxes (started with --no-sandboxes)");
    ::send(fd, m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

Result<void> Daemon::listen_socket() {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string& path = opt_.socket_path;
    if (path.empty() || path.size() >= sizeof addr.sun_path) return fail(ENAMETOOLONG, "socket path " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (auto slash = path.find_last_of('/'); slash != std::string::npos && slash > 0)
        ::mkdir(path.substr(0, slash).c_str(), 0700);
    listener_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener_) return sys_error("socket");
    // A socket file nobody listens on is left over from a daemon that died: replace it. One
    // that still answers for a moment may be a killed daemon's sandbox service on its way
    // out (it closes the shared listener when it hears of the death): asked again for 200 ms.
    for (int attempt = 0;; ++attempt) {
        unique_fd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) break;
        if (attempt == 20) return fail(EADDRINUSE, "another daemon is serving " + path);
        ::usleep(10000);
    }
    ::unlink(path.c_str());
    // Only root (the owner) may talk to us: mode 0600 from the start, and SO_PEERCRED later.
    mode_t old = ::umask(0177);
    int r = ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::umask(old);
    if (r < 0) return sys_error("bind " + path);
    // --allow-group: the group can connect (the sandbox service checks each peer's groups;
    // zygote requests stay the owner's).
    if (!opt_.sandbox.allowed_groups.empty()) {
        if (::chown(path.c_str(), static_cast<uid_t>(-1), opt_.sandbox.allowed_groups.front()) < 0 ||
            ::chmod(path.c_str(), 0660) < 0)
            return sys_error("give group " + std::to_string(opt_.sandbox.allowed_groups.front()) + " " + path);
    }
    if (::listen(listener_.get(), 128) < 0) return sys_error("listen on " + path);
    acceptor_.emplace(listener_.get());
    return {};
}

// Asks the builder for one template of `key` (starting the builder first if need be).
void Daemon::start_builder(const PoolKey& key) {
    if (!builder_) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
            log::warn("zygote: socketpair: " + std::string(std::strerror(errno)));
            return;
        }
        unique_fd ours(sv[0]), theirs(sv[1]);
        pid_t pid = ::fork();
        if (pid < 0) {
            log::warn("zygote: fork builder: " + std::string(std::strerror(errno)));
            return;
        }
        if (pid == 0) builder_main(theirs.get());
        builder_ = std::move(ours);
        builder_pid_ = pid;
    }
    std::string request = std::to_string(key.key);
    if (!key.id_maps.empty()) request += "\nU" + key.id_maps;
    if (!key.rootfs.empty()) request += "\nR" + key.rootfs;
    std::vector<std::string> dirs;
    std::string name;
    if (!key.cgroup_parent.empty()) {
        name = spare_name(::getpid(), ++spare_sequence_);
        std::string parent = key.cgroup_parent == "/" ? "" : key.cgroup_parent;
        ensure_cgroup_parent(parent);
        for (const auto& h : cgroups_.hierarchies) {
            if (h.unified) continue;  // cgroup v2 cannot rename
            dirs.push_back(h.mountpoint + parent + "/" + name);
            request += (hierarchy_has(h, "cpuset") ? "\nc" : "\n-") + dirs.back();
        }
    }
    if (::send(builder_.get(), request.data(), request.size(), MSG_NOSIGNAL) < 0) {
        log::warn("zygote: the template builder is gone: " + std::string(std::strerror(errno)));
        stop_builder();
        return;
    }
    pending_.push_back(PendingBuild{key, SpareCgroup(name, std::move(dirs))});
    ++pools_[key].building;
}

// A spare is made under the containers' cgroup parent: on a host where no container has
// made that parent yet, so do we (as a cold create would, cpusets filled), or every
// template until then would carry none.
void Daemon::ensure_cgroup_parent(const std::string& parent) {
    if (parent.empty() || !parents_checked_.insert(parent).second) return;
    // One not ours to make (a user's daemon) is not made: its templates carry no spare there.
    for (const auto& h : cgroups_.hierarchies)
        if (!h.unified) (void)make_cgroup_path(h.mountpoint, parent, hierarchy_has(h, "cpuset"), parents_made_, true);
}

// Forgets the builder and what it was asked (its spare cgroups go); the next refill starts
// a new one.
void Daemon::stop_builder() {
    if (builder_pid_ > 0) {
        // Dead before its requests' spare cgroups go: a builder still inside mkdir would
        // make one after our rmdir. SIGKILL ends it promptly; ECHILD: reaped already.
        ::kill(builder_pid_, SIGKILL);
        int status;
        while (::waitpid(builder_pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    builder_pid_ = -1;
    builder_.reset();
    for (auto& p : pending_) --pools_[p.key].building;
    pending_.clear();
}

// Gone, or a zombie nobody reaped yet.
bool process_gone(pid_t pid) {
    if (::kill(pid, 0) < 0) return errno == ESRCH;
    auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    if (!stat) return true;
    size_t paren = stat->rfind(')');
    return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

// Spare cgroups of daemons that are gone (SIGKILL leaves them), under the parents this
// daemon knows from the start.
void Daemon::remove_stale_spares() {
    std::vector<std::string> parents = {"/forkbox"};
    for (const auto& w : opt_.warm_keys)
        if (!w.cgroup_parent.empty()) parents.push_back(w.cgroup_parent == "/" ? "" : w.cgroup_parent);
    for (const auto& h : cgroups_.hierarchies) {
        if (h.unified) continue;
        for (const auto& parent : parents) {
            std::string dir = h.mountpoint + parent;
            std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
            if (!d) continue;
            while (auto* e = ::readdir(d.get())) {
                pid_t owner = spare_owner(e->d_name);
                if (owner > 0 && owner != ::getpid() && process_gone(owner))
                    ::rmdir((dir + "/" + e->d_name).c_str());
            }
        }
    }
}

// The builder's answer to the oldest pending request.
void Daemon::finish_builder() {
    std::vector<unique_fd> fds;
    auto reply = receive_with_fds(builder_.get(), fds, "receive a template");
    if (!reply || reply->empty() || pending_.empty()) {
        log::warn("zygote: the template builder stopped answering; starting a new one");
        stop_builder();
        return;
    }
    PendingBuild b = std::move(pending_.front());
    pending_.pop_front();
    Pool& pool = pools_[b.key];
    --pool.building;
    Template t;
    t.spare = std::move(b.spare);  // removed with t unless it reaches the pool
    bool ok = *reply == "1" || *reply == "1c" || *reply == "1d" || *reply == "1cd";
    bool device_program = ok && reply->ends_with('d') && !b.key.rootfs.empty();
    size_t want = static_cast<size_t>(namespace_count(b.key.key)) + (b.key.rootfs.empty() ? 0 : 2) + device_program;
    if (!ok || fds.size() != want) {
        ++failed_;
        std::string why = reply->size() > 1 ? ": " + reply->substr(1) : "";
        if (!b.key.rootfs.empty()) {
            // Not buildable here (an old kernel, a config that changed): stop trying; clients
            // of this kind get namespace-only templates.
            if (!pool.broken) log::warn("zygote: no rootfs templates for " + b.key.rootfs + why);
            pool.broken = true;
        } else {
            // Id maps the kernel refuses, a namespace limit reached: not again at once, or
            // refill would ask for the same failure as fast as the builder can fail.
            if (pool.retry_at <= Clock::now())
                log::warn("zygote: the builder could not make a template for key " + std::to_string(b.key.key) +
                          (b.key.id_maps.empty() ? "" : " (id maps " + b.key.id_maps + ")") + why +
                          "; trying again in " + std::to_string(kBuildRetrySeconds) + " s");
            pool.retry_at = Clock::now() + std::chrono::seconds(kBuildRetrySeconds);
        }
        return;
    }
    t.fds = std::move(fds);
    t.rootfs = !b.key.rootfs.empty();
    t.v1_cgroups_bound = t.rootfs && reply->starts_with("1c");
    t.device_program = device_program;
    pool.ready.push_back(std::move(t));
}

// Builders run at nice 19, but the kernel work they do (making a network namespace, mkdir
// of cgroups) takes global locks a create also needs: while requests keep coming, refill
// waits for a quiet moment (refill_delay_ms without a request), unless a pool runs low.
// Returns how long poll may sleep before a deferred refill is due (-1: none pending).
int Daemon::refill() {
    auto now = Clock::now();
    auto quiet = std::chrono::milliseconds(opt_.refill_delay_ms);
    bool idle = now - last_request_ >= quiet;
    int low = std::max(1, opt_.pool_size / 4);
    bool pending = false;
    for (auto& [key, pool] : pools_) {
        if (!kept_warm(key, pool, now)) continue;
        int have = static_cast<int>(pool.ready.size()) + pool.building;
        int want = opt_.pool_size - have;
        if (want <= 0) continue;
        if (!idle && have >= low) {
            pending = true;
            continue;
        }
        for (int i = 0; i < want; ++i) start_builder(key);
    }
    if (!pending) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(quiet - (now - last_request_)).count();
    return static_cast<int>(std::max<long long>(left, 1));
}

// A pool refill keeps full: not broken nor waiting to retry a failed build, and for rootfs
// templates, warmed or asked for often enough.
bool Daemon::kept_warm(const PoolKey& key, const Pool& pool, Clock::time_point now) const {
    if (pool.broken || pool.retry_at > now) return false;
    return key.rootfs.empty() || pool.warmed || pool.asked >= opt_.rootfs_after;
}

void Daemon::serve(int conn) {
    unique_fd c(conn);
    pollfd p{conn, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) return;
    char head[16];
    ssize_t peeked = ::recv(conn, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    if (peeked > 0 && sandbox::looks_like_sandbox_message(std::string_view(head, static_cast<size_t>(peeked)))) {
        hand_to_sandbox_server(std::move(c));  // it checks its peers itself (--allow-group)
        return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != ::geteuid()) {
        log::warn("zygote: refused a client with uid " + std::to_string(cred.uid));
        return;
    }
    // Bundle paths and id maps make requests of a few KiB at most; a longer one is refused
    // whole (MSG_TRUNC), never read cut short.
    char buf[16384];
    ssize_t n = ::recv(conn, buf, sizeof buf, MSG_TRUNC);
    if (n <= 0) return;
    if (static_cast<size_t>(n) > sizeof buf) {
        log::warn("zygote: refused a request of " + std::to_string(n) + " bytes");
        return;
    }
    auto req = decode_request(std::string_view(buf, static_cast<size_t>(n)));
    if (!req) {
        log::warn(std::string("zygote: bad request: ") + req.error().what());
        // In the sandbox protocol's words, which is what a stray client most likely speaks.
        std::string m = sandbox::format_error(sandbox::ErrorKind::InvalidRequest,
                                              "unknown request: a sandbox request starts with \"sandbox/1 <verb>\\n\"");
        ::send(conn, m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        return;
    }
    if (req->op == Request::Op::Stats) {
        size_t ready = 0, short_of = 0;
        auto now = Clock::now();
        for (auto& [k, pool] : pools_) {
            ready += pool.ready.size();
            if (kept_warm(k, pool, now) && static_cast<int>(pool.ready.size()) < opt_.pool_size)
                short_of += static_cast<size_t>(opt_.pool_size) - pool.ready.size();
        }
        std::string s = "stats served=" + std::to_string(served_) + " rootfs=" + std::to_string(served_rootfs_) +
                        " missed=" + std::to_string(missed_) +
                        " ready=" + std::to_string(ready) + " pools=" + std::to_string(pools_.size()) +
                        " failed=" + std::to_string(failed_) + " short=" + std::to_string(short_of);
        (void)::send(conn, s.data(), s.size(), MSG_NOSIGNAL);
        return;
    }
    last_request_ = Clock::now();
    // A kind asked for is a kind kept warm from now on. A rootfs request takes a rootfs
    // template, or else a namespace-only one (its pool then kept warm too).
    Pool* pool = nullptr;
    if (!req->rootfs_fingerprint.empty() && rootfs_templates_) {
        Pool& rootfs = pools_[PoolKey{req->key, req->cgroup_parent, req->rootfs_fingerprint + " " + req->rootfs_bundle, ""}];
        rootfs.last_used = Clock::now();
        ++rootfs.asked;
        if (!rootfs.ready.empty()) pool = &rootfs;
    }
    if (!pool) {
        pool = &pools_[PoolKey{req->key, req->cgroup_parent, "", req->id_maps}];
        pool->last_used = Clock::now();
    }
    if (pool->ready.empty()) {
        ++missed_;
        (void)::send(conn, "none", 4, MSG_NOSIGNAL);
        return;
    }
    Template t = std::move(pool->ready.front());
    pool->ready.pop_front();
    std::string reply = encode_reply({req->key, t.spare.name(), t.rootfs, t.v1_cgroups_bound, t.device_program});
    std::vector<int> fds;
    for (const auto& f : t.fds) fds.push_back(f.get());
    if (send_with_fds(conn, reply, fds, "send a template")) {
        ++served_;
        if (t.rootfs) ++served_rootfs_;
        if (!t.spare.name().empty()) {
            unique_fd client(sys::pidfd_open(cred.pid));
            if (client)
                handed_.push_back(HandedSpare{std::move(t.spare), std::move(client)});
            else if (errno != ESRCH)
                t.spare.hand_over();  // no pidfd to watch: the client's alone, as it is on success
            // ESRCH: the client is gone already, and its spare goes with t.
        }
    }
    // Sent or not, a template is used once: ours close here (and an unsent spare goes).
}

void Daemon::evict_idle() {
    auto now = Clock::now();
    for (auto it = pools_.begin(); it != pools_.end();) {
        bool idle = now - it->second.last_used > std::chrono::seconds(opt_.evict_after_seconds);
        if (idle && it->second.building == 0) {
            log::debug("zygote: evicting idle key " + std::to_string(it->first.key) + " " + it->first.cgroup_parent);
            it = pools_.erase(it);
        } else {
            ++it;
        }
    }
}

void Daemon::reap() {
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid != sandbox_pid_) continue;
        sandbox_pid_ = -1;
        sandbox_handoff_.reset();
        // Started again by the next sandbox request; one that fails on its own within a
        // second of its start (a setup that cannot work) only a second later, so that a
        // stream of requests is no loop of failing starts.
        auto now = Clock::now();
        bool failed_fast = WIFEXITED(status) && now - sandbox_started_at_ < std::chrono::seconds(1);
        sandbox_restart_at_ = failed_fast ? now + std::chrono::seconds(1) : now;
        log::warn("sandbox: the sandbox service exited (status " + std::to_string(status) + ")");
    }
}

Result<void> Daemon::run() {
    FB_ASSIGN(signals_, daemon_signalfd());
    FB_TRY(listen_socket());
    // Before any child: the children (the sandbox service) start in the leaf it moves to.
    if (opt_.sandboxes) sandbox::enter_delegated_v2_cgroup(opt_.sandbox);
    // No cgroups to read (an odd host): templates without spare cgroups.
    if (auto layout = detect_cgroup_layout()) cgroups_ = std::move(*layout);
    remove_stale_spares();
    std::string no_rootfs = probe_rootfs_templates();
    rootfs_templates_ = no_rootfs.empty();
    log::info(rootfs_templates_ ? "zygote: rootfs templates on" : "zygote: rootfs templates off: " + no_rootfs);
    // Namespace-only templates serve any container of the kind (a config seen for the first
    // time, podman's per-container rootfs); rootfs templates serve the warmed bundle.
    for (const auto& w : opt_.warm_keys) {
        pools_[PoolKey{w.key, w.cgroup_parent, "", w.id_maps}];
        if (!w.rootfs.empty() && rootfs_templates_) pools_[PoolKey{w.key, w.cgroup_parent, w.rootfs, ""}].warmed = true;
    }
    if (opt_.sandboxes) start_sandbox_server();
    log::info("zygote daemon listening on " + opt_.socket_path + " (pool " + std::to_string(opt_.pool_size) + ")");
    bool stopping = false;
    while (!stopping) {
        int refill_due = refill();
        // While the sandbox service runs, it accepts every connection (sandbox requests are
        // the ones that wait on it) and hands zygote requests over here; otherwise this loop
        // accepts them all.
        bool service_accepts = sandbox_pid_ > 0 && sandbox_handoff_;
        std::vector<pollfd> fds = {{signals_.get(), POLLIN, 0}, {listener_.get(), static_cast<short>(service_accepts ? 0 : POLLIN), 0},
                                   {sandbox_handoff_.get(), POLLIN, 0}};
        if (builder_) fds.push_back({builder_.get(), POLLIN, 0});
        size_t handed_at = fds.size(), handed_polled = handed_.size();
        for (const auto& h : handed_) fds.push_back({h.client.get(), POLLIN, 0});
        int r = ::poll(fds.data(), fds.size(), refill_due >= 0 ? std::min(refill_due, 10000) : 10000);
        if (r < 0 && errno != EINTR) return sys_error("poll");
        if (fds[0].revents) {
            signalfd_siginfo si;
            while (::read(signals_.get(), &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGCHLD) reap();
                else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) stopping = true;
            }
        }
        // Requests first: they are the critical path; builders can wait a moment.
        if (fds[1].revents) {
            // Shed at EMFILE: closed unanswered, a zygote client goes cold.
            int conn;
            while ((conn = acceptor_->accept()) >= 0) serve(conn);
        }
        if (fds[2].revents & POLLIN) {
            std::vector<unique_fd> conns;
            auto m = receive_with_fds(sandbox_handoff_.get(), conns, "sandbox handoff");
            for (auto& c : conns) serve(c.release());
        }
        // Serving only appends to handed_: its first handed_polled entries are at handed_at on.
        for (size_t i = handed_polled; i-- > 0;)
            if (fds[handed_at + i].revents) handed_.erase(handed_.begin() + static_cast<long>(i));
        if (fds.size() > 3 && builder_ && fds[3].fd == builder_.get() && fds[3].revents) finish_builder();
        evict_idle();
    }
    log::info("zygote daemon stopping");
    // Clients still at work rename theirs; a dead one's goes with the next daemon's sweep.
    for (auto& h : handed_) h.spare.hand_over();
    handed_.clear();
    ::unlink(opt_.socket_path.c_str());
    stop_sandbox_server();
    stop_builder();
    pools_.clear();  // closes every template fd: the namespaces go away
    int status;
    while (::waitpid(-1, &status, 0) > 0) {
    }
    // Deepest first; one a container lives in stays (EBUSY), as a cold create's would.
    for (auto it = parents_made_.rbegin(); it != parents_made_.rend(); ++it) ::rmdir(it->c_str());
    return {};
}

}  // namespace

Result<void> run_daemon(const DaemonOptions& options) {
    Daemon d(options);
    return d.run();
}

}  // namespace forkbox::zygote
