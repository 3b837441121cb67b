// The daemon's event loop. Single-threaded and never blocking on template construction:
// a template is built by a forked builder that unshares the namespaces (the kernel's cost
// lands in the builder, not here), brings lo up, and reports over a pipe; the loop then
// opens the builder's nsfs files, kills it, and pools the fds. The builder also makes the
// template's spare cgroups (zygote.hpp). Requests are answered from the pool only.
#include "libforkbox/zygote_daemon.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "libforkbox/cgroups.hpp"
#include "libforkbox/fd.hpp"
#include "libforkbox/log.hpp"
#include "libforkbox/namespaces.hpp"
#include "libforkbox/state.hpp"
#include "libforkbox/syscalls.hpp"
#include "libforkbox/unix_socket.hpp"
#include "libforkbox/zygote.hpp"
#include "oci/linux_names.hpp"

namespace forkbox::zygote {

namespace {

using Clock = std::chrono::steady_clock;

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
    std::vector<unique_fd> fds;  // kTemplateOrder order, the key's namespaces only
    SpareCgroup spare;
};

// A kind of container: its template key and cgroup parent.
using PoolKey = std::pair<int, std::string>;

struct Builder {
    pid_t pid = -1;
    PoolKey key;
    unique_fd ready;  // readable (one byte) once the namespaces exist
    SpareCgroup spare;
};

struct Pool {
    std::deque<Template> ready;
    int building = 0;
    Clock::time_point last_used = Clock::now();
};

// In the builder child: make the namespaces and the spare cgroups, report, and wait to be
// killed. A spare cgroup that cannot be made (a parent missing in a hierarchy) is simply
// not there: the client then makes that one itself.
[[noreturn]] void builder_main(int key, int ready_fd, const std::vector<std::string>& spare_dirs,
                               const std::vector<bool>& spare_is_cpuset) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Refill runs on the cores the requests need: at the lowest priority, a builder takes
    // what the containers being created leave idle instead of competing with them.
    (void)::setpriority(PRIO_PROCESS, 0, 19);
    for (size_t i = 0; i < spare_dirs.size(); ++i)
        if (::mkdir(spare_dirs[i].c_str(), 0755) == 0 && spare_is_cpuset[i]) (void)inherit_cpuset(spare_dirs[i]);
    char ok = (::unshare(key) == 0 && (!(key & CLONE_NEWNET) || bring_up_loopback())) ? '1' : '0';
    (void)!::write(ready_fd, &ok, 1);
    for (;;) ::pause();
}

class Daemon {
public:
    explicit Daemon(const DaemonOptions& o) : opt_(o) {}
    Result<void> run();

private:
    Result<void> listen_socket();
    int refill();
    void start_builder(const PoolKey& key);
    void remove_stale_spares();
    void finish_builder(int ready_fd);
    void serve(int conn);
    void evict_idle();
    void reap();

    DaemonOptions opt_;
    unique_fd listener_, signals_;
    std::map<PoolKey, Pool> pools_;
    std::map<int, Builder> builders_;  // by ready fd
    long served_ = 0, missed_ = 0;
    Clock::time_point last_request_{};
    CgroupLayout cgroups_;  // the v1 hierarchies hold spare cgroups
    long spare_sequence_ = 0;
};

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
    // A socket file nobody listens on is left over from a daemon that died: replace it.
    unique_fd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
        return fail(EADDRINUSE, "another daemon is serving " + path);
    ::unlink(path.c_str());
    // Only root (the owner) may talk to us: mode 0600 from the start, and SO_PEERCRED later.
    mode_t old = ::umask(0177);
    int r = ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::umask(old);
    if (r < 0) return sys_error("bind " + path);
    if (::listen(listener_.get(), 128) < 0) return sys_error("listen on " + path);
    return {};
}

void Daemon::start_builder(const PoolKey& key) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) {
        log::warn("zygote: pipe: " + std::string(std::strerror(errno)));
        return;
    }
    unique_fd rd(p[0]), wr(p[1]);
    std::vector<std::string> dirs;
    std::vector<bool> is_cpuset;
    std::string name;
    if (!key.second.empty()) {
        name = spare_name(::getpid(), ++spare_sequence_);
        std::string parent = key.second == "/" ? "" : key.second;
        for (const auto& h : cgroups_.hierarchies) {
            if (h.unified) continue;  // cgroup v2 cannot rename
            dirs.push_back(h.mountpoint + parent + "/" + name);
            is_cpuset.push_back(hierarchy_has(h, "cpuset"));
        }
    }
    pid_t pid = ::fork();
    if (pid < 0) {
        log::warn("zygote: fork builder: " + std::string(std::strerror(errno)));
        return;
    }
    if (pid == 0) builder_main(key.first, wr.get(), dirs, is_cpuset);
    int fd = rd.get();
    builders_[fd] = Builder{pid, key, std::move(rd), SpareCgroup(name, std::move(dirs))};
    ++pools_[key].building;
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
    for (const auto& [key, parent] : opt_.warm_keys)
        if (!parent.empty()) parents.push_back(parent == "/" ? "" : parent);
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

