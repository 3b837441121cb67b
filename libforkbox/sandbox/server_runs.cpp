// The service's one-shot runs (service.hpp): a request placed on an embryo and released, its
// pipes, stdin and output, its deadline (the watchdog), its end, and the reply.

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/oom.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/cgroup/stats.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/sandbox/service.hpp"

namespace forkbox::sandbox {

namespace {

constexpr size_t kStdinBufferLimit = 1 << 20;  // past this, the client is not read

}  // namespace

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
//
// `line_end`: also the socket its warm shell says a line's end on. `script`: and the pipe the
// warm shell reads its script from, a write end of it kept: a line that needs nothing of
// the sandbox's init first is written there with the release (give_line), and the shell
// runs it while the init wakes (~0.1-0.3 ms here).
void Server::make_output_pipes(Embryo& e, bool line_end, bool script, bool shell_usage) {
    int out_pipe[2], err_pipe[2], end_pair[2], script_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) < 0) return;
    unique_fd out_read(out_pipe[0]), out_write(out_pipe[1]);
    if (::pipe2(err_pipe, O_CLOEXEC) < 0) return;
    unique_fd err_read(err_pipe[0]), err_write(err_pipe[1]);
    unique_fd end_read, end_write, script_read, script_write;
    // A socket, not a pipe: the shell waits on it for our word after its line's end.
    if (line_end && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, end_pair) == 0) {
        end_read.reset(end_pair[0]);
        end_write.reset(end_pair[1]);
        if (::fcntl(end_read.get(), F_SETFL, O_NONBLOCK) < 0) end_read.reset(), end_write.reset();
    }
    if (script && pipe_for_sandbox(script_pipe)) {
        script_read.reset(script_pipe[0]);
        script_write.reset(script_pipe[1]);
    }
    std::string message = "N";
    std::vector<int> ends = {out_write.get(), err_write.get()};
    if (end_write) {
        message += 'E';
        if (shell_usage || !counts_usage_in_cgroups(e)) message += 'U';
        ends.push_back(end_write.get());
    }
    Rlimits shell;
    if (script_write) {
        // The shell starts under the rlimits a request with the default limits has (a daemon
        // without cgroups), so that such a line, too, needs nothing of the init's.
        shell = rlimits_for(limits_, opt_.defaults.memory_mb, opt_.defaults.pids);
        message += 'S';
        ends.push_back(script_read.get());
        ends.push_back(script_write.get());
        if (shell.nproc || shell.address) message += " " + std::to_string(shell.nproc) + " " + std::to_string(shell.address);
    }
    if (!send_with_fds(e.control.get(), message, ends, "sandbox output pipes")) return;
    e.output_ready[0] = std::move(out_read);
    e.output_ready[1] = std::move(err_read);
    e.line_end_ready = std::move(end_read);
    e.shell_rlimits = shell;
    e.script_ready = std::move(script_write);
}

// A pipe the sandbox's root may open again through /proc (its shell reads `. /dev/fd/3`):
// owned by that root's host uid under a root daemon, whose own uid it does not map.
bool Server::pipe_for_sandbox(int ends[2]) const {
    if (!mapped_range_) return ::pipe2(ends, O_CLOEXEC) == 0;
    auto uid = static_cast<uid_t>(opt_.uid_base);
    uid_t uid_before = static_cast<uid_t>(::setfsuid(uid));
    gid_t gid_before = static_cast<gid_t>(::setfsgid(uid));
    bool made = ::pipe2(ends, O_CLOEXEC) == 0;
    ::setfsgid(gid_before);
    ::setfsuid(uid_before);
    return made;
}

