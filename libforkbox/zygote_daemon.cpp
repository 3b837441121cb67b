// The daemon's event loop. Single-threaded and never blocking on template construction:
// a template is built by a forked builder that unshares the namespaces (the kernel's cost
// lands in the builder, not here), brings lo up, and reports over a pipe; the loop then
// opens the builder's nsfs files, kills it, and pools the fds. Requests are answered from
// the pool only.
#include "libforkbox/zygote_daemon.hpp"

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

#include <chrono>
#include <cstring>
#include <deque>
#include <map>

#include "libforkbox/fd.hpp"
#include "libforkbox/log.hpp"
#include "libforkbox/namespaces.hpp"
#include "libforkbox/syscalls.hpp"
#include "libforkbox/unix_socket.hpp"
#include "libforkbox/zygote.hpp"
#include "oci/linux_names.hpp"

namespace forkbox::zygote {

namespace {

using Clock = std::chrono::steady_clock;

struct Template {
    std::vector<unique_fd> fds;  // kTemplateOrder order, the key's namespaces only
};

struct Builder {
    pid_t pid = -1;
    int key = 0;
    unique_fd ready;  // readable (one byte) once the namespaces exist
};

struct Pool {
    std::deque<Template> ready;
    int building = 0;
    Clock::time_point last_used = Clock::now();
};

// In the builder child: make the namespaces, report, and wait to be killed.
[[noreturn]] void builder_main(int key, int ready_fd) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Refill runs on the cores the requests need: at the lowest priority, a builder takes
    // what the containers being created leave idle instead of competing with them.
    (void)::setpriority(PRIO_PROCESS, 0, 19);
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
    void refill();
    void start_builder(int key);
    void finish_builder(int ready_fd);
    void serve(int conn);
    void evict_idle();
    void reap();

    DaemonOptions opt_;
    unique_fd listener_, signals_;
    std::map<int, Pool> pools_;
    std::map<int, Builder> builders_;  // by ready fd
    long served_ = 0, missed_ = 0;
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

void Daemon::start_builder(int key) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) {
        log::warn("zygote: pipe: " + std::string(std::strerror(errno)));
        return;
    }
    unique_fd rd(p[0]), wr(p[1]);
    pid_t pid = ::fork();
    if (pid < 0) {
        log::warn("zygote: fork builder: " + std::string(std::strerror(errno)));
        return;
    }
    if (pid == 0) builder_main(key, wr.get());
    int fd = rd.get();
    builders_[fd] = Builder{pid, key, std::move(rd)};
    ++pools_[key].building;
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
    for (int flag : kTemplateOrder) {
        if (!built || !(b.key & flag)) continue;
        auto kind = std::string(oci::namespace_kind_by_flag(flag)->proc_name);
        unique_fd fd(::open(("/proc/" + std::to_string(b.pid) + "/ns/" + kind).c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) built = false;
        t.fds.push_back(std::move(fd));
    }
    ::kill(b.pid, SIGKILL);  // reaped on SIGCHLD; the fds keep the namespaces
    if (built) pool.ready.push_back(std::move(t));
    else log::warn("zygote: a template builder failed for key " + std::to_string(b.key));
}

void Daemon::refill() {
    for (auto& [key, pool] : pools_) {
        int want = opt_.pool_size - static_cast<int>(pool.ready.size()) - pool.building;
        for (int i = 0; i < want; ++i) start_builder(key);
    }
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
    Pool& pool = pools_[req->key];  // a key asked for is a key kept warm from now on
    pool.last_used = Clock::now();
    if (pool.ready.empty()) {
        ++missed_;
        (void)::send(conn, "none", 4, MSG_NOSIGNAL);
        return;
    }
    Template t = std::move(pool.ready.front());
    pool.ready.pop_front();
    std::string reply = "ok " + std::to_string(req->key);
    std::vector<int> fds;
    for (const auto& f : t.fds) fds.push_back(f.get());
    if (send_with_fds(conn, reply, fds, "send a template")) ++served_;
    // Sent or not, a template is used once: ours close here.
}

void Daemon::evict_idle() {
    auto now = Clock::now();
    for (auto it = pools_.begin(); it != pools_.end();) {
        bool idle = now - it->second.last_used > std::chrono::seconds(opt_.evict_after_seconds);
        if (idle && it->second.building == 0) {
            log::debug("zygote: evicting idle key " + std::to_string(it->first));
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
    for (int key : opt_.warm_keys) pools_[key];
    log::info("zygote daemon listening on " + opt_.socket_path + " (pool " + std::to_string(opt_.pool_size) + ")");
    bool stopping = false;
    while (!stopping) {
        refill();
        std::vector<pollfd> fds = {{signals_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
        for (auto& [fd, b] : builders_) fds.push_back({fd, POLLIN, 0});
        int r = ::poll(fds.data(), fds.size(), 10000);
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
