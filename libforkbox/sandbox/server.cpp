#include "libforkbox/sandbox/server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/delegation.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/landlock.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/sandbox/builder.hpp"
#include "libforkbox/sandbox/service.hpp"

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

namespace forkbox::sandbox {

namespace {

constexpr const char* kCgroupParentName = "/forkbox-sandbox";

// cgroup v1 hierarchies with the controllers sandboxes use, or the v2 hierarchy on a pure
// v2 host (a hybrid host's v2 mount holds no controller of these).
CgroupLayout sandbox_layout(const CgroupLayout& host) {
    CgroupLayout out;
    out.mode = host.mode;
    for (const auto& h : host.hierarchies) {
        if (h.unified) {
            if (host.mode == CgroupMode::V2) out.hierarchies.push_back(h);
            continue;
        }
        // The freezer too: a session's pause and a fork's capture freeze its cgroup.
        for (const char* c : {"memory", "pids", "cpu", "cpuacct", "freezer"})
            if (hierarchy_has(h, c)) {
                out.hierarchies.push_back(h);
                break;
            }
    }
    return out;
}

// The controllers sandboxes' limits use (the freezer is v1's; v2's cgroup.freeze is core).
constexpr std::array<std::string_view, 3> kLimitControllers = {"memory", "pids", "cpu"};

// Where sandboxes' cgroups go, relative to each hierarchy's root. A root daemon's: under the
// root. A user's: on v2, under the cgroup delegated to it (enter_delegated_v2_cgroup); on v1,
// under its own cgroup, which must be the same path in every hierarchy of `layout` and
// writable by it (delegated to it by root, as runc's rootless tests do on v1).
// An error says why a user's daemon gets no cgroups (its limits are then rlimits).
Result<std::string> sandbox_cgroup_parent(const CgroupLayout& layout, bool root, const ServerOptions& opt) {
    if (root) return std::string(kCgroupParentName);
    if (layout.hierarchies.empty()) return fail("no cgroup hierarchy with memory or pids");
    if (layout.unified()) {
        if (opt.delegated_cgroup.empty())
            return fail(opt.no_delegated_cgroup.empty() ? "no cgroup delegated to the daemon" : opt.no_delegated_cgroup);
        return opt.delegated_cgroup + kCgroupParentName;
    }
    FB_ASSIGN(auto own, own_cgroup_dirs(layout));
    std::string relative;
    for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
        const auto& h = layout.hierarchies[i];
        if (own[i].size() <= h.mountpoint.size()) return fail("the daemon's cgroup in " + h.mountpoint + " is the root");
        std::string rel = own[i].substr(h.mountpoint.size());
        if (!relative.empty() && rel != relative)
            return fail("the daemon's cgroups differ between hierarchies (" + relative + ", " + rel + ")");
        relative = rel;
        if (::access(own[i].c_str(), W_OK) < 0 || ::access((own[i] + "/tasks").c_str(), W_OK) < 0)
            return fail(own[i] + " is not delegated to the daemon's user");
    }
    for (const char* c : {"memory", "pids"})
        if (std::none_of(layout.hierarchies.begin(), layout.hierarchies.end(),
                         [c](const CgroupHierarchy& h) { return hierarchy_has(h, c); }))
            return fail(std::string("no ") + c + " hierarchy");
    return relative + kCgroupParentName;
}

// Gone, or a zombie: a server SIGKILLed with its daemon stays one until whoever inherits
// it reaps it, which may be after the next server starts.
bool server_gone(pid_t pid) {
    if (::kill(pid, 0) < 0) return errno == ESRCH;
    auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    if (!stat) return true;
    size_t paren = stat->rfind(')');
    return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

// The sandbox cgroups of servers `whose` says yes to (named <server pid>-<n>), removed
// with whatever still runs in them killed first (remove_cgroups waits the moment the kernel
// takes to release killed tasks).
Result<void> remove_server_cgroups(const CgroupLayout& layout, const std::string& relative_parent,
                                   const std::function<bool(pid_t)>& whose) {
    std::vector<std::string> dirs;
    for (const auto& h : layout.hierarchies) {
        std::string parent = h.mountpoint + relative_parent;
        DIR* d = ::opendir(parent.c_str());
        if (!d) continue;
        while (dirent* e = ::readdir(d)) {
            if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
            pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
            if (pid <= 0 || !whose(pid)) continue;
            dirs.push_back(parent + "/" + e->d_name);
            for (pid_t p : cgroup_tree_pids(dirs.back())) ::kill(p, SIGKILL);
            // A paused session's tasks act on the SIGKILL only once thawed.
            (void)write_file(dirs.back() + (h.unified ? "/cgroup.freeze" : "/freezer.state"), h.unified ? "0" : "THAWED");
        }
        ::closedir(d);
    }
    return remove_cgroups(dirs);
}

// Sandbox cgroups left by a server that died: removed when that pid is gone.
void remove_stale_cgroups(const CgroupLayout& layout, const std::string& relative_parent) {
    if (auto r = remove_server_cgroups(layout, relative_parent, server_gone); !r)
        log::warn("sandbox: a dead server's cgroups: " + r.error().what());
}

// The v1 freezer turns a kernel static key on while any cgroup is freezing and off when the
// last one thaws, and each switch patches the kernel's code on every CPU: on a PVM guest that
// was ~1.2 ms of a fork's 1.4 ms freeze of its parent, and as much again at the thaw, while
// the child built. An empty cgroup of the service's own, frozen while it runs, keeps the key
// on: a fork's freeze then takes 0.1-0.3 ms there. Named for the service, it goes with its
// sandboxes' cgroups, at its stop or a dead service's sweep (remove_server_cgroups thaws).
void hold_v1_freezer_on(const CgroupLayout& layout, const std::string& relative_parent) {
    for (const auto& h : layout.hierarchies) {
        if (h.unified || !hierarchy_has(h, "freezer")) continue;
        std::string dir = h.mountpoint + relative_parent + "/" + std::to_string(::getpid()) + "-freezer";
        if (::mkdir(dir.c_str(), 0755) < 0 && errno != EEXIST) return;
        if (auto frozen = write_file(dir + "/freezer.state", "FROZEN"); !frozen) {
            log::debug("sandbox: " + frozen.error().what());
            ::rmdir(dir.c_str());
        }
        return;
    }
}

}  // namespace

// --- setup ---

void enter_delegated_v2_cgroup(ServerOptions& options) {
    if (!rootless_mode().any()) return;  // root's: sandboxes' cgroups under the hierarchy's root
    auto host = detect_cgroup_layout();
    if (!host || host->mode != CgroupMode::V2 || !host->unified()) return;
    auto own = enter_delegated_cgroup(*host->unified(), "forkbox-daemon", kLimitControllers);
    if (own) {
        options.delegated_cgroup = *own;
        log::info("sandbox: sandboxes' cgroups go under " + *own + kCgroupParentName + " (delegated)");
    } else {
        options.no_delegated_cgroup = own.error().what() +
                                      "; to give a user's daemon cgroups: systemd-run --user --scope -p Delegate=yes forkbox daemon";
    }
}

// The hierarchies sandboxes get cgroups in, their parent made (cgroup_parent_): v2's
// `controllers` are then those the parent enables for its children.
Result<CgroupLayout> Server::sandbox_cgroups(const CgroupLayout& host) {
    CgroupLayout layout = sandbox_layout(host);
    FB_ASSIGN(cgroup_parent_, sandbox_cgroup_parent(layout, mapped_range_, opt_));
    for (auto& h : layout.hierarchies) {
        std::string parent = h.mountpoint + cgroup_parent_;
        if (::mkdir(parent.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("mkdir " + parent);
        if (hierarchy_has(h, "cpuset")) (void)inherit_cpuset(parent, true);
        if (!h.unified) continue;
        // A root daemon's parent is a child of the root: the root enables them first. A
        // user's delegated cgroup has them enabled already (enter_delegated_cgroup).
        if (mapped_range_) FB_TRY(enable_v2_controllers(h.mountpoint, kLimitControllers));
        FB_ASSIGN(h.controllers, enable_v2_controllers(parent, kLimitControllers));
    }
    return layout;
}

Result<void> Server::setup() {
    FB_ASSIGN(signals_, daemon_signalfd());
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return sys_error("epoll_create1");
    dev_null_.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!dev_null_) return sys_error("open /dev/null");
    watch(signals_.get(), EPOLLIN, Watch::Signals, 0);
    watch(handoff_, EPOLLIN, Watch::Handoff, 0);
    watch(listener_, EPOLLIN, Watch::Listener, 0);

    // A private range of ids needs root of the host's user namespace with CAP_SETUID and
    // CAP_SETGID; opening and idmapping the sandboxes' lower layer, CAP_SYS_ADMIN too. Root
    // in a container (Docker's and podman's default: no CAP_SYS_ADMIN) keeps the range and
    // leaves its embryos to build their roots as a user's do; without the range it serves as
    // a user's daemon does, in user namespaces of its own id.
    bool host_root = ::geteuid() == 0 && !rootless_mode().in_user_namespace;
    mapped_range_ = can_map_id_range();
    daemon_lower_ = mapped_range_ && holds_capabilities(uint64_t{1} << CAP_SYS_ADMIN);
    if (mapped_range_ && !daemon_lower_)
        log::warn("sandbox: root without CAP_SYS_ADMIN (in a container?): sandboxes of a private id range build their "
                  "roots as a user's daemon's do: the host's files keep owners they do not map");
    else if (host_root && !mapped_range_)
        log::warn("sandbox: root without CAP_SETUID and CAP_SETGID: serving as a user's daemon does; its sandboxes' "
                  "root is this root, with an owner's rights over its files");
    if (auto host = detect_cgroup_layout()) {
        if (auto layout = sandbox_cgroups(*host)) {
            layout_ = std::move(*layout);
        } else {
            log::warn("sandbox: no cgroups (" + layout.error().what() + "): limits are rlimits");
        }
    }
    limits_ = limit_mechanisms(layout_);
    // The kernel never counts the host root's processes against RLIMIT_NPROC: a sandbox
    // whose root is that root (above) has no process limit without the pids controller.
    limits_.nproc_rlimit_holds = !host_root || mapped_range_;
    if (limits_.cgroups) {
        remove_stale_cgroups(layout_, cgroup_parent_);
        hold_v1_freezer_on(layout_, cgroup_parent_);
    }
    // Searchable: a root daemon's sandbox is an unprivileged uid on the host when it mounts here.
    if (::mkdir(opt_.stage_dir.c_str(), 0755) < 0 && errno != EEXIST) return sys_error("mkdir " + opt_.stage_dir);

    // Planned here once, so a profile that cannot work fails the start, not every request.
    FB_TRY_CTX(sandbox_plan(SandboxKind{}, profile_options(opt_, mapped_range_)), "sandbox profile");
    BuilderConfig config;
    config.options = opt_;
    config.layout = layout_;
    config.limits = limits_;
    config.cgroup_parent = cgroup_parent_;
    config.mapped_range = mapped_range_;
    config.daemon_lower = daemon_lower_;
    // The profile is compiled once; every embryo loads the same program.
    FB_ASSIGN(config.seccomp, compile_seccomp(*sandbox_spec({}, {}).linux->seccomp));
    FB_ASSIGN(builder_, start_builder(config, builder_pidfd_));
    ::fcntl(builder_.get(), F_SETFL, O_NONBLOCK);
    watch(builder_.get(), EPOLLIN, Watch::Builder, 0);
    ::fcntl(handoff_, F_SETFL, O_NONBLOCK);
    pools_[default_kind()];  // the default kind is always kept ready
    return {};
}

void Server::watch(int fd, uint32_t events, Watch w, uint64_t id) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token(w, id);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) log::warn("sandbox: " + errno_text("epoll add"));
}

