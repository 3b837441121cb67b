// The service's embryos (service.hpp): started through the builder, told what to build, ready
// in a pool, released to a run, reaped; pools refilled off the request's path and retired
// when nobody asks for their kind.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/sandbox/builder.hpp"
#include "libforkbox/sandbox/service.hpp"

namespace forkbox::sandbox {

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
    if (m == "S" && fds.size() == 1) {
        // Its warm shell's pidfd, asked for with "U" (make_output_pipes): opened here, while it
        // waits in its pool or runs its line, so its line's end reads it with a few preads. A
        // session's shells come one after another, each made after the last one's run ended:
        // this is the run's that took it, if one did already (its init says it before any
        // report of that run's end).
        auto shell = open_live_process(std::move(fds[0]));
        if (e.state != Embryo::State::Session || e.output_ready[0]) {
            e.shell = std::move(shell);
        } else if (auto r = runs_.find(e.shell_run); r != runs_.end() && !r->second->exited && !r->second->shell) {
            r->second->shell = std::move(shell);
        }
        return;
    }
    if (e.state == Embryo::State::Session) {
        on_session_message(e, m);
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
        uint64_t run_id = e.run;
        auto r = runs_.find(run_id);
        if (r == runs_.end() || r->second->exited) return;
        if (r->second->line_end) {
            // Its warm shell said how its line ended before its exit, so before this report:
            // that word ends the run, whichever of the two this loop saw first.
            on_line_end(*r->second);
            r = runs_.find(run_id);
            if (r == runs_.end() || r->second->exited) return;
        }
        Run& run = *r->second;
        trace::mark("sandbox: command ended");
        take_end_report(run, m.substr(1));
        // A line the service gave its shell may have written before its init looked.
        take_written_bytes(run, e);
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
        make_output_pipes(e, can_end_lines_early(e), opt_.warm_shell && !e.kind.python);
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

void Server::discard_after_clients_turn(uint64_t embryo_id) {
    discards_due_.emplace_back(Clock::now() + kClientsTurn, embryo_id);
}

int Server::discard_due_embryos() {
    auto now = Clock::now();
    while (!discards_due_.empty() && discards_due_.front().first <= now) {
        discard_embryo(discards_due_.front().second);  // gone already (its init exited): nothing
        discards_due_.pop_front();
    }
    if (discards_due_.empty()) return -1;
    return static_cast<int>(ms_between(now, discards_due_.front().first)) + 1;
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

// Until when a command just released runs undisturbed by builds (kQuietAfterRelease), and a
// client takes its reply (kClientsTurn).
Clock::time_point Server::builds_wait_until() const {
    Clock::time_point until = clients_turn_until_;
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

}  // namespace forkbox::sandbox