// A shell line that needs nothing of the sandbox's init before it runs (no rlimits but those
// its shell started with, no cwd to check, caps kept), written by us to the warm shell's
// script pipe: whether it was. A script no longer than PIPE_BUF goes in whole into the pipe
// nothing wrote to before, never blocking; a shell gone already (EPIPE) leaves the line to
// the init. The pipe is the run's shell's once the run takes the shell's output pipes
// (`took_shell`), given the line or not.
bool Server::give_line(Run& r, Embryo& e, const Release& rel, bool took_shell) {
    unique_fd script = took_shell ? std::move(e.script_ready) : unique_fd();
    if (!script || rel.nproc_limit != e.shell_rlimits.nproc || rel.address_limit != e.shell_rlimits.address ||
        rel.drop_all_caps || rel.warm_python || rel.cwd != "/" || !takes_warm_shell(rel.argv, rel.env, r.request.stdin_frames))
        return false;
    auto environment = warm_shell_environment(rel.env);
    if (!environment) return false;
    std::string text = warm_shell_script(rel.argv[2], *environment, rel.cwd, bool(r.line_end));
    if (text.size() > PIPE_BUF) return false;
    // What the line writes is measured from here (open_pipes did, with a line's end), not
    // from its init's look after it began.
    int64_t measured = r.stage_used_at_release;
    if (measured < 0) r.stage_used_at_release = filesystem_bytes_used(e.stage.get());
    if (::write(script.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size())) return true;
    r.stage_used_at_release = measured;
    return false;
}

// What a run wrote to its sandbox's writable layer, from its stage, when the service took
// the stage's usage at the release (a line's end, a line given): else the init's word stands.
void Server::take_written_bytes(Run& r, const Embryo& e) {
    if (int64_t used = filesystem_bytes_used(stage_of(r, e)); used >= 0 && r.stage_used_at_release >= 0)
        r.written_bytes = used - r.stage_used_at_release;
}

int Server::stage_of(const Run& r, const Embryo& e) const {
    if (r.session.empty()) return e.stage.get();
    auto s = sessions_.find(r.session);
    return s != sessions_.end() ? s->second->stage.get() : -1;
}

// A line's end from its shell, before the shell's exit, leaves no rusage: the sandbox's CPU
// time and peak memory are read from its cgroup, or else from the shell while it exits
// (on_line_end), and the growth of its writable layer from its stage. A warm Python's
// embryo starts no shell.
bool Server::can_end_lines_early(const Embryo& e) const {
    return opt_.warm_shell && !e.kind.python && e.stage;
}