void Server::rewatch(int fd, uint32_t events, Watch w, uint64_t id) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token(w, id);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void Server::unwatch(int fd) {
    if (fd >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

// --- connections ---

// What a request's "rootfs" or its absence makes the sandbox's lower layer. A group
// member's is looked up with the member's rights (and opened so by the builder).
Result<std::string> Server::sandbox_rootfs(const std::string& requested, const std::optional<HostIdentity>& member) const {
    if (requested.empty()) return opt_.rootfs;
    std::optional<BorrowedFsIdentity> as_member;
    if (member) {
        auto borrowed = BorrowedFsIdentity::borrow(*member);
        if (!borrowed) return std::unexpected(borrowed.error().wrap("rootfs: act as the caller"));
        as_member.emplace(std::move(*borrowed));
    }
    auto root = resolve_sandbox_rootfs(requested);
    if (!root) return std::unexpected(root.error().wrap("rootfs"));
    return root;
}

// A group member's identity (uid, gid and groups as it connected) when its request names
// host paths: the daemon opens them with the member's rights, not its own. None for the
// daemon's own user, or a request that names no host path (so members share pools).
Result<std::optional<HostIdentity>> Server::member_identity(bool names_host_paths, uid_t peer, int conn) const {
    if (!names_host_paths || peer == euid_) return std::nullopt;
    if (!daemon_lower_) return fail(EPERM, "a group member's mounts and rootfs need a daemon with CAP_SYS_ADMIN (idmapped mounts)");
    auto who = peer_identity(conn);
    if (!who) return std::unexpected(who.error().wrap("the caller's identity"));
    return who;
}

bool Server::peer_allowed(int conn, uid_t& peer) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return false;
    peer = cred.uid;
    if (peer == euid_) return true;  // every request of the owner's: no more than this
    if (opt_.allowed_groups.empty()) return false;
    auto who = peer_identity(conn);
    if (!who) return false;
    for (gid_t g : opt_.allowed_groups)
        if (who->gid == g || std::find(who->groups.begin(), who->groups.end(), g) != who->groups.end()) return true;
    return false;
}

void Server::accept_handoff() {
    for (;;) {
        std::vector<unique_fd> fds;
        auto m = receive_with_fds(handoff_, fds, "sandbox handoff");
        if (!m) {
            if (m.error().errnum() == EAGAIN) return;
            log::warn("sandbox: the daemon closed the handoff socket: stopping");
            stopping_ = true;
            return;
        }
        if (m->empty() && fds.empty()) {  // EOF
            stopping_ = true;
            return;
        }
        for (auto& fd : fds) {
            uid_t peer = 0;
            if (!peer_allowed(fd.get(), peer)) {
                reply_final({std::move(fd)}, format_error(ErrorKind::InvalidRequest, "this daemon serves only its own user"));
                continue;
            }
            // The daemon handed it over once its first message was there: read it now.
            serve_first_message({std::move(fd)}, peer);
        }
    }
}

namespace {

// Reads what the client sent and nobody will: closing a unix socket with unread messages
// resets the connection, and the peer's next recv then fails before our last message.
void drain(int conn) {
    char buf[512];
    for (int i = 0; i < 1024 && ::recv(conn, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC) > 0; ++i) {
    }
}

}  // namespace

void Server::accept_connections() {
    int fd;
    auto shed = [](int conn) {
        std::string m = format_error(ErrorKind::Busy, "the daemon is out of file descriptors: try again");
        ::send(conn, m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    };
    while ((fd = acceptor_.accept(shed)) >= 0) classify({unique_fd(fd)});
    if (errno == EMFILE || errno == ENFILE) log::warn("sandbox: " + errno_text("accept"));
}

// A sandbox request is served here; anything else is the zygote loop's (which answers
// garbage too). A connection whose first message is not there yet waits in the epoll set.
void Server::classify(Connection conn) {
    char head[16];
    ssize_t n = ::recv(conn.get(), head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    // A kept connection between requests: stdin or kill messages the client sent before it
    // read the last request's final message are that request's, and dropped (a few at a
    // time: a client that sends more waits for the loop's next turn).
    for (int dropped = 0; conn.keep && n > 0 && is_stdin_or_kill(head[0]); ++dropped) {
        if (dropped == 64) {
            await_request(std::move(conn));
            return;
        }
        ::recv(conn.get(), head, 1, MSG_DONTWAIT | MSG_TRUNC);
        n = ::recv(conn.get(), head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    }
    if (n < 0 && errno == EAGAIN) {
        uint64_t id = next_id_++;
        watch(conn.get(), EPOLLIN | EPOLLRDHUP, Watch::NewConn, id);
        new_conns_[id] = std::move(conn);
        return;
    }
    if (n <= 0) return;
    if (looks_like_sandbox_message(std::string_view(head, static_cast<size_t>(n)))) {
        uid_t peer = 0;
        if (!peer_allowed(conn.get(), peer)) {
            reply_final({std::move(conn.fd)}, format_error(ErrorKind::InvalidRequest, "this daemon serves only its own user"));
            return;
        }
        serve_first_message(std::move(conn), peer);
        return;
    }
    int fd = conn.get();
    (void)send_with_fds(handoff_, "z", std::span<const int>(&fd, 1), "zygote handoff");
}

// A kept connection after its final message. It waits in the epoll set even when its next
// request is there already: serving that one here would recurse once per queued request.
void Server::await_request(Connection conn) {
    unwatch(conn.get());  // as a run's client
    uint64_t id = next_id_++;
    watch(conn.get(), EPOLLIN | EPOLLRDHUP, Watch::NewConn, id);
    new_conns_[id] = std::move(conn);
}

// A request's final message. A client that does not read it loses it, never the daemon its
// time. A connection that is not kept is closed after it, and what the client sent and
// nobody will read is read first (closing over it resets the connection, and the client's
// recv then fails before this message); a kept one keeps what follows: its next request.
void Server::reply_final(Connection conn, const std::string& message) {
    if (!conn) return;
    if (!conn.keep) drain(conn.get());
    ssize_t n = ::send(conn.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (conn.keep && n == static_cast<ssize_t>(message.size())) await_request(std::move(conn));
}

void Server::read_first_message(uint64_t id) {
    auto it = new_conns_.find(id);
    if (it == new_conns_.end()) return;
    Connection conn = std::move(it->second);
    new_conns_.erase(it);
    unwatch(conn.get());
    classify(std::move(conn));
}

// Every socket operation on a client passes MSG_DONTWAIT: its fd stays blocking.
void Server::serve_first_message(Connection conn, uid_t peer) {
    trace::mark("sandbox: request");
    ssize_t n = ::recv(conn.get(), read_buffer_.data(), read_buffer_.size(), MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) {
        uint64_t id = next_id_++;
        watch(conn.get(), EPOLLIN | EPOLLRDHUP, Watch::NewConn, id);
        new_conns_[id] = std::move(conn);
        return;
    }
    if (n <= 0) return;  // gone
    if (static_cast<size_t>(n) > kMaxRequestBytes) {
        reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest,
                                                  "the request is " + std::to_string(n) + " bytes: at most " +
                                                      std::to_string(kMaxRequestBytes) + " are read"));
        return;
    }
    std::string_view message(read_buffer_.data(), static_cast<size_t>(n));
    auto first = split_first_message(message);
    if (!first) {
        reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest, first.error().what()));
        return;
    }
    if (first->verb == "info" || first->verb == "keep") {
        if (auto empty = parse_empty_request(first->body, first->verb); !empty) {
            reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest, empty.error().what()));
            return;
        }
        bool keep = first->verb == "keep";
        std::string reply = std::string(1, kResult) + (keep ? std::string("{\"keep\":true}") : info_json());
        conn.keep = conn.keep || keep;
        reply_final(std::move(conn), reply);
        return;
    }
    if (first->verb != "run") {
        serve_session_verb(std::move(conn), *first, peer);
        return;
    }
    auto request = parse_run_request(first->body, opt_.defaults);
    if (!request) {
        reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest, request.error().what()));
        return;
    }
    if (stopping_) {
        reply_final(std::move(conn), format_error(ErrorKind::SandboxError, "the daemon is stopping"));
        return;
    }
    if (auto member = member_identity(!request->mounts.empty() || !request->rootfs.empty(), peer, conn.get())) {
        request->member = *member;
    } else {
        reply_final(std::move(conn), format_error(ErrorKind::SandboxError, member.error().what()));
        return;
    }
    if (request->session.empty()) {
        auto root = sandbox_rootfs(request->rootfs, request->member);
        if (!root) {
            reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest, root.error().what()));
            return;
        }
        request->rootfs = *root;
    }
    if (!request->session.empty()) {
        Session* s = find_session(request->session, peer, conn);
        if (!s) return;
        Run& r = start_run(std::move(conn), std::move(*request), peer);
        start_in_session(r, *s);
        return;
    }
    if (live_sandboxes() >= static_cast<size_t>(opt_.max_live)) {
        reply_final(std::move(conn), format_error(ErrorKind::Busy, std::to_string(live_sandboxes()) +
                                                                       " sandboxes are live: retry later"));
        return;
    }
    place(start_run(std::move(conn), std::move(*request), peer));
}

