#include "libforkbox/sandbox/server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/delegation.hpp"
#include "libforkbox/cgroup/oom.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/cgroup/stats.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/caps.hpp"
#include "libforkbox/process/credentials.hpp"
#include "libforkbox/process/landlock.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/sandbox/builder.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/service.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

namespace forkbox::sandbox {

namespace {

constexpr const char* kCgroupParentName = "/forkbox-sandbox";
constexpr size_t kStdinBufferLimit = 1 << 20;  // past this, the client is not read
constexpr int kBuildFailuresBeforePause = 3;
// A command released this recently has the machine to itself: a pool that still holds a
// sandbox is refilled after it (or once it has run this long). A build costs ~3 ms of CPU,
// which on a small machine would otherwise come out of the command's start and exit.
constexpr auto kQuietAfterRelease = std::chrono::milliseconds(30);
// Held embryos (HeldPool): kept this long after the kind's last session ended (a tree
// search may close a parent before it forks a child), retried this long after a failure.
constexpr auto kHeldLinger = std::chrono::seconds(2);
constexpr auto kHeldRetry = std::chrono::seconds(10);

std::string errno_text(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }


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
    // Sandboxes whose run is over, killed and not reaped yet (they still hold their fds).
    uint64_t exiting = 0;
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

// --- embryos ---

Result<uint64_t> Server::start_embryo(const SandboxKind& kind, uint64_t reserved_for, int fork_source, bool hold) {
    auto e = std::make_unique<Embryo>();
    e->id = next_id_++;
    e->kind = kind;
    e->run = reserved_for;
    e->pooled = reserved_for == 0 && !hold;
    e->held = hold;
    e->fork = fork_source >= 0;
    if (limits_.cgroups) {
        e->applied = cgroup_limits(limits_, opt_.defaults.memory_mb, opt_.defaults.pids, 0);
        std::string path = embryo_cgroup_path(cgroup_parent_, ::getpid(), e->id);
        for (const auto& h : layout_.hierarchies) e->cgroup_dirs.push_back(h.mountpoint + path);
    }
    std::string m = (hold ? "H" : "B") + std::to_string(e->id) + "\n" + encode_kind(kind);
    std::vector<int> fds;
    if (fork_source >= 0) fds.push_back(fork_source);
    FB_TRY_CTX(send_with_fds(builder_.get(), m, fds, "sandbox builder"), "ask the sandbox builder");
    if (e->pooled) ++pools_[kind].building;
    if (e->held) ++held_[kind].building;
    uint64_t id = e->id;
    embryos_[id] = std::move(e);
    return id;
}

void Server::remove_later(const std::vector<std::string>& dirs, unique_fd mount_ns) {
    if (dirs.empty() && !mount_ns) return;
    std::string m = "D";
    for (const auto& d : dirs) m += d + std::string(1, '\0');
    std::vector<int> fds;
    if (mount_ns) fds.push_back(mount_ns.get());
    (void)send_with_fds(builder_.get(), m, fds, "sandbox builder");
}

void Server::on_builder() {
    for (;;) {
        std::vector<unique_fd> fds;
        auto m = receive_with_fds(builder_.get(), fds, "sandbox builder");
        if (!m) {
            if (m.error().errnum() == EAGAIN) return;
            log::error("sandbox: the builder is gone: " + m.error().what());
            stopping_ = true;
            return;
        }
        if (m->empty()) {
            log::error("sandbox: the builder exited");
            stopping_ = true;
            return;
        }
        uint64_t id = std::strtoull(m->c_str() + 1, nullptr, 10);
        std::string rest = m->substr(std::min(m->size(), m->find(' ') + 1));
        if ((*m)[0] == 'F') {
            build_failed(id, rest);
            continue;
        }
        if ((*m)[0] != 'E' || fds.size() < 2) continue;
        pid_t pid = static_cast<pid_t>(std::strtol(rest.c_str(), nullptr, 10));
        auto it = embryos_.find(id);
        if (it == embryos_.end()) {  // given up on while it was made
            sys::pidfd_send_signal(fds[0].get(), SIGKILL);
            ::waitpid(pid, nullptr, 0);
            if (limits_.cgroups) {
                std::vector<std::string> dirs;
                for (const auto& h : layout_.hierarchies) dirs.push_back(h.mountpoint + embryo_cgroup_path(cgroup_parent_, ::getpid(), id));
                remove_later(dirs);
            }
            continue;
        }
        Embryo& e = *it->second;
        e.pid = pid;
        e.pidfd = std::move(fds[0]);
        e.control = std::move(fds[1]);
        ::fcntl(e.control.get(), F_SETFL, O_NONBLOCK);
        // What this host gives the owner's sandboxes (a member's lower is unmapped by choice).
        if (!e.kind.unmapped_lower) idmapped_lower_ = rest.find("idmapped") != std::string::npos;
        embryo_by_pid_[pid] = id;
        watch(e.control.get(), EPOLLIN, Watch::Control, id);
        watch(e.pidfd.get(), EPOLLIN, Watch::Pidfd, id);
        if (e.held) {
            HeldPool& held = held_[e.kind];
            --held.building;
            e.state = Embryo::State::Held;
            if (fds.size() > 2) e.held_lower = std::move(fds[2]);
            if (static_cast<int>(held.ready.size()) < held.want) {
                held.ready.push_back(id);
            } else {  // no longer wanted (the kind's sessions ended meanwhile)
                e.retire();
            }
        }
    }
}

void Server::on_control(uint64_t embryo_id) {
    auto it = embryos_.find(embryo_id);
    if (it == embryos_.end()) return;
    Embryo& e = *it->second;
    if (!e.control) return;
    std::vector<unique_fd> fds;
    auto received = receive_with_fds(e.control.get(), fds, "sandbox control");  // non-blocking
    if (!received && received.error().errnum() == EAGAIN) return;
    if (!received || received->empty()) {  // closed: the embryo exited (its pidfd says so too)
        e.control.reset();
        return;
    }
    std::string_view m(*received);
    if (e.state == Embryo::State::Session) {
        on_session_message(e, m, fds);
    } else if (e.state == Embryo::State::Building && m == "C") {
        e.copied = true;
        if (auto r = runs_.find(e.run); r != runs_.end()) fork_child_copied(r->second->job, e.run);
    } else if (e.state == Embryo::State::Building && m.front() == 'R' && (m.size() == 1 || m[1] == ' ')) {
        if (m.size() > 2) e.python_cpu_ms = static_cast<double>(std::strtoull(std::string(m.substr(2)).c_str(), nullptr, 10)) / 1e6;
        if (fds.size() == 1) e.stage = std::move(fds[0]);
        embryo_ready(e);
    } else if (m.front() == 'F') {
        e.failure = std::string(m.substr(1));
    } else if (m.front() == 'X' && e.state == Embryo::State::Running) {
        if (auto r = runs_.find(e.run); r != runs_.end()) {
            std::string_view text = m.substr(1);
            text.remove_prefix(std::min(text.size(), text.find(' ') + 1));
            r->second->exec_error = std::string(text);
        }
    } else if (m.front() == 'W' && e.state == Embryo::State::Running) {
        // The command's end, before its init's: the reply need not wait for init's exit.
        auto r = runs_.find(e.run);
        if (r == runs_.end() || r->second->exited) return;
        Run& run = *r->second;
        trace::mark("sandbox: command ended");
        take_end_report(run, m.substr(1));
        run.timer.reset();
        maybe_finish(run);
    }
}

// "<wait status> <user us> <system us> <max rss KiB> <written bytes> [<ended, monotonic ns>]":
// a run's end, from its sandbox's init ("W", or "w<id> " in a session). The end is when the
// init reaped the command, not when this process got to the report (an idle vCPU's wake-up
// later): taken when it lies between the release and now (the init runs beside untrusted code).
void take_end_report(Run& r, std::string_view report) {
    unsigned long long status = 0, user_us = 0, system_us = 0, rss_kb = 0, ended_ns = 0;
    long long written = 0;
    std::sscanf(std::string(report).c_str(), "%llu %llu %llu %llu %lld %llu", &status, &user_us, &system_us, &rss_kb,
                &written, &ended_ns);
    r.exited = true;
    r.status = static_cast<int>(status);
    r.ended = Clock::now();
    Clock::time_point reported{std::chrono::nanoseconds(ended_ns)};
    if (ended_ns != 0 && reported >= r.released && reported <= r.ended) {
        r.ended = reported;
        // Ended before its deadline, reported after it (the timer's event came first): not
        // timed out, whatever the deadline's handling did to what the command left behind.
        if (r.timed_out && r.request.timeout_ms && r.ended < r.deadline) r.timed_out = false;
    }
    // Killed at the deadline and seen dead by the service before the init reaped it.
    if (r.timed_out && r.killed_seen_dead && *r.killed_seen_dead >= r.released && *r.killed_seen_dead < r.ended)
        r.ended = *r.killed_seen_dead;
    r.usage.ru_utime.tv_sec = static_cast<time_t>(user_us / 1000000);
    r.usage.ru_utime.tv_usec = static_cast<suseconds_t>(user_us % 1000000);
    r.usage.ru_stime.tv_sec = static_cast<time_t>(system_us / 1000000);
    r.usage.ru_stime.tv_usec = static_cast<suseconds_t>(system_us % 1000000);
    r.usage.ru_maxrss = static_cast<long>(rss_kb);
    r.usage_is_command = true;
    r.written_bytes = written;
}

void Server::embryo_ready(Embryo& e) {
    e.state = Embryo::State::Ready;
    ++built_;
    build_ms_total_ += ms_between(e.asked, Clock::now());
    e.mount_ns.reset(::open(("/proc/" + std::to_string(e.pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
    // schedstat's first field: nanoseconds on a CPU so far.
    if (auto text = read_file("/proc/" + std::to_string(e.pid) + "/schedstat"))
        e.setup_cpu_ms = static_cast<double>(std::strtoull(text->c_str(), nullptr, 10)) / 1e6;
    build_cpu_ms_total_ += e.setup_cpu_ms + e.python_cpu_ms;
    open_usage_files(e);
    if (e.pooled) {
        Pool& pool = pools_[e.kind];
        --pool.building;
        pool.failures = 0;
    }
    if (e.run) {
        auto r = runs_.find(e.run);
        if (r != runs_.end() && !r->second->started) {
            release(*r->second, e);
            return;
        }
        e.run = 0;  // its client left, or another embryo served it
    }
    if (e.fork) {  // a copy of one sandbox's state is for its own request alone
        e.retire();
        return;
    }
    // A request of this kind waiting for the embryo made for it takes this one; that one
    // joins the pool when it is ready (a fork's children wait for their own).
    for (auto& [id, run] : runs_) {
        if (run->started || run->kind != e.kind || run->job || !run->session.empty()) continue;
        if (auto own = embryos_.find(run->embryo); own != embryos_.end()) own->second->run = 0;
        release(*run, e);
        return;
    }
    Pool& pool = pools_[e.kind];
    if (e.kind.mounts.empty() && static_cast<int>(pool.ready.size()) + pool.building < opt_.pool_size) {
        make_output_pipes(e, can_end_lines_early(e));
        pool.ready.push_back(e.id);
        return;
    }
    // Binds are one request's; a pool never holds more than it was told to.
    e.retire();
}

void Server::discard_embryo(uint64_t embryo_id) {
    auto it = embryos_.find(embryo_id);
    if (it == embryos_.end()) return;
    Embryo& e = *it->second;
    if (!e.reaped && e.pidfd) {
        sys::pidfd_send_signal(e.pidfd.get(), SIGKILL);
        if (!stopping_ && (e.state == Embryo::State::Running || e.state == Embryo::State::Session)) {
            // Its command (or session) has ended: its exit is reaped when its pidfd says so.
            e.retired = true;
            e.run = 0;
            return;
        }
        ::waitpid(e.pid, nullptr, 0);  // pid 1 of its namespace: gone once its namespace is
        e.reaped = true;
    }
    embryo_by_pid_.erase(e.pid);
    // Not made yet (no pid): the builder's answer finds no embryo and undoes it.
    if (e.pid > 0) remove_later(e.cgroup_dirs, std::move(e.mount_ns));
    embryos_.erase(it);
}

void Server::on_embryo_exit(uint64_t embryo_id) {
    auto it = embryos_.find(embryo_id);
    if (it == embryos_.end()) return;
    Embryo& e = *it->second;
    if (e.state == Embryo::State::Session) {
        // What it said before it exited comes first: the ends of its runs.
        for (int i = 0; i < 64 && embryos_.count(embryo_id) && it->second->control; ++i) on_control(embryo_id);
        if (!embryos_.count(embryo_id)) return;
        if (!e.retired) {
            if (auto s = session_by_embryo_.find(embryo_id); s != session_by_embryo_.end()) {
                close_session(s->second, "its init exited");
            } else if (auto r = runs_.find(e.run); r != runs_.end()) {
                fail_run(*r->second, ErrorKind::SandboxError, "could not make the session: its init exited");
            }
        }
        if (!embryos_.count(embryo_id) || e.reaped) return;
        if (::waitpid(e.pid, nullptr, WNOHANG) <= 0) return;
        e.reaped = true;
        discard_embryo(embryo_id);
        return;
    }
    if (e.state == Embryo::State::Running) {
        // What it said before it exited ("X", "W") comes first: the command's own status.
        for (int i = 0; i < 8 && embryos_.count(embryo_id) && it->second->control; ++i) on_control(embryo_id);
        if (!embryos_.count(embryo_id)) return;
        auto r = runs_.find(e.run);
        if (r != runs_.end() && !r->second->replied) {
            Run& run = *r->second;
            int status = 0;
            rusage usage{};
            if (::wait4(e.pid, &status, WNOHANG, &usage) <= 0) return;
            e.reaped = true;
            e.pidfd.reset();
            if (!run.exited) {  // killed (the deadline, a disconnect) before the command ended
                run.exited = true;
                run.status = status;
                run.ended = Clock::now();
                run.usage = usage;
                run.timer.reset();
            }
            maybe_finish(run);
            return;
        }
        // Its run was answered (or dropped) already: only its exit is left to reap.
        if (::waitpid(e.pid, nullptr, WNOHANG) <= 0) return;
        e.reaped = true;
        discard_embryo(embryo_id);
        return;
    }
    // Died before any request: a failed build, unless it was retired.
    int status = 0;
    if (::waitpid(e.pid, &status, WNOHANG) <= 0) return;
    e.reaped = true;
    if (e.retired) {
        discard_embryo(embryo_id);
        return;
    }
    build_failed(embryo_id, e.failure.empty() ? "the sandbox's first process exited (status " + std::to_string(status) + ")"
                                              : e.failure);
}

void Server::build_failed(uint64_t embryo_id, const std::string& why) {
    auto it = embryos_.find(embryo_id);
    if (it == embryos_.end()) return;
    Embryo& e = *it->second;
    if (e.pid <= 0) remove_later(e.cgroup_dirs);  // the builder may have made them
    if (e.state == Embryo::State::Building) {
        ++failed_builds_;
        if (e.pooled) {
            Pool& pool = pools_[e.kind];
            --pool.building;
            if (++pool.failures >= kBuildFailuresBeforePause) pool.retry_at = Clock::now() + std::chrono::seconds(10);
        }
        if (e.held) {
            HeldPool& held = held_[e.kind];
            --held.building;
            held.retry_at = Clock::now() + kHeldRetry;
        }
        log::warn("sandbox: could not make a sandbox: " + why);
        // Not a pool of its own for a kind never pooled (binds): refill would keep trying it.
        if (auto pool = pools_.find(e.kind); pool != pools_.end()) pool->second.last_error = why;
    } else if (e.state == Embryo::State::Held) {
        ++failed_builds_;
        HeldPool& held = held_[e.kind];
        std::erase(held.ready, e.id);
        held.retry_at = Clock::now() + kHeldRetry;
        log::warn("sandbox: a sandbox held for forks failed: " + why);
    } else if (auto p = pools_.find(e.kind); p != pools_.end()) {
        std::erase(p->second.ready, e.id);
    }
    uint64_t run_id = e.run;
    discard_embryo(embryo_id);
    if (run_id) {
        if (auto r = runs_.find(run_id); r != runs_.end()) fail_run(*r->second, ErrorKind::SandboxError, "could not make the sandbox: " + why);
    }
}

// Until when a command just released runs undisturbed by builds (kQuietAfterRelease).
Clock::time_point Server::builds_wait_until() const {
    Clock::time_point until{};
    for (auto& [id, r] : runs_)
        if (r->purpose == Run::Purpose::Command && r->started && !r->exited)
            until = std::max(until, r->released + kQuietAfterRelease);
    return until;
}

// One embryo for a pool below its size, if any: called when the loop is idle.
bool Server::refill_one() {
    if (stopping_) return false;
    auto now = Clock::now();
    for (auto& [kind, pool] : pools_) {
        if (static_cast<int>(pool.ready.size()) + pool.building >= opt_.pool_size) continue;
        if (pool.failures >= kBuildFailuresBeforePause && now < pool.retry_at) continue;
        if (embryos_.size() >= static_cast<size_t>(opt_.max_live + 4 * opt_.pool_size)) return false;
        SandboxKind k = kind;
        auto id = start_embryo(k, 0);
        if (!id) {
            ++pool.failures;
            ++failed_builds_;
            pool.retry_at = now + std::chrono::seconds(10);
            log::warn("sandbox: could not make a sandbox: " + id.error().what());
        }
        return true;
    }
    return refill_held_one();
}

bool Server::held_wants_refill(Clock::time_point now) const {
    if (stopping_) return false;
    for (const auto& [kind, held] : held_)
        if (static_cast<int>(held.ready.size()) + held.building < held.want && now >= held.retry_at) return true;
    return false;
}

// One held embryo for a HeldPool below what it wants: after the pools, which serve runs.
bool Server::refill_held_one() {
    if (stopping_) return false;
    auto now = Clock::now();
    for (auto& [kind, held] : held_) {
        if (static_cast<int>(held.ready.size()) + held.building >= held.want || now < held.retry_at) continue;
        if (embryos_.size() >= static_cast<size_t>(opt_.max_live + 4 * opt_.pool_size)) return false;
        SandboxKind k = kind;
        if (auto id = start_embryo(k, 0, -1, true); !id) {
            ++failed_builds_;
            held.retry_at = now + kHeldRetry;
            log::warn("sandbox: could not make a sandbox to hold for forks: " + id.error().what());
        }
        return true;
    }
    return false;
}

// Kills the embryos a pool kept ready (still alive), and forgets them.
void Server::retire_ready(std::deque<uint64_t>& ready) {
    for (uint64_t id : ready) {
        auto e = embryos_.find(id);
        if (e != embryos_.end() && !e->second->reaped) e->second->retire();
    }
    ready.clear();
}

SandboxKind Server::default_kind() const {
    SandboxKind k;
    k.rootfs = opt_.rootfs;
    return k;
}

// Pools of kinds not asked for in --evict-after: their ready embryos are killed and the pool
// forgotten (one still building stays until its embryo is ready). Not the default kind's:
// every preload list and rootfs asked for would otherwise keep sandboxes forever.
int Server::retire_unasked_pools() {
    auto now = Clock::now();
    const auto linger = std::chrono::seconds(opt_.evict_after_s);
    const SandboxKind always = default_kind();
    int next = -1;
    for (auto it = pools_.begin(); it != pools_.end();) {
        Pool& pool = it->second;
        bool asked_lately = now < pool.asked + linger;
        if (it->first == always || pool.building > 0 || asked_lately) {
            // One still building is looked at again when its embryo is ready (an event).
            if (asked_lately && !(it->first == always)) {
                int ms = static_cast<int>(ms_between(now, pool.asked + linger)) + 1;
                next = next < 0 ? ms : std::min(next, ms);
            }
            ++it;
            continue;
        }
        retire_ready(pool.ready);
        it = pools_.erase(it);
    }
    return next;
}

// Held embryos of kinds no session has had for kHeldLinger are killed.
int Server::retire_unneeded_held() {
    if (held_.empty()) return -1;
    auto now = Clock::now();
    int next = -1;
    for (auto it = held_.begin(); it != held_.end();) {
        HeldPool& held = it->second;
        if (std::any_of(sessions_.begin(), sessions_.end(), [&](const auto& s) { return s.second->kind == it->first; })) {
            held.needed = now;
            ++it;
            continue;
        }
        if (now < held.needed + kHeldLinger) {
            int ms = static_cast<int>(ms_between(now, held.needed + kHeldLinger)) + 1;
            next = next < 0 ? ms : std::min(next, ms);
            ++it;
            continue;
        }
        retire_ready(held.ready);
        held.want = 0;
        it = held.building ? std::next(it) : held_.erase(it);
    }
    return next;
}

// --- runs ---

Run& Server::start_run(Connection conn, RunRequest request, uid_t peer) {
    auto r = std::make_unique<Run>();
    r->id = next_id_++;
    r->conn = std::move(conn);
    r->peer = peer;
    r->kind.network = request.network;
    r->kind.mounts = request.mounts;
    r->kind.unmapped_lower = peer != euid_;
    r->kind.member = request.member;
    r->kind.rootfs = request.rootfs;
    // A warm Python for a run of its own; in a session, python3 -c runs like any command.
    r->kind.python = request.python.has_value() && request.session.empty();
    r->kind.preload = request.preload;
    if (!r->kind.python) r->kind.preload.clear();
    r->session = request.session;
    r->request = std::move(request);
    r->capture[0].emplace(r->request.max_output);
    r->capture[1].emplace(r->request.max_output);
    Run& run = *r;
    runs_[run.id] = std::move(r);
    if (run.conn) watch(run.conn.get(), EPOLLIN | EPOLLRDHUP, Watch::Client, run.id);
    return run;
}

// A sandbox for `r`: a ready one of its kind, or one made for it.
void Server::place(Run& r) {
    // A kind asked for is kept ready from now on, but binds make a kind of one request.
    if (r.kind.mounts.empty()) {
        Pool& pool = pools_[r.kind];
        pool.asked = Clock::now();
        if (!pool.ready.empty()) {
            uint64_t eid = pool.ready.front();
            pool.ready.pop_front();
            release(r, *embryos_.at(eid));
            return;
        }
        if (pool.failures >= kBuildFailuresBeforePause && Clock::now() < pool.retry_at) {
            fail_run(r, ErrorKind::SandboxError, "sandboxes of this kind fail to build here: " + pool.last_error);
            return;
        }
    }
    auto id = start_embryo(r.kind, r.id);
    if (!id) {
        fail_run(r, ErrorKind::SandboxError, "could not make the sandbox: " + id.error().what());
        return;
    }
    r.embryo = *id;
}

// A sandbox's limits, as this host enforces them: on its cgroups, and as rlimits in `release`
// for the controllers it lacks.
Result<void> Server::limit_sandbox(Embryo& e, uint64_t memory_mb, uint64_t pids, double cpus, Release& release) {
    if (limits_.cgroups) FB_TRY(apply_limits(e, cgroup_limits(limits_, memory_mb, pids, cpus)));
    Rlimits rlimits = rlimits_for(limits_, memory_mb, pids);
    release.nproc_limit = rlimits.nproc;
    release.address_limit = rlimits.address;
    return {};
}

// The limits of `want` on the embryo's cgroups, where they differ from what they have.
Result<void> Server::apply_limits(Embryo& e, const oci::Resources& limits) {
    oci::Resources want = limits;
    bool same = want.memory.has_value() == e.applied.memory.has_value() &&
                (!want.memory || want.memory->limit == e.applied.memory->limit) && want.pids_limit == e.applied.pids_limit &&
                want.cpu.has_value() == e.applied.cpu.has_value() && (!want.cpu || want.cpu->quota == e.applied.cpu->quota);
    if (same) return {};
    // What the request leaves out is unlimited, not the embryo's default.
    if (!want.memory && limits_.memory) {
        want.memory.emplace();
        want.memory->limit = -1;
    }
    if (!want.pids_limit && limits_.pids) want.pids_limit = -1;
    if (!want.cpu && limits_.cpu) {
        want.cpu.emplace();
        want.cpu->quota = -1;
        want.cpu->period = 100000;
    }
    FB_ASSIGN(auto writes, plan_cgroup_writes(want, layout_));
    FB_TRY(apply_cgroup_writes(writes, layout_, e.cgroup_dirs));
    e.applied = limits;
    return {};
}

// A pooled embryo's output pipes, made while it waits for a request, not on the request's
// path: their sendmsg with fds was most of the release's cost (~50 us of ~120 between an
// agent's calls). Without them (a failure here) the release carries all three.
void Server::make_output_pipes(Embryo& e, bool line_end) {
    int out_pipe[2], err_pipe[2], end_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) < 0) return;
    unique_fd out_read(out_pipe[0]), out_write(out_pipe[1]);
    if (::pipe2(err_pipe, O_CLOEXEC) < 0) return;
    unique_fd err_read(err_pipe[0]), err_write(err_pipe[1]);
    unique_fd end_read, end_write;
    if (line_end && ::pipe2(end_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
        end_read.reset(end_pipe[0]);
        end_write.reset(end_pipe[1]);
    }
    int ends[3] = {out_write.get(), err_write.get(), end_write.get()};
    if (!send_with_fds(e.control.get(), "N", std::span<const int>(ends, end_write ? 3 : 2), "sandbox output pipes")) return;
    e.output_ready[0] = std::move(out_read);
    e.output_ready[1] = std::move(err_read);
    e.line_end_ready = std::move(end_read);
}

// A line's end from its shell, before the shell's exit, leaves no rusage: only when the
// sandbox's CPU time and peak memory are read from its cgroup, and the growth of its
// writable layer from its stage. A warm Python's embryo starts no shell.
bool Server::can_end_lines_early(const Embryo& e) const {
    return opt_.warm_shell && !e.kind.python && e.cpu_usage && e.memory_peak && e.stage;
}

// The run's pipes: ours in `r`, the command's ends in `child_ends` and `stdio`: stdin (its
// pipe or /dev/null), then stdout and stderr unless the embryo has them already. Returns how many fds the release carries (0: failed).
size_t Server::open_pipes(Run& r, Embryo& e, int* stdio, unique_fd* child_ends, bool take_ready) {
    int in_pipe[2] = {-1, -1};
    if (r.request.stdin_frames) {
        if (::pipe2(in_pipe, O_CLOEXEC) < 0) return 0;
        child_ends[0].reset(in_pipe[0]);
        r.in.reset(in_pipe[1]);
    }
    stdio[0] = child_ends[0] ? child_ends[0].get() : dev_null_.get();
    if (take_ready && e.output_ready[0] && e.output_ready[1]) {
        r.out[0] = std::move(e.output_ready[0]);
        r.out[1] = std::move(e.output_ready[1]);
        if (e.line_end_ready) {  // said on only if the warm shell takes the command
            r.line_end = std::move(e.line_end_ready);
            r.stage_used_at_release = filesystem_bytes_used(e.stage.get());
        }
        return 1;
    }
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) < 0) return 0;
    child_ends[1].reset(out_pipe[1]);
    r.out[0].reset(out_pipe[0]);
    if (::pipe2(err_pipe, O_CLOEXEC) < 0) return 0;
    child_ends[2].reset(err_pipe[1]);
    r.out[1].reset(err_pipe[0]);
    stdio[1] = child_ends[1].get();
    stdio[2] = child_ends[2].get();
    return 3;
}

// A sleeping service wakes 0.1-0.25 ms after its timer expires here (an idle vCPU's wake-up),
// which was most of the watchdog's overshoot. So the timer fires this much before the
// deadline and the run loop polls, awake, until the deadline itself (poll_awake):
// at most this much CPU per run that reaches its deadline, none for one that ends before.
constexpr auto kDeadlineLead = std::chrono::microseconds(300);

void Server::arm_deadline(Run& r) {
    if (!r.request.timeout_ms) return;
    r.deadline = r.released + std::chrono::milliseconds(*r.request.timeout_ms);
    r.timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    itimerspec when{};
    auto lead = std::max(Clock::duration::zero(), r.deadline - kDeadlineLead - Clock::now());
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(lead).count();
    when.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
    when.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
    if (ns == 0) when.it_value.tv_nsec = 1;  // zero would disarm it
    if (r.timer && ::timerfd_settime(r.timer.get(), 0, &when, nullptr) == 0) {
        watch(r.timer.get(), EPOLLIN, Watch::Timer, r.id);
    } else {
        kill_sandbox(r);  // a deadline that cannot be kept is not run
        r.exec_error = "the daemon could not arm the deadline";
    }
}

void Server::watch_pipes(Run& r) {
    for (int s = 0; s < 2; ++s) {
        r.out_open[s] = true;
        watch(r.out[s].get(), EPOLLIN, s == 0 ? Watch::Stdout : Watch::Stderr, r.id);
    }
    if (r.line_end) watch(r.line_end.get(), EPOLLIN, Watch::LineEnd, r.id);
    if (r.in) {
        ::fcntl(r.in.get(), F_SETFL, O_NONBLOCK);
        watch(r.in.get(), 0, Watch::Stdin, r.id);
        // Input that came while the sandbox was being made.
        if (!r.stdin_buffer.empty() || r.stdin_end) on_stdin_writable(r);
    }
}

void Server::release(Run& r, Embryo& e) {
    r.embryo = e.id;
    e.run = r.id;
    ++served_;
    if (r.purpose == Run::Purpose::MakeSession) {
        release_session(r, e);
        return;
    }
    e.state = Embryo::State::Running;

    Release rel;
    rel.argv = r.request.argv;
    rel.env = r.request.env;
    rel.cwd = r.request.cwd;
    rel.drop_all_caps = r.request.drop_all_caps;
    rel.warm_python = e.kind.python;
    if (auto limited = limit_sandbox(e, r.request.memory_mb, r.request.pids, r.request.cpus, rel); !limited) {
        fail_run(r, ErrorKind::SandboxError, "sandbox limits: " + limited.error().what());
        return;
    }

    int stdio[3];
    unique_fd child_ends[3];
    size_t carried = open_pipes(r, e, stdio, child_ends, true);
    if (!carried) {
        fail_run(r, ErrorKind::SandboxError, errno_text("pipe"));
        return;
    }
    std::string message = "G" + rel.encode();
    r.released = Clock::now();
    auto sent = send_with_fds(e.control.get(), message, std::span<const int>(stdio, carried), "sandbox release");
    if (!sent) {
        fail_run(r, ErrorKind::SandboxError, "could not start the command: " + sent.error().what());
        return;
    }
    trace::mark("sandbox: released");
    r.started = true;
    arm_deadline(r);
    watch_pipes(r);
}

// One read per readiness event (level-triggered): it never blocks, so the pipe's read end
// stays blocking and the command's write end is never touched.
bool Server::on_output(Run& r, int s) {
    if (!r.out_open[s]) return false;
    char buf[65536];
    ssize_t n = ::read(r.out[s].get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (n <= 0) {
        r.out[s].reset();  // closing it takes it out of the epoll set
        r.out_open[s] = false;
        maybe_finish(r);
        return false;
    }
    std::string_view now = r.capture[s]->take(std::string_view(buf, static_cast<size_t>(n)));
    if (r.purpose == Run::Purpose::File && s == 1) {
        r.error_text.append(now);  // a file verb's message, for its error reply
        return true;
    }
    if (!now.empty() && !r.client_gone) send_frame(r, std::string(1, s == 0 ? kStdoutData : kStderrData) + std::string(now));
    return true;
}

void Server::take_output_left(Run& r) {
    for (int s = 0; s < 2; ++s) {
        if (!r.out_open[s]) continue;
        ::fcntl(r.out[s].get(), F_SETFL, O_NONBLOCK);
        while (r.out_open[s] && on_output(r, s)) {
        }
        if (r.out_open[s]) {
            r.out[s].reset();
            r.out_open[s] = false;
        }
    }
}

namespace {

// "S<status>\n", the whole of what a warm shell said on its fd 4: the status; else none.
std::optional<int> line_status(std::string_view said) {
    if (said.size() < 3 || said.size() > 5 || said.front() != 'S' || said.back() != '\n') return std::nullopt;
    int status = 0;
    for (char ch : said.substr(1, said.size() - 2)) {
        if (ch < '0' || ch > '9') return std::nullopt;
        status = status * 10 + (ch - '0');
    }
    return status <= 255 ? std::optional<int>(status) : std::nullopt;
}

}  // namespace

// The warm shell's word that its line is done, before its exit (warm_shell.cpp): the run ends
// here, with what its pipes hold, and the sandbox is killed (what the line left running dies
// with its init, as it would at the init's own exit). Not when anything came before the
// status (a trap is set), when the deadline came first, or when the shell exited or exec'd
// within its line (it closed fd 4 unsaid): the init's report ends those. Whatever comes, the
// pipe is read, so the shell never blocks on it. What the line could forge here through
// /proc is its own run's status, as `exit N` would.
void Server::on_line_end(Run& r) {
    char buf[256];
    ssize_t n = ::read(r.line_end.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        r.line_end.reset();  // closing it takes it out of the epoll set
        return;
    }
    if (r.exited || r.timed_out || r.line_said_more) return;
    r.line_said.append(buf, static_cast<size_t>(n));
    if (r.line_said.back() != '\n' && r.line_said.size() < 5) return;
    auto status = line_status(r.line_said);
    if (!status) {
        r.line_said_more = true;
        return;
    }
    trace::mark("sandbox: line ended");
    r.exited = true;
    r.status = *status << 8;  // a wait status: exited with it
    r.ended = Clock::now();
    r.timer.reset();
    auto it = embryos_.find(r.embryo);
    if (it == embryos_.end()) return;
    Embryo& e = *it->second;
    if (int64_t used = filesystem_bytes_used(e.stage.get()); used >= 0 && r.stage_used_at_release >= 0)
        r.written_bytes = used - r.stage_used_at_release;
    take_output_left(r);
    maybe_finish(r);  // may drop the run
    if (!e.reaped) sys::pidfd_send_signal(e.pidfd.get(), SIGKILL);
}

void Server::send_frame(Run& r, std::string frame) {
    if (r.client_gone) return;
    if (r.outbox.empty()) {
        ssize_t n = ::send(r.conn.get(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) return;
        if (errno != EAGAIN) {
            r.client_gone = true;
            kill_sandbox(r);
            return;
        }
    }
    r.outbox.push_back(std::move(frame));
    // Back-pressure: the pipes are not read until the client takes what waits.
    for (int s = 0; s < 2; ++s)
        if (r.out_open[s]) rewatch(r.out[s].get(), 0, s == 0 ? Watch::Stdout : Watch::Stderr, r.id);
    rewatch(r.conn.get(), EPOLLIN | EPOLLRDHUP | EPOLLOUT, Watch::Client, r.id);
}

void Server::flush_outbox(Run& r) {
    while (!r.outbox.empty()) {
        const std::string& f = r.outbox.front();
        ssize_t n = ::send(r.conn.get(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) return;
            r.client_gone = true;
            r.outbox.clear();
            kill_sandbox(r);
            break;
        }
        r.outbox.pop_front();
    }
    rewatch(r.conn.get(), EPOLLIN | EPOLLRDHUP, Watch::Client, r.id);
    for (int s = 0; s < 2; ++s)
        if (r.out_open[s]) rewatch(r.out[s].get(), EPOLLIN, s == 0 ? Watch::Stdout : Watch::Stderr, r.id);
    if (r.replied) drop_run(r.id);
}

void Server::on_stdin_writable(Run& r) {
    while (!r.stdin_buffer.empty()) {
        ssize_t n = ::write(r.in.get(), r.stdin_buffer.data(), r.stdin_buffer.size());
        if (n < 0) {
            if (errno == EAGAIN) break;
            // EPIPE: the command closed its input; the client's next frames are dropped.
            r.stdin_buffer.clear();
            r.stdin_refused = true;
            break;
        }
        r.stdin_buffer.erase(0, static_cast<size_t>(n));
    }
    if (r.stdin_buffer.empty() && (r.stdin_end || r.stdin_refused)) {
        unwatch(r.in.get());
        r.in.reset();
    } else {
        rewatch(r.in.get(), r.stdin_buffer.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT), Watch::Stdin, r.id);
    }
    // Room again: read the client's next frames.
    if (!r.client_gone && r.stdin_buffer.size() < kStdinBufferLimit)
        rewatch(r.conn.get(), EPOLLIN | EPOLLRDHUP | (r.outbox.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)), Watch::Client, r.id);
}

void Server::on_client(Run& r, uint32_t events) {
    if (events & EPOLLOUT) flush_outbox(r);
    if (runs_.find(r.id) == runs_.end()) return;
    if (r.client_gone) return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        for (;;) {
            ssize_t n = ::recv(r.conn.get(), read_buffer_.data(), kMaxFrameData + 1, MSG_DONTWAIT | MSG_TRUNC);
            if (n < 0 && errno == EAGAIN) break;
            if (n <= 0) {
                // The client left before the result: its sandbox goes.
                r.client_gone = true;
                unwatch(r.conn.get());
                kill_sandbox(r);
                maybe_finish(r);
                return;
            }
            char tag = read_buffer_[0];
            if (tag == kKill && static_cast<size_t>(n) <= 8) {
                // The client's kill: a signal number (default SIGKILL) for a session's run; a
                // sandbox of its own is killed whole.
                int sig = n > 1 ? std::atoi(std::string(read_buffer_.data() + 1, static_cast<size_t>(n - 1)).c_str()) : SIGKILL;
                if (sig <= 0 || sig >= 65) sig = SIGKILL;
                if (r.started && !r.exited) kill_sandbox(r, r.session.empty() ? SIGKILL : sig);
                continue;
            }
            bool accepted = r.request.stdin_frames && !r.stdin_end && static_cast<size_t>(n) <= kMaxFrameData + 1 &&
                            (tag == kStdinData || (tag == kStdinEnd && n == 1));
            if (!accepted) {
                fail_run(r, ErrorKind::InvalidRequest, "unexpected message from the client (tag '" +
                                                           std::string(1, std::isprint(tag) ? tag : '?') + "')");
                return;
            }
            if (tag == kStdinEnd) {
                r.stdin_end = true;
            } else {
                r.stdin_buffer.append(read_buffer_.data() + 1, static_cast<size_t>(n - 1));
                r.stdin_bytes += static_cast<uint64_t>(n - 1);
            }
            if (r.in) {
                on_stdin_writable(r);
            } else if (r.started) {
                r.stdin_buffer.clear();  // the command closed its input (EPIPE): dropped
            }  // else kept until the sandbox is released (release() writes it)
            if (r.stdin_buffer.size() >= kStdinBufferLimit) {
                rewatch(r.conn.get(), EPOLLRDHUP | (r.outbox.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)), Watch::Client, r.id);
                break;
            }
        }
    }
}

// At the deadline the sandbox's init kills everything else and reports the command's end
// (SIGUSR1, embryo.cpp): the reply then waits for no teardown. Should it not answer within
// kHardKillMs, SIGKILL to it kills the sandbox the kernel's way.
constexpr long kHardKillMs = 50;

void Server::on_timer(Run& r) {
    uint64_t expirations;
    if (::read(r.timer.get(), &expirations, sizeof expirations) != sizeof expirations) return;
    if (!r.timed_out && Clock::now() < r.deadline) {
        near_deadline_.insert(r.id);
        // A one-shot's command (its init's child) is killed at the deadline by the service
        // itself, not after the init has woken to its SIGUSR1: one wake-up fewer.
        if (auto it = embryos_.find(r.embryo); r.session.empty() && it != embryos_.end() && !it->second->reaped)
            r.doomed = open_children(it->second->pid);
        return;
    }
    on_deadline(r);
}

// How long the service stays awake for a deadline's kill to be seen done: SIGKILL to a
// process's exit takes ~0.15 ms here; a process that takes longer is left to its init's report.
constexpr auto kWatchKilledFor = std::chrono::milliseconds(5);

int Server::poll_awake() {
    auto now = Clock::now();
    for (auto it = near_deadline_.begin(); it != near_deadline_.end();) {
        auto run = runs_.find(*it);
        if (run == runs_.end() || run->second->exited || run->second->timed_out) {
            it = near_deadline_.erase(it);
        } else if (now >= run->second->deadline) {
            it = near_deadline_.erase(it);
            on_deadline(*run->second);
        } else {
            ++it;
        }
    }
    for (auto it = dying_.begin(); it != dying_.end();) {
        auto run = runs_.find(it->first);
        if (run == runs_.end() || run->second->exited || now >= it->second) {
            if (run != runs_.end()) run->second->doomed.clear();
            it = dying_.erase(it);
            continue;
        }
        Run& r = *run->second;
        std::vector<pollfd> killed;
        for (const auto& fd : r.doomed) killed.push_back({fd.get(), POLLIN, 0});
        int ready = ::poll(killed.data(), killed.size(), 0);
        if (ready == static_cast<int>(killed.size())) {
            r.killed_seen_dead = Clock::now();
            r.doomed.clear();
            it = dying_.erase(it);
        } else {
            ++it;
        }
    }
    return near_deadline_.empty() && dying_.empty() ? -1 : 0;
}

// A one-shot's processes SIGKILLed at its deadline, by their pidfds (r.doomed): the loop
// looks at them without sleeping until they are dead (a sleeping service wakes 0.1-0.25 ms
// late here, and the init's report of the reaping comes after its own wake-up).
void Server::watch_the_killed(Run& r) {
    if (r.doomed.empty()) return;
    dying_[r.id] = Clock::now() + kWatchKilledFor;
}

void Server::on_deadline(Run& r) {
    auto it = embryos_.find(r.embryo);
    if (!r.session.empty() && r.timed_out) {
        // A session's run that SIGKILL to its process group did not end: its init is not
        // answering, and the session cannot be trusted with another run.
        close_session(r.session, "a run did not end at its deadline");
        return;
    }
    if (r.timed_out || it == embryos_.end() || it->second->reaped) {
        kill_sandbox(r);
        return;
    }
    r.timed_out = true;
    trace::mark("sandbox: deadline");
    if (!r.session.empty()) {
        kill_sandbox(r);
    } else {
        for (auto& child : r.doomed) sys::pidfd_send_signal(child.get(), SIGKILL);
        sys::pidfd_send_signal(it->second->pidfd.get(), SIGUSR1);  // the init kills the rest
        watch_the_killed(r);
    }
    itimerspec hard{};
    hard.it_value.tv_nsec = kHardKillMs * 1000000;
    if (::timerfd_settime(r.timer.get(), 0, &hard, nullptr) < 0) kill_sandbox(r);
}

void Server::kill_sandbox(Run& r, int signal) {
    auto it = embryos_.find(r.embryo);
    if (it == embryos_.end() || it->second->reaped) return;
    if (!r.session.empty()) {
        // A session's run: its process group, by the sandbox's init.
        if (r.started && !r.exited && it->second->control) {
            std::string m = "K" + std::to_string(r.id) + " " + std::to_string(signal);
            ::send(it->second->control.get(), m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        return;
    }
    // pid 1 of the sandbox's pid namespace: the kernel kills every other process in it.
    sys::pidfd_send_signal(it->second->pidfd.get(), SIGKILL);
}

void Server::open_usage_files(Embryo& e) {
    if (!limits_.cgroups) return;
    auto open_file = [](const std::string& path) { return unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)); };
    if (auto d = controller_dir(layout_, e.cgroup_dirs, "cpuacct")) {
        e.cpu_usage = open_file(d->dir + "/cpuacct.usage");
    } else if (auto d2 = controller_dir(layout_, e.cgroup_dirs, "cpu"); d2 && d2->unified) {
        e.cpu_usage = open_file(d2->dir + "/cpu.stat");
        e.cpu_usage_keyed = true;
    }
    if (auto d = controller_dir(layout_, e.cgroup_dirs, "memory")) {
        e.memory_peak = open_file(d->dir + (d->unified ? "/memory.peak" : "/memory.max_usage_in_bytes"));
        e.memory_events = open_file(d->dir + (d->unified ? "/memory.events" : "/memory.oom_control"));
    }
}

namespace {

std::optional<std::string> pread_text(const unique_fd& fd) {
    if (!fd) return std::nullopt;
    char buf[1024];
    ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

void Server::collect_usage(Run& r, Embryo& e, RunOutcome& o) {
    auto rusage_ms = [](const rusage& u) {
        return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000.0 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000.0;
    };
    o.peak_memory_bytes = static_cast<uint64_t>(r.usage.ru_maxrss) * 1024;
    if (!r.session.empty()) {
        // A session's sandbox runs more than this run: its own usage, from wait4.
        o.cpu_ms = rusage_ms(r.usage);
        auto s = sessions_.find(r.session);
        o.limits = limits_.enforcement(s != sessions_.end() && s->second->settings.cpus > 0);
        if (auto text = pread_text(e.memory_events))
            o.oom_killed = static_cast<uint64_t>(cgroup_keyed_value(*text, "oom_kill")) > r.oom_kills_before;
        return;
    }
    o.limits = limits_.enforcement(r.request.cpus > 0);
    if (auto text = pread_text(e.cpu_usage)) {
        double ms = e.cpu_usage_keyed ? static_cast<double>(cgroup_keyed_value(*text, "usage_usec")) / 1e3
                                      : static_cast<double>(parse_cgroup_uint(*text).value_or(0)) / 1e6;
        o.cpu_ms = std::max(0.0, ms - e.setup_cpu_ms - e.python_cpu_ms);
    } else {
        // A warm Python's own start-up is not the request's.
        o.cpu_ms = std::max(0.0, rusage_ms(r.usage) - e.python_cpu_ms - (r.usage_is_command ? 0 : e.setup_cpu_ms));
    }
    if (auto text = pread_text(e.memory_peak)) {
        if (auto v = parse_cgroup_uint(*text)) o.peak_memory_bytes = *v;
    }
    if (auto text = pread_text(e.memory_events)) o.oom_killed = cgroup_keyed_value(*text, "oom_kill") > 0;
}

void Server::maybe_finish(Run& r) {
    if (r.replied) return;
    bool done = r.exited && !r.out_open[0] && !r.out_open[1];
    if (!done) return;
    RunOutcome o;
    set_exit_status(o, r.status);
    if (r.timed_out) {
        o.exit_code = 124;
        o.signal = SIGKILL;
    }
    o.timed_out = r.timed_out;
    o.duration_ms = ms_between(r.released, r.ended);
    o.stdout_bytes = r.capture[0]->total();
    o.stderr_bytes = r.capture[1]->total();
    o.stdout_dropped = r.capture[0]->dropped();
    o.stderr_dropped = r.capture[1]->dropped();
    o.exec_error = r.exec_error;
    o.written_bytes = r.written_bytes;
    if (auto it = embryos_.find(r.embryo); it != embryos_.end()) collect_usage(r, *it->second, o);
    r.replied = true;
    if (!r.session.empty()) {
        if (auto s = sessions_.find(r.session); s != sessions_.end()) {
            s->second->runs.erase(r.id);
            s->second->last_active = Clock::now();
        }
        r.embryo = 0;  // the session's
    }
    if (r.purpose == Run::Purpose::File) {
        finish_file_verb(r, o);
        return;
    }
    if (!r.client_gone) {
        for (int s = 0; s < 2; ++s)
            for (auto& f : frames(s == 0 ? kStdoutData : kStderrData, r.capture[s]->tail())) send_frame(r, std::move(f));
        send_frame(r, format_result(o));
        trace::mark("sandbox: replied");
    }
    // The reply first: removing v1 cgroups takes the kernel a while.
    if (r.embryo) discard_embryo(r.embryo);
    r.embryo = 0;
    if (r.outbox.empty() || r.client_gone) drop_run(r.id);
}

void Server::fail_run(Run& r, ErrorKind kind, const std::string& message) {
    if (!r.client_gone && !r.replied) {
        r.outbox.clear();
        reply_final(std::move(r.conn), format_error(kind, message));
    }
    r.replied = true;
    r.client_gone = true;
    if (!r.session.empty()) {
        kill_sandbox(r);  // the run alone: its session goes on
    } else if (r.embryo && embryos_.count(r.embryo)) {
        Embryo& e = *embryos_.at(r.embryo);
        if (e.state == Embryo::State::Building) {
            e.run = 0;  // it joins its pool when ready (a fork's child: it is retired then)
        } else {
            discard_embryo(r.embryo);
        }
    }
    if (r.job) fork_child_done(r.job, r.id, "", message);
    drop_run(r.id);
}

void Server::drop_run(uint64_t run_id) {
    auto it = runs_.find(run_id);
    if (it == runs_.end()) return;
    Run& r = *it->second;
    // Its final message sent whole: a kept connection waits for the next request.
    if (r.conn.keep && r.replied && !r.client_gone && r.outbox.empty()) await_request(std::move(r.conn));
    if (!r.session.empty()) {
        if (auto s = sessions_.find(r.session); s != sessions_.end()) s->second->runs.erase(r.id);
    } else if (r.embryo && embryos_.count(r.embryo)) {
        Embryo& e = *embryos_.at(r.embryo);
        // Running its command, or being made a session that is not one yet: it is this run's.
        if (e.state == Embryo::State::Running || (e.state == Embryo::State::Session && !session_by_embryo_.count(e.id))) {
            discard_embryo(r.embryo);
        } else {
            e.run = 0;
        }
    }
    runs_.erase(it);  // closing its fds takes them out of the epoll set
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
        if (now < quiet_until)
            idle_wait = std::min(idle_wait, static_cast<int>(ms_between(now, quiet_until)) + 1);
        if (poll_awake() == 0) {  // a deadline is near, or its kill not seen done: awake, no builds
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
