// Sessions: a sandbox made once and kept for many runs and file verbs (docs/sandbox-protocol.md,
// "Sessions"). Its init stays (embryo_session.cpp, session_loop) and starts each run as a process
// group of its own; the service keeps its stage (a fork's source), its deadline and its
// clients, and ends it on close, ttl, idleness, or its init's death.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/cgroup/freezer.hpp"
#include "libforkbox/cgroup/oom.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/service.hpp"

namespace forkbox::sandbox {

namespace {

constexpr size_t kEndedKept = 1024;             // why recently ended sessions ended
constexpr uint64_t kFileVerbTimeoutMs = 60000;  // a read of a fifo must not hang a client
constexpr uint64_t kFileErrorBytes = 4096;

std::string new_session_id() {
    unsigned char bytes[8] = {};
    if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) {
        uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
        std::memcpy(bytes, &t, sizeof bytes);
    }
    static const char hex[] = "0123456789abcdef";
    std::string id = "sb-";
    for (unsigned char b : bytes) {
        id.push_back(hex[b >> 4]);
        id.push_back(hex[b & 15]);
    }
    return id;
}

std::string result(const std::function<void(json::Writer&)>& fill) {
    json::Writer w;
    w.begin_object();
    fill(w);
    w.end_object();
    return std::string(1, kResult) + w.take();
}

double seconds_since(Clock::time_point t) { return ms_between(t, Clock::now()) / 1000.0; }

}  // namespace

void Server::serve_session_verb(Connection conn, const FirstMessage& first, uid_t peer) {
    const std::string& verb = first.verb;
    auto invalid = [&](const Error& e) { reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest, e.what())); };
    if (stopping_ && verb != "list") {
        reply_final(std::move(conn), format_error(ErrorKind::SandboxError, "the daemon is stopping"));
        return;
    }
    if (verb == "create") {
        auto request = parse_create_request(first.body, opt_.defaults);
        if (!request) return invalid(request.error());
        auto member = member_identity(!request->mounts.empty() || !request->rootfs.empty(), peer, conn.get());
        if (!member) {
            reply_final(std::move(conn), format_error(ErrorKind::SandboxError, member.error().what()));
            return;
        }
        auto root = sandbox_rootfs(request->rootfs, *member);
        if (!root) return invalid(root.error());
        if (live_sandboxes() >= static_cast<size_t>(opt_.max_live)) {
            reply_final(std::move(conn), format_error(ErrorKind::Busy, std::to_string(live_sandboxes()) +
                                                                           " sandboxes are live: retry later"));
            return;
        }
        RunRequest placeholder;
        placeholder.network = request->network;
        placeholder.mounts = request->mounts;
        placeholder.member = *member;
        placeholder.rootfs = *root;
        Run& r = start_run(std::move(conn), std::move(placeholder), peer);
        r.purpose = Run::Purpose::MakeSession;
        r.make = std::move(*request);
        place(r);
        return;
    }
    if (verb == "list") {
        if (auto ref = parse_empty_request(first.body, "list"); !ref) return invalid(ref.error());
        reply_final(std::move(conn), sessions_json(peer));
        return;
    }
    if (verb == "file") {
        auto request = parse_file_request(first.body);
        if (!request) return invalid(request.error());
        Session* s = find_session(request->session, peer, conn);
        if (!s) return;
        RunRequest run;
        run.argv = {"(file)"};
        run.session = s->id;
        run.stdin_frames = request->file.op == FileOp::Write;
        run.max_output = kMaxOutputLimit;
        run.timeout_ms = kFileVerbTimeoutMs;
        Run& r = start_run(std::move(conn), std::move(run), peer);
        r.purpose = Run::Purpose::File;
        r.file = request->file;
        r.capture[1].emplace(kFileErrorBytes);
        start_in_session(r, *s);
        return;
    }
    if (verb == "fork") {
        auto request = parse_fork_request(first.body);
        if (!request) return invalid(request.error());
        Session* s = find_session(request->session, peer, conn);
        if (!s) return;
        start_fork(std::move(conn), *s, request->count);
        return;
    }
    if (verb == "close" || verb == "pause" || verb == "resume") {
        auto id = parse_session_ref(first.body, verb);
        if (!id) return invalid(id.error());
        Session* s = find_session(*id, peer, conn);
        if (!s) return;
        if (verb == "close") {
            close_session(s->id, "closed by its client");
            reply_final(std::move(conn), result([&](json::Writer& w) { w.key("closed").value(*id); }));
            return;
        }
        bool pause = verb == "pause";
        Embryo* e = embryos_.count(s->embryo) ? embryos_.at(s->embryo).get() : nullptr;
        bool pending = std::any_of(s->waiters.begin(), s->waiters.end(), [](auto& w) { return w.job; }) ||
                       std::any_of(forks_.begin(), forks_.end(), [&](auto& f) { return f.second->parent == s->id; });
        if (pause == s->paused || !e || !e->control || pending) {
            if (pending) {
                reply_final(std::move(conn), format_error(ErrorKind::Busy, "the sandbox is being forked: retry later"));
                return;
            }
            reply_final(std::move(conn), result([&](json::Writer& w) { w.key("paused").value(s->paused); }));
            return;
        }
        if (has_freezer()) {
            if (auto done = freeze_session(*s, pause); !done) {
                reply_final(std::move(conn), format_error(ErrorKind::SandboxError, verb + ": " + done.error().what()));
                return;
            }
            s->paused = pause;
            reply_final(std::move(conn), result([&](json::Writer& w) { w.key("paused").value(s->paused); }));
            return;
        }
        std::string m(1, pause ? 'S' : 'T');
        ::send(e->control.get(), m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        s->waiters.push_back(Session::Waiter{pause ? 's' : 't', std::move(conn), 0});
        return;
    }
    reply_final(std::move(conn), format_error(ErrorKind::InvalidRequest,
                                              "unknown verb \"" + verb.substr(0, 32) +
                                                  "\" (this daemon serves: run, info, keep, create, file, fork, pause, "
                                                  "resume, list, close)"));
}