void Daemon::finish_builder(int ready_fd) {
    auto it = builders_.find(ready_fd);
    if (it == builders_.end()) return;
    Builder b = std::move(it->second);
    builders_.erase(it);
    Pool& pool = pools_[b.key];
    --pool.building;
    char ok = '0';
    bool built = ::read(b.ready.get(), &ok, 1) == 1 && ok == '1';
    Template t;
    t.spare = std::move(b.spare);  // removed with t unless it reaches the pool
    for (int flag : kTemplateOrder) {
        if (!built || !(b.key.first & flag)) continue;
        auto kind = std::string(oci::namespace_kind_by_flag(flag)->proc_name);
        unique_fd fd(::open(("/proc/" + std::to_string(b.pid) + "/ns/" + kind).c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) built = false;
        t.fds.push_back(std::move(fd));
    }
    ::kill(b.pid, SIGKILL);  // reaped on SIGCHLD; the fds keep the namespaces
    if (built) pool.ready.push_back(std::move(t));
    else log::warn("zygote: a template builder failed for key " + std::to_string(b.key.first));
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

void Daemon::serve(int conn) {
    unique_fd c(conn);
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != ::geteuid()) {
        log::warn("zygote: refused a client with uid " + std::to_string(cred.uid));
        return;
    }
    pollfd p{conn, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) return;
    char buf[128];
    ssize_t n = ::recv(conn, buf, sizeof buf, 0);
    if (n <= 0) return;
    auto req = decode_request(std::string_view(buf, static_cast<size_t>(n)));
    if (!req) {
        log::warn(std::string("zygote: bad request: ") + req.error().what());
        return;
    }
    if (req->op == Request::Op::Stats) {
        size_t ready = 0;
        for (auto& [k, pool] : pools_) ready += pool.ready.size();
        std::string s = "stats served=" + std::to_string(served_) + " missed=" + std::to_string(missed_) +
                        " ready=" + std::to_string(ready) + " pools=" + std::to_string(pools_.size());
        (void)::send(conn, s.data(), s.size(), MSG_NOSIGNAL);
        return;
    }
    last_request_ = Clock::now();
    // A kind asked for is a kind kept warm from now on.
    Pool& pool = pools_[PoolKey{req->key, req->cgroup_parent}];
    pool.last_used = Clock::now();
    if (pool.ready.empty()) {
        ++missed_;
        (void)::send(conn, "none", 4, MSG_NOSIGNAL);
        return;
    }
    Template t = std::move(pool.ready.front());
    pool.ready.pop_front();
    std::string reply = encode_reply({req->key, t.spare.name()});
    std::vector<int> fds;
    for (const auto& f : t.fds) fds.push_back(f.get());
    if (send_with_fds(conn, reply, fds, "send a template")) {
        ++served_;
        t.spare.hand_over();  // the client renames or removes it
    }
    // Sent or not, a template is used once: ours close here (and an unsent spare goes).
}

void Daemon::evict_idle() {
    auto now = Clock::now();
    for (auto it = pools_.begin(); it != pools_.end();) {
        bool idle = now - it->second.last_used > std::chrono::seconds(opt_.evict_after_seconds);
        if (idle && it->second.building == 0) {
            log::debug("zygote: evicting idle key " + std::to_string(it->first.first) + " " + it->first.second);
            it = pools_.erase(it);
        } else {
            ++it;
        }
    }
}

void Daemon::reap() {
    int status;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
}

Result<void> Daemon::run() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGPIPE}) sigaddset(&set, s);
    if (sigprocmask(SIG_BLOCK, &set, nullptr) < 0) return sys_error("block signals");
    signals_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signals_) return sys_error("signalfd");
    FB_TRY(listen_socket());
    // No cgroups to read (an odd host): templates without spare cgroups.
    if (auto layout = detect_cgroup_layout()) cgroups_ = std::move(*layout);
    remove_stale_spares();
    for (const auto& key : opt_.warm_keys) pools_[key];
    log::info("zygote daemon listening on " + opt_.socket_path + " (pool " + std::to_string(opt_.pool_size) + ")");
    bool stopping = false;
    while (!stopping) {
        int refill_due = refill();
        std::vector<pollfd> fds = {{signals_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
        for (auto& [fd, b] : builders_) fds.push_back({fd, POLLIN, 0});
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
            int conn;
            while ((conn = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC)) >= 0) serve(conn);
        }
        for (size_t i = 2; i < fds.size(); ++i)
            if (fds[i].revents) finish_builder(fds[i].fd);
        evict_idle();
    }
    log::info("zygote daemon stopping");
    ::unlink(opt_.socket_path.c_str());
    for (auto& [fd, b] : builders_) ::kill(b.pid, SIGKILL);
    builders_.clear();
    pools_.clear();  // closes every template fd: the namespaces go away
    int status;
    while (::waitpid(-1, &status, 0) > 0) {
    }
    return {};
}

}  // namespace

Result<void> run_daemon(const DaemonOptions& options) {
    Daemon d(options);
    return d.run();
}

}  // namespace forkbox::zygote