bool Server::counts_usage_in_cgroups(const Embryo& e) const {
    return e.cpu_usage && e.memory_peak;
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
            r.stage_used_at_release = filesystem_bytes_used(stage_of(r, e));
            // A session's shells come one after another: this run's is the one "S" named
            // before the run took its pipes (later ones are the next shell's).
            if (!r.session.empty()) {
                r.shell = std::move(e.shell);
                e.shell.reset();
                e.shell_run = r.id;
            }
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
    r.cpu_ms_at_release = cgroup_cpu_ms(e);
    r.released = Clock::now();
    rel.line_given = give_line(r, e, rel, carried == 1);
    if (rel.line_given) trace::mark("sandbox: line given");
    std::string message = "G" + rel.encode();
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
// here, with what its pipes hold. The shell then waits on its fd 4 for our word, its exit's
// teardown off the reply's path: a one-shot's dies with its sandbox after the client's turn
// (what the line left running dies with its init, as it would at the init's own exit), a
// session's goes on to its exit then. Told to go on at once (our end shut), it exits and its
// init's report ends the run. That is when anything came before the status (a trap is
// set), and, where no cgroup counts the run's usage (a session's run, a daemon without
// cgroups), when the shell's own usage is not the run's (usage.hpp). Not when the deadline
// came first, or when the shell exited or exec'd within its line (it closed fd 4 unsaid): the
// init's report ends those. Whatever comes, the socket is read, so the shell never blocks on
// it. The line cannot reach it (eval 4>&-; a socket is not opened again through /proc).
void Server::on_line_end(Run& r) {
    char buf[256];
    ssize_t n = ::read(r.line_end.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        r.line_end.reset();  // closing it takes it out of the epoll set
        return;
    }
    if (r.exited || r.timed_out || r.ends_at_reaping) return;
    r.line_said.append(buf, static_cast<size_t>(n));
    if (r.line_said.back() != '\n' && r.line_said.size() < 5) return;
    auto status = line_status(r.line_said);
    auto it = embryos_.find(r.embryo);
    std::optional<UsageSoFar> usage;
    // A session's run has its own usage (wait4's, collect_usage), never its cgroup's.
    if (status && it != embryos_.end() && (!r.session.empty() || !counts_usage_in_cgroups(*it->second))) {
        const auto& shell = r.session.empty() ? it->second->shell : r.shell;
        usage = shell ? usage_so_far(*shell) : std::nullopt;
        if (!usage) status.reset();
    }
    if (!status || it == embryos_.end()) {
        r.ends_at_reaping = true;
        ::shutdown(r.line_end.get(), SHUT_WR);
        return;
    }
    Embryo& e = *it->second;
    if (usage) {
        r.usage = rusage{};
        r.usage.ru_utime.tv_sec = static_cast<time_t>(usage->cpu_ns / 1000000000);
        r.usage.ru_utime.tv_usec = static_cast<suseconds_t>(usage->cpu_ns % 1000000000 / 1000);
        r.usage.ru_maxrss = static_cast<long>(usage->peak_rss_bytes / 1024);
        r.usage_is_command = true;
    }
    trace::mark("sandbox: line ended");
    r.exited = true;
    r.status = *status << 8;  // a wait status: exited with it
    r.ended = Clock::now();
    r.timer.reset();
    unwatch(r.line_end.get());
    take_written_bytes(r, e);
    take_output_left(r);
    if (!r.session.empty()) {
        // A session lives on: after its client's turn its shell goes on to its exit (its
        // init's late report of it is for a run that has ended) and the next one starts.
        session_turns_.push_back({Clock::now() + kClientsTurn, r.session, std::move(r.line_end)});
        maybe_finish(r);  // may drop the run
        return;
    }
    e.waiting_shell = std::move(r.line_end);
    maybe_finish(r);  // may drop the run; the sandbox is killed after its client's turn
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
    return near_deadline_.empty() ? -1 : 0;
}

// A one-shot's processes SIGKILLed at its deadline, by their pidfds (r.doomed), watched in
// the epoll set: the service sleeps while they exit. Looking at them awake (it did) made the
// exit itself slower on a PVM guest, more than the service's wake-up costs: a process's exit
// there is page-table work through the hypervisor, which a vCPU in a poll loop slows.
void Server::watch_the_killed(Run& r) {
    for (const auto& fd : r.doomed) watch(fd.get(), EPOLLIN, Watch::Killed, r.id);
}

void Server::on_killed(Run& r) {
    std::erase_if(r.doomed, [this](const unique_fd& fd) {
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) != 1) return false;
        unwatch(fd.get());
        return true;
    });
    if (r.doomed.empty()) r.killed_seen_dead = Clock::now();
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

std::optional<double> Server::cgroup_cpu_ms(const Embryo& e) const {
    auto text = pread_text(e.cpu_usage);
    if (!text) return std::nullopt;
    return e.cpu_usage_keyed ? static_cast<double>(cgroup_keyed_value(*text, "usage_usec")) / 1e3
                             : static_cast<double>(parse_cgroup_uint(*text).value_or(0)) / 1e6;
}

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
    if (auto ms = cgroup_cpu_ms(e)) {
        // What ran in the sandbox since the release: not its build, its warm shell's or warm
        // Python's start, nor (on cgroup v1, joined after the clone) what its init did first.
        o.cpu_ms = std::max(0.0, *ms - r.cpu_ms_at_release.value_or(e.setup_cpu_ms + e.python_cpu_ms));
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
        clients_turn_until_ = Clock::now() + kClientsTurn;
    }
    // The reply first: removing v1 cgroups takes the kernel a while. A timed-out sandbox is
    // killed now (the deadline's point), one whose client is gone too (nobody waits).
    if (r.embryo && !r.timed_out && !r.client_gone) {
        discard_after_clients_turn(r.embryo);
    } else if (r.embryo) {
        discard_embryo(r.embryo);
    }
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

}  // namespace forkbox::sandbox