// Sessions, and runs in sandboxes of their own (a session's runs are in its sandbox).
size_t Server::live_sandboxes() const {
    size_t n = sessions_.size();
    for (const auto& [id, r] : runs_) n += r->session.empty();
    return n;
}

std::string Server::info_json() {
    size_t ready = 0, held = 0;
    int building = 0;
    for (auto& [k, p] : pools_) {
        ready += p.ready.size();
        building += p.building;
    }
    for (auto& [k, h] : held_) {
        held += h.ready.size();
        building += h.building;
    }
    size_t fds = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') ++fds;
        ::closedir(d);
        --fds;  // the directory's own fd
    }
    Enforcement limits = limits_.enforcement(true);
    json::Writer w;
    w.begin_object();
    w.key("protocol").value(kProtocolVersion);
    w.key("version").value(FORKBOX_VERSION);
    w.key("uid").value(static_cast<uint64_t>(::geteuid()));
    w.key("pid").value(static_cast<int64_t>(::getppid()));  // the daemon's
    w.key("service_pid").value(static_cast<int64_t>(::getpid()));
    w.key("mode").value(mapped_range_ ? "root" : "rootless");
    w.key("idmapped_lower").value(daemon_lower_ && idmapped_lower_);
    w.key("warm_shell").value(opt_.warm_shell);
    w.key("rootfs").value(opt_.rootfs.empty() ? std::string("/") : opt_.rootfs);  // the default lower layer
    // How a session is paused (and held still for a fork): its cgroup's freezer, or SIGSTOP.
    w.key("freezer").value(has_freezer() ? "cgroup" : "signal");
    // Abstract Unix sockets and signals confined to the sandbox (Landlock, kernel 6.12).
    w.key("ipc_scope").value(landlock_scopes_supported() ? "landlock" : "none");
    w.key("limits").begin_object();
    w.key("memory").value(limits.memory).key("pids").value(limits.pids).key("cpu").value(limits.cpu);
    w.end_object();
    w.key("defaults").begin_object();
    w.key("memory_mb").value(opt_.defaults.memory_mb).key("pids").value(opt_.defaults.pids);
    w.key("max_output").value(opt_.defaults.max_output);
    w.end_object();
    w.key("live").value(static_cast<uint64_t>(runs_.size()));
    w.key("sessions").value(static_cast<uint64_t>(sessions_.size()));
    // Sandboxes whose run is over and not reaped yet (they still hold their fds): killed, or
    // answered and killed when their client's turn ends.
    uint64_t exiting = discards_due_.size();
    for (auto& [id, e] : embryos_) exiting += e->retired && !e->reaped;
    w.key("exiting").value(exiting);
    w.key("served").value(served_);
    w.key("failed_builds").value(failed_builds_);
    w.key("built").value(built_);
    // What a sandbox costs off the request path: wall time from asked to ready, and the
    // embryo's own CPU time (the builder's share is not in it).
    w.key("build_ms_mean").value(built_ ? build_ms_total_ / static_cast<double>(built_) : 0.0);
    w.key("build_cpu_ms_mean").value(built_ ? build_cpu_ms_total_ / static_cast<double>(built_) : 0.0);
    w.key("pool").begin_object().key("ready").value(static_cast<uint64_t>(ready)).key("building").value(building);
    w.key("held").value(static_cast<uint64_t>(held));
    w.key("kinds").value(static_cast<uint64_t>(pools_.size())).end_object();  // pools kept, the default's too
    w.key("open_fds").value(static_cast<uint64_t>(fds));
    w.end_object();
    return w.take();
}