Session* Server::find_session(const std::string& id, uid_t peer, Connection& conn) {
    auto it = sessions_.find(id);
    // Another user's session is not there for this peer.
    if (it != sessions_.end() && (it->second->owner == peer || peer == euid_)) return it->second.get();
    std::string why = "no sandbox \"" + id + "\" here";
    if (auto e = ended_.find(id); e != ended_.end() && it == sessions_.end()) why = "the sandbox " + id + " has ended: " + e->second;
    reply_final(std::move(conn), format_error(ErrorKind::NoSuchSandbox, why));
    return nullptr;
}

// A made embryo becomes a session: its limits, then "L"; it answers "l" with its stage.
void Server::release_session(Run& r, Embryo& e) {
    e.state = Embryo::State::Session;
    e.output_ready[0].reset();  // a pooled embryo's: each run of the session makes its own
    e.output_ready[1].reset();
    e.script_ready.reset();  // its warm shell goes: the session starts its own
    e.line_end_ready.reset();
    e.shell.reset();
    Release limits;
    // Its warm shell, idle beside its runs (a dash: a few hundred KiB), is not one of them.
    // The last run's shell may still be exiting, until its init reaps it, when the next run
    // starts (its line ended before its exit, on_line_end): that run then has one fewer, never
    // one more.
    uint64_t pids = r.make.pids ? r.make.pids + 1 : 0;
    if (auto limited = limit_sandbox(e, r.make.memory_mb, pids, r.make.cpus, limits); !limited) {
        fail_run(r, ErrorKind::SandboxError, "sandbox limits: " + limited.error().what());
        return;
    }
    std::string m = "L" + std::to_string(limits.nproc_limit) + " " + std::to_string(limits.address_limit) + " " +
                    (r.make.drop_all_caps ? "1" : "0");
    r.started = true;
    r.released = Clock::now();
    if (::send(e.control.get(), m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        fail_run(r, ErrorKind::SandboxError, "could not make the session: " + std::string(std::strerror(errno)));
}

void Server::session_made(Run& r, Embryo& e, unique_fd stage) {
    auto s = std::make_unique<Session>();
    s->id = new_session_id();
    s->embryo = e.id;
    s->owner = r.peer;
    s->settings = r.make;
    s->kind = r.kind;
    s->parent = r.parent;
    s->stage = std::move(stage);
    std::string id = s->id;
    e.run = 0;
    session_by_embryo_[e.id] = id;
    sessions_[id] = std::move(s);
    if (!r.job) start_warm_shell(id);  // a fork's children: once all are made (finish_fork)
    r.replied = true;
    if (r.job) {
        fork_child_done(r.job, r.id, id, "");
    } else {
        Session& made = *sessions_.at(id);
        reply_final(std::move(r.conn), result([&](json::Writer& w) {
            w.key("session").value(id);
            w.key("limits").begin_object();
            Enforcement limits = limits_.enforcement(made.settings.cpus > 0);
            w.key("memory").value(limits.memory).key("pids").value(limits.pids).key("cpu").value(limits.cpu);
            w.end_object();
            w.key("ms").value(ms_between(r.released, Clock::now()));
        }));
    }
    drop_run(r.id);
}

void Server::on_session_message(Embryo& e, std::string_view m) {
    char tag = m.front();
    m.remove_prefix(1);
    if (tag == 'l') {
        auto r = runs_.find(e.run);
        if (r == runs_.end() || !e.stage) {
            discard_embryo(e.id);  // its client left while it was made
            return;
        }
        session_made(*r->second, e, std::move(e.stage));
        return;
    }
    if (tag == 's' || tag == 't') {
        if (auto s = session_by_embryo_.find(e.id); s != session_by_embryo_.end())
            on_session_stopped(*sessions_.at(s->second), tag);
        return;
    }
    uint64_t id = std::strtoull(std::string(m.substr(0, m.find(' '))).c_str(), nullptr, 10);
    std::string_view rest = m.substr(std::min(m.size(), m.find(' ') + 1));
    auto it = runs_.find(id);
    if (it == runs_.end() || it->second->embryo != e.id) return;  // dropped already
    Run& r = *it->second;
    if (tag == 'x') {
        rest.remove_prefix(std::min(rest.size(), rest.find(' ') + 1));  // its errno
        r.exec_error = std::string(rest);
        return;
    }
    if (tag != 'w' || r.exited) return;
    trace::mark("sandbox: session run ended");
    take_end_report(r, rest);
    r.timer.reset();
    // The run is its first process: what it wrote is in the pipes now. What it left running
    // in the background may hold them open; it does not hold up the result.
    take_output_left(r);
    if (r.in) {
        unwatch(r.in.get());
        r.in.reset();
    }
    maybe_finish(r);
    // A line took the warm shell: the next one's starts now, after the reply (started while
    // the line ran, it delayed the line's end on this machine's two CPUs).
    if (auto s = session_by_embryo_.find(e.id); s != session_by_embryo_.end()) start_warm_shell(s->second);
}

int Server::end_due_session_turns() {
    auto now = Clock::now();
    while (!session_turns_.empty() && session_turns_.front().due <= now) end_session_turn(session_turns_.begin());
    if (session_turns_.empty()) return -1;
    return static_cast<int>(ms_between(now, session_turns_.front().due)) + 1;
}

void Server::end_session_turn(const std::string& session) {
    auto it = std::find_if(session_turns_.begin(), session_turns_.end(),
                           [&](const SessionTurn& t) { return t.session == session; });
    if (it != session_turns_.end()) end_session_turn(it);
}

// The last line's shell goes on to its exit (our end of its fd 4 shut), the next one starts.
void Server::end_session_turn(std::deque<SessionTurn>::iterator turn) {
    ::shutdown(turn->shell.get(), SHUT_WR);
    std::string session = std::move(turn->session);
    session_turns_.erase(turn);
    start_warm_shell(session);
}

void Server::start_warm_shell(const std::string& session_id) {
    auto s = sessions_.find(session_id);
    if (!opt_.warm_shell || s == sessions_.end()) return;
    auto e = embryos_.find(s->second->embryo);
    // Its line's end said before its exit, and its usage read from it then, as a one-shot's
    // (server_runs.cpp, on_line_end).
    if (e != embryos_.end() && e->second->control && !e->second->output_ready[0])
        make_output_pipes(*e->second, true, false, true);
}

void Server::start_in_session(Run& r, Session& s) {
    r.session = s.id;
    // A session stopped by signals still reads and writes files (its init runs); one whose
    // cgroup is frozen does nothing until resumed.
    if (s.paused && (r.purpose == Run::Purpose::Command || s.frozen)) {
        fail_run(r, ErrorKind::SandboxError, "the sandbox " + s.id + " is paused: resume it first");
        return;
    }
    auto it = embryos_.find(s.embryo);
    if (it == embryos_.end() || !it->second->control) {
        fail_run(r, ErrorKind::SandboxError, "the sandbox " + s.id + " is gone");
        return;
    }
    Embryo& e = *it->second;
    end_session_turn(s.id);  // its next warm shell, for this run
    r.embryo = e.id;
    s.runs.insert(r.id);
    s.last_active = Clock::now();
    ++s.served;
    ++served_;
    if (!r.request.timeout_ms) r.request.timeout_ms = s.settings.timeout_ms;
    std::string message;
    if (r.purpose == Run::Purpose::File) {
        message = "O" + std::to_string(r.id) + "\n" + r.file.encode();
    } else {
        Release rel;
        rel.argv = r.request.argv;
        rel.env = r.request.env;
        rel.cwd = r.request.cwd;
        // Python code: by the session's warm Python for its preload (its init starts one
        // the first time), forked for the run.
        rel.warm_python = r.request.python.has_value();
        rel.preload = r.request.preload;
        message = "G" + std::to_string(r.id) + "\n" + rel.encode();
    }
    int stdio[3];
    unique_fd child_ends[3];
    // A shell line the session's warm shell takes has its "N" pipes; other runs, their own.
    bool line = r.purpose != Run::Purpose::File && !r.request.python &&
                takes_warm_shell(r.request.argv, r.request.env, r.request.stdin_frames);
    size_t carried = open_pipes(r, e, stdio, child_ends, line);
    if (!carried) {
        fail_run(r, ErrorKind::SandboxError, "pipe: " + std::string(std::strerror(errno)));
        return;
    }
    // Read to the end when the run's first process ends (on_session_message).
    for (auto& fd : r.out) ::fcntl(fd.get(), F_SETFL, O_NONBLOCK);
    if (e.memory_events) {
        char buf[1024];
        ssize_t n = ::pread(e.memory_events.get(), buf, sizeof buf - 1, 0);
        if (n > 0) r.oom_kills_before = static_cast<uint64_t>(cgroup_keyed_value(std::string(buf, static_cast<size_t>(n)), "oom_kill"));
    }
    r.released = Clock::now();
    auto sent = send_with_fds(e.control.get(), message, std::span<const int>(stdio, carried), "sandbox release");
    if (!sent) {
        fail_run(r, ErrorKind::SandboxError, "could not start the command: " + sent.error().what());
        return;
    }
    trace::mark("sandbox: session run sent");
    r.started = true;
    arm_deadline(r);
    watch_pipes(r);
}

void Server::finish_file_verb(Run& r, const RunOutcome& o) {
    if (!r.client_gone) {
        if (o.exit_code == 0 && !o.timed_out && r.capture[0]->dropped() == 0) {
            for (auto& f : frames(kStdoutData, r.capture[0]->tail())) send_frame(r, std::move(f));
            send_frame(r, result([&](json::Writer& w) { w.key("ok").value(true).key("bytes").value(r.file.op == FileOp::Write ? r.stdin_bytes : o.stdout_bytes); }));
        } else {
            r.outbox.clear();
            int err = o.exit_code > 0 && o.exit_code < 126 ? o.exit_code : EIO;
            std::string message = r.error_text;
            while (!message.empty() && message.back() == '\n') message.pop_back();
            if (o.timed_out) {
                err = ETIMEDOUT;
                message = r.file.path + ": the file verb did not end within " + std::to_string(kFileVerbTimeoutMs / 1000) + " s";
            } else if (r.capture[0]->dropped()) {
                err = EFBIG;
                message = r.file.path + ": larger than " + std::to_string(kMaxOutputLimit >> 20) + " MiB, the most a read returns";
            } else if (message.empty()) {
                message = r.file.path + ": " + (o.exec_error ? *o.exec_error : std::string(std::strerror(err)));
            }
            send_frame(r, format_file_error(err, message));
        }
    }
    if (r.outbox.empty() || r.client_gone) drop_run(r.id);
}

void Server::close_session(std::string id, const std::string& reason) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    Session& s = *it->second;
    std::vector<uint64_t> runs(s.runs.begin(), s.runs.end());
    for (uint64_t run : runs)
        if (auto r = runs_.find(run); r != runs_.end())
            fail_run(*r->second, ErrorKind::NoSuchSandbox, "the sandbox " + id + " has ended: " + reason);
    for (auto& w : s.waiters) {
        reply_final(std::move(w.conn), format_error(ErrorKind::NoSuchSandbox, "the sandbox " + id + " has ended: " + reason));
        if (w.job && forks_.count(w.job)) {
            ForkJob& job = *forks_.at(w.job);
            job.error = "the parent sandbox ended: " + reason;
            job.failed = job.count;
            finish_fork(job);
        }
    }
    if (s.frozen) (void)freeze_session(s, false);  // a frozen v1 task cannot die
    uint64_t embryo = s.embryo;
    session_by_embryo_.erase(embryo);
    sessions_.erase(it);
    discard_embryo(embryo);  // SIGKILL to its init: the kernel ends the rest
    ended_[id] = reason;
    ended_order_.push_back(id);
    if (ended_order_.size() > kEndedKept) {
        ended_.erase(ended_order_.front());
        ended_order_.pop_front();
    }
}

void Server::on_session_stopped(Session& s, char reply) {
    if (s.waiters.empty() || s.waiters.front().reply != reply) return;
    Session::Waiter w = std::move(s.waiters.front());
    s.waiters.pop_front();
    if (w.job) {
        auto job = forks_.find(w.job);
        if (job != forks_.end()) start_fork_children(*job->second, s);
        return;
    }
    if (w.reply == 's' || w.reply == 't') s.paused = w.reply == 's';
    reply_final(std::move(w.conn), result([&](json::Writer& wr) { wr.key("paused").value(s.paused); }));
}

// A held embryo of `kind` for a fork's child: told to build its root from a copy of
// `stage` ("M"), as the builder would have told a new one. None: the builder makes one.
std::optional<uint64_t> Server::start_held_child(const SandboxKind& kind, uint64_t run_id, int stage) {
    auto held = held_.find(kind);
    while (held != held_.end() && !held->second.ready.empty()) {
        uint64_t id = held->second.ready.front();
        held->second.ready.pop_front();
        auto it = embryos_.find(id);
        if (it == embryos_.end() || it->second->reaped || !it->second->control) continue;
        Embryo& e = *it->second;
        std::string m = "M";
        std::vector<int> fds;
        if (e.held_lower) {
            m += "L";
            fds.push_back(e.held_lower.get());
        }
        m += "F";
        fds.push_back(stage);
        if (!send_with_fds(e.control.get(), m, fds, "sandbox control")) {
            e.retire();
            continue;
        }
        e.held_lower.reset();
        e.state = Embryo::State::Building;
        e.held = false;
        e.fork = true;
        e.run = run_id;
        e.asked = Clock::now();
        return id;
    }
    return std::nullopt;
}

// The parent is still: `count` children, each made from a copy of its stage.
void Server::start_fork_children(ForkJob& j, Session& s) {
    trace::mark("sandbox: fork parent still");
    j.stopped = true;
    uint64_t job_id = j.id, count = j.count;
    // Binds are opened when a sandbox is made: a kind with binds is never held.
    bool holdable = s.kind.mounts.empty() && opt_.pool_size > 0;
    if (holdable) {
        HeldPool& held = held_[s.kind];
        held.want = static_cast<int>(std::clamp<uint64_t>(count, 1, kHeldMax));
        held.needed = Clock::now();
    }
    for (uint64_t i = 0; i < count; ++i) {
        RunRequest placeholder;
        placeholder.network = s.kind.network;
        placeholder.mounts = s.kind.mounts;
        Run& r = start_run(Connection{}, std::move(placeholder), s.owner);
        r.purpose = Run::Purpose::MakeSession;
        r.make = s.settings;
        r.parent = s.id;
        r.job = job_id;
        j.children.push_back(r.id);
        if (auto held = holdable ? start_held_child(s.kind, r.id, s.stage.get()) : std::nullopt) {
            r.embryo = *held;
            continue;
        }
        auto id = start_embryo(s.kind, r.id, s.stage.get());
        if (!id) {
            fail_run(r, ErrorKind::SandboxError, "could not make the sandbox: " + id.error().what());
            if (!forks_.count(job_id)) return;  // it ended with that failure
            continue;
        }
        r.embryo = *id;
    }
}

// No run in flight, and its cgroup holds one process: its init (a background process of
// an earlier run, or a warm Python, would be another).
bool Server::only_init_lives(const Session& s) const {
    if (!s.runs.empty() || !limits_.cgroups) return false;
    auto e = embryos_.find(s.embryo);
    if (e == embryos_.end()) return false;
    std::string dir = first_cgroup_dir(e->second->cgroup_dirs);
    return !dir.empty() && cgroup_pids(dir).size() == 1;
}

bool Server::has_freezer() const {
    // A v1 freezer hierarchy, or v2's cgroup.freeze (the layout holds a v2 hierarchy only
    // on a pure v2 host).
    return limits_.cgroups && (layout_.unified() != nullptr ||
                            std::any_of(layout_.hierarchies.begin(), layout_.hierarchies.end(),
                                        [](const auto& h) { return hierarchy_has(h, "freezer"); }));
}

Result<void> Server::freeze_session(Session& s, bool frozen) {
    auto e = embryos_.find(s.embryo);
    if (e == embryos_.end()) return fail(ESRCH, "the sandbox is gone");
    Freezer f = find_freezer(layout_, e->second->cgroup_dirs);
    if (f.kind == Freezer::Kind::None) return fail(ENOTSUP, "no freezer");
    FB_TRY(frozen ? freeze_cgroup(f) : thaw_cgroup(f));
    s.frozen = frozen;
    return {};
}

void Server::start_fork(Connection conn, Session& parent, uint64_t count) {
    if (live_sandboxes() + count > static_cast<size_t>(opt_.max_live)) {
        reply_final(std::move(conn), format_error(ErrorKind::Busy, std::to_string(live_sandboxes()) +
                                                                       " sandboxes are live: retry later"));
        return;
    }
    auto it = embryos_.find(parent.embryo);
    if (it == embryos_.end() || !it->second->control || !parent.stage) {
        reply_final(std::move(conn), format_error(ErrorKind::SandboxError, "the sandbox " + parent.id + " is gone"));
        return;
    }
    auto made = std::make_unique<ForkJob>();
    made->id = next_id_++;
    made->conn = std::move(conn);
    made->parent = parent.id;
    made->count = count;
    made->was_paused = parent.paused;
    uint64_t id = made->id;
    forks_[id] = std::move(made);
    trace::mark("sandbox: fork asked");
    // Held still first (unless paused already), so that the children copy a still state:
    // its cgroup frozen, or each process stopped by its init (SIGSTOP). A sandbox with no
    // process but its init, which starts one only when told, is still already.
    ForkJob& job = *forks_.at(id);
    if (parent.paused) {
        start_fork_children(job, parent);
    } else if (only_init_lives(parent)) {
        job.still_already = true;
        start_fork_children(job, parent);
    } else if (has_freezer()) {
        if (auto frozen = freeze_session(parent, true); !frozen) {
            reply_final(std::move(job.conn), format_error(ErrorKind::SandboxError, "fork: freeze: " + frozen.error().what()));
            forks_.erase(id);
            return;
        }
        start_fork_children(job, parent);
    } else {
        ::send(it->second->control.get(), "S", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        parent.waiters.push_back(Session::Waiter{'s', {}, id});
    }
}

void Server::fork_child_copied(uint64_t job_id, uint64_t run_id) {
    auto it = forks_.find(job_id);
    if (it == forks_.end()) return;
    ForkJob& job = *it->second;
    if (job.copied.insert(run_id).second) trace::mark("sandbox: fork child copied");
    if (job.copied.size() >= job.count) resume_fork_parent(job);
}

void Server::resume_fork_parent(ForkJob& job) {
    if (job.resumed) return;
    job.resumed = true;
    if (job.was_paused || job.still_already) return;
    auto s = sessions_.find(job.parent);
    if (s == sessions_.end()) return;
    if (s->second->frozen) {
        if (auto thawed = freeze_session(*s->second, false); !thawed)
            log::warn("sandbox: fork: thaw " + job.parent + ": " + thawed.error().what());
        return;
    }
    auto e = embryos_.find(s->second->embryo);
    if (e == embryos_.end() || !e->second->control) return;
    ::send(e->second->control.get(), "T", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    s->second->waiters.push_back(Session::Waiter{'t', {}, 0});
}

void Server::fork_child_done(uint64_t job_id, uint64_t run_id, const std::string& session, const std::string& error) {
    auto it = forks_.find(job_id);
    if (it == forks_.end()) return;
    ForkJob& job = *it->second;
    if (!error.empty()) {
        ++job.failed;
        if (job.error.empty()) job.error = error;
    } else {
        job.made.push_back(session);
    }
    trace::mark("sandbox: fork child made");
    fork_child_copied(job_id, run_id);  // a failed child copies nothing more
    if (job.made.size() + job.failed >= job.count) finish_fork(job);
}

void Server::finish_fork(ForkJob& job) {
    resume_fork_parent(job);
    if (job.failed) {
        for (const auto& id : job.made) close_session(id, "its fork failed");
        reply_final(std::move(job.conn), format_error(ErrorKind::SandboxError, "fork: " + job.error));
    } else {
        std::vector<std::string> ordered = job.made;
        reply_final(std::move(job.conn), result([&](json::Writer& w) {
            w.key("sessions").begin_array();
            for (const auto& id : ordered) w.value(id);
            w.end_array();
            w.key("ms").value(ms_between(job.asked, Clock::now()));
        }));
        trace::mark("sandbox: fork replied");
        // Started with the children, their warm shells slowed the fork's last ones.
        for (const auto& id : ordered) start_warm_shell(id);
    }
    forks_.erase(job.id);
}

std::string Server::sessions_json(uid_t peer) {
    return result([&](json::Writer& w) {
        w.key("sessions").begin_array();
        for (const auto& [id, s] : sessions_) {
            if (s->owner != peer && peer != euid_) continue;
            w.begin_object();
            w.key("id").value(id);
            w.key("parent");
            if (s->parent.empty()) w.null();
            else w.value(s->parent);
            w.key("age_s").value(seconds_since(s->created));
            w.key("idle_s").value(s->runs.empty() ? seconds_since(s->last_active) : 0.0);
            w.key("ttl_s");
            if (s->settings.ttl_s) w.value(*s->settings.ttl_s);
            else w.null();
            w.key("idle_timeout_s").value(s->settings.idle_s);
            w.key("running").value(static_cast<uint64_t>(s->runs.size()));
            w.key("served").value(s->served);
            w.key("paused").value(s->paused);
            w.key("memory_mb").value(s->settings.memory_mb).key("pids").value(s->settings.pids);
            w.key("network").value(s->settings.network);
            w.end_object();
        }
        w.end_array();
    });
}

int Server::expire_sessions() {
    if (sessions_.empty()) return -1;
    auto now = Clock::now();
    std::vector<std::pair<std::string, std::string>> expired;
    int64_t next_ms = -1;
    for (const auto& [id, s] : sessions_) {
        auto consider = [&](Clock::time_point at, std::string why) {
            int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count();
            if (ms <= 0) {
                expired.emplace_back(id, std::move(why));
                return;
            }
            if (next_ms < 0 || ms < next_ms) next_ms = ms;
        };
        if (s->settings.ttl_s)
            consider(s->created + std::chrono::seconds(*s->settings.ttl_s),
                     "expired (its ttl of " + std::to_string(*s->settings.ttl_s) + " s)");
        if (s->runs.empty() && s->waiters.empty())
            consider(s->last_active + std::chrono::seconds(s->settings.idle_s),
                     "idle for " + std::to_string(s->settings.idle_s) + " s");
    }
    for (const auto& [id, why] : expired) close_session(id, why);
    if (!expired.empty()) return 0;
    return next_ms < 0 ? -1 : static_cast<int>(std::min<int64_t>(next_ms + 1, 1 << 30));
}

}  // namespace forkbox::sandbox
