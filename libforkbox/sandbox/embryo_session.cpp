#include "libforkbox/sandbox/embryo_parts.hpp"

#include <dirent.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"

namespace forkbox::sandbox::embryo {

namespace {

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

}  // namespace

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
        if (tag == 'N') {  // the next warm shell's pipes
            auto pipes = warm_shell_pipes(std::string_view(buf.data(), *n), fds);
            if (!pipes) continue;
            drop_warm_shell(true);
            warm_shell.output[0] = std::move(pipes->output[0]);
            warm_shell.output[1] = std::move(pipes->output[1]);
            start_warm_shell(WarmShellRole::session, warm_shell.output[0].get(), warm_shell.output[1].get(),
                             limits.address_limit, pipes->line_end ? pipes->line_end.get() : -1);
            if (pipes->wants_shell) say_warm_shell(control);
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
                    auto started = start_python(WarmPythonRole::session, release->preload);
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

}  // namespace forkbox::sandbox::embryo