// --- the loop ---

void Server::dispatch(const epoll_event& ev) {
    Watch w = static_cast<Watch>(ev.data.u64 >> 56);
    uint64_t id = ev.data.u64 & ((1ull << 56) - 1);
    switch (w) {
        case Watch::Signals: {
            signalfd_siginfo si;
            while (::read(signals_.get(), &si, sizeof si) == sizeof si)
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP) stopping_ = true;
            return;  // SIGCHLD: the pidfds say who
        }
        case Watch::Handoff: accept_handoff(); return;
        case Watch::Listener: accept_connections(); return;
        case Watch::Builder: on_builder(); return;
        case Watch::NewConn: read_first_message(id); return;
        case Watch::Control: on_control(id); return;
        case Watch::Pidfd: on_embryo_exit(id); return;
        default: break;
    }
    auto it = runs_.find(id);
    if (it == runs_.end()) return;
    Run& r = *it->second;
    switch (w) {
        case Watch::Stdout: on_output(r, 0); break;
        case Watch::Stderr: on_output(r, 1); break;
        case Watch::Stdin: on_stdin_writable(r); break;
        case Watch::Timer: on_timer(r); break;
        case Watch::Client: on_client(r, ev.events); break;
        case Watch::LineEnd: on_line_end(r); break;
        case Watch::Killed: on_killed(r); break;
        default: break;
    }
}

void Server::shutdown() {
    // The daemon's listener first: a daemon started after this one's death must not find it
    // still accepting (zygote/daemon.cpp asks again for a moment, then gives up).
    unwatch(listener_);
    ::close(listener_);
    listener_ = -1;
    for (auto& [id, r] : runs_) {
        if (!r->client_gone && !r->replied) {
            std::string m = format_error(ErrorKind::SandboxError, "the daemon stopped");
            ::send(r->conn.get(), m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        r->replied = true;
    }
    for (auto& [id, s] : sessions_)
        if (s->frozen) (void)freeze_session(*s, false);  // a frozen v1 task cannot die
    for (auto& [id, f] : forks_) {
        std::string m = format_error(ErrorKind::SandboxError, "the daemon stopped");
        if (f->conn) ::send(f->conn.get(), m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    forks_.clear();
    sessions_.clear();
    session_by_embryo_.clear();
    std::vector<uint64_t> ids;
    for (auto& [id, e] : embryos_) ids.push_back(id);
    for (uint64_t id : ids) discard_embryo(id);
    runs_.clear();
    // Every cgroup of this service's, here, not by the builder, which dies with this process:
    // those of embryos, of one still being built (no builder's answer will undo it now), and
    // of ended sandboxes whose removal the builder had not made yet (a daemon stopped during
    // a pool refill left them). First the builder ends: its socket closed, it finishes what
    // it was doing (a build's cgroups made while they were swept outlived both) and exits;
    // an embryo it made meanwhile exits as its control socket closes.
    unwatch(builder_.get());
    builder_.reset();
    if (builder_pidfd_ && !wait_pidfd_exit(builder_pidfd_.get(), 5000)) {
        sys::pidfd_send_signal(builder_pidfd_.get(), SIGKILL);
        (void)wait_pidfd_exit(builder_pidfd_.get(), 1000);
    }
    if (limits_.cgroups) {
        pid_t self = ::getpid();
        (void)remove_server_cgroups(layout_, cgroup_parent_, [self](pid_t pid) { return pid == self; });
    }
}

int Server::run() {
    if (auto s = setup(); !s) {
        log::error("sandbox: " + s.error().what());
        return 1;
    }
    log::info("sandbox service ready (" + std::string(mapped_range_ ? "root" : "rootless") +
              (limits_.cgroups ? ", cgroups" : ", no cgroups") + "; memory " + limits_.enforcement(true).memory +
              ", pids " + limits_.enforcement(true).pids + ", cpu " + limits_.enforcement(true).cpu + ")");
    epoll_event events[64];
    while (!stopping_) {
        auto now = Clock::now();
        auto quiet_until = builds_wait_until();
        bool want_refill = false;
        for (auto& [k, p] : pools_)
            want_refill |= static_cast<int>(p.ready.size()) + p.building < opt_.pool_size &&
                           (p.failures < kBuildFailuresBeforePause || now >= p.retry_at) &&
                           (p.ready.empty() || now >= quiet_until);
        want_refill |= now >= quiet_until && held_wants_refill(now);
        // A fork's children build themselves on every CPU until it is answered: a refill
        // then would only slow it down.
        if (!forks_.empty()) want_refill = false;
        // Requests first: embryos are made only when nothing else waits.
        int next_expiry = expire_sessions();
        int idle_wait = next_expiry >= 0 ? std::min(next_expiry, 10000) : 10000;
        if (int held_look = retire_unneeded_held(); held_look >= 0) idle_wait = std::min(idle_wait, held_look);
        if (int pool_look = retire_unasked_pools(); pool_look >= 0) idle_wait = std::min(idle_wait, pool_look);
        if (int due = discard_due_embryos(); due >= 0) idle_wait = std::min(idle_wait, due);
        if (int due = end_due_session_turns(); due >= 0) idle_wait = std::min(idle_wait, due);
        if (now < quiet_until)
            idle_wait = std::min(idle_wait, static_cast<int>(ms_between(now, quiet_until)) + 1);
        if (poll_awake() == 0) {  // a deadline is near: awake, no builds
            want_refill = false;
            idle_wait = 0;
        }
        int n = ::epoll_wait(epoll_.get(), events, 64, want_refill ? 0 : idle_wait);
        if (n < 0 && errno != EINTR) {
            log::error("sandbox: " + errno_text("epoll_wait"));
            break;
        }
        if (n == 0 && want_refill) {
            if (!refill_one()) {
                n = ::epoll_wait(epoll_.get(), events, 64, std::min(idle_wait, 1000));
                if (n < 0) n = 0;
            }
        }
        for (int i = 0; i < n; ++i) dispatch(events[i]);
    }
    shutdown();
    return 0;
}

int serve_sandboxes(int handoff, int listener, const ServerOptions& options) {
    Server s(handoff, listener, options);
    return s.run();
}

bool can_map_id_range() {
    return ::geteuid() == 0 && !rootless_mode().in_user_namespace &&
           holds_capabilities((uint64_t{1} << CAP_SETUID) | (uint64_t{1} << CAP_SETGID));
}

Result<std::string> resolve_sandbox_rootfs(const std::string& path) {
    std::string dir = path;
    // A bundle: its config.json names the root, relative to the bundle or absolute. Read in
    // the service's loop: a config.json of any size is not.
    struct stat config_st;
    std::string config_path = path + "/config.json";
    if (::stat(config_path.c_str(), &config_st) == 0 && config_st.st_size > (16 << 20))
        return fail(EFBIG, config_path + " is larger than 16 MiB");
    if (auto config = read_file(config_path)) {
        auto doc = json::Document::parse(*config);
        if (!doc) return fail(EINVAL, config_path + ": " + doc.error().what());
        std::string root_path;
        if (auto root = doc->root().get("root"))
            if (auto p = root->get("path"))
                if (auto text = p->as_string()) root_path = *text;
        if (root_path.empty()) return fail(EINVAL, config_path + " has no root.path");
        dir = root_path[0] == '/' ? root_path : path + "/" + root_path;
    }
    char resolved[PATH_MAX];
    if (!::realpath(dir.c_str(), resolved)) return sys_error(dir);
    struct stat st;
    if (::stat(resolved, &st) < 0) return sys_error(resolved);
    if (!S_ISDIR(st.st_mode)) return fail(ENOTDIR, std::string(resolved) + " is not a directory");
    std::string out = resolved;
    return out == "/" ? std::string() : out;
}

}  // namespace forkbox::sandbox
