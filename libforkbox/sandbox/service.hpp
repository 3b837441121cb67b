// The sandbox service's state and its one event loop (server.hpp says why it is a process
// of its own), shared by its parts, to which it is internal:
//   server.cpp          setup, connections and requests, info, the loop, shutdown
//   server_embryos.cpp  embryos: built, pooled, ready, reaped; pools refilled and retired
//   server_runs.cpp     one-shot runs: release, pipes, output, the deadline, the reply
//   sessions.cpp        sessions: create, run in one, file verbs, fork, pause, list, close,
//                       expiry
#pragma once

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/process/usage.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/limits.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "libforkbox/sandbox/server.hpp"
#include "oci/spec.hpp"

namespace forkbox::sandbox {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// What an epoll event is about: the kind of fd and whose it is.
enum class Watch : uint8_t { Signals, Handoff, Listener, Builder, NewConn, Control, Pidfd, Stdout, Stderr, Stdin, Timer, Client, LineEnd, Killed };

inline uint64_t token(Watch w, uint64_t id) { return (static_cast<uint64_t>(w) << 56) | id; }

// A client's connection. One that asked for it (the keep verb) carries request after
// request: a final message leaves it open, waiting for the next (Server::reply_final);
// any other is closed after its final message.
struct Connection {
    unique_fd fd;
    bool keep = false;

    Connection() = default;
    Connection(unique_fd f, bool k = false) : fd(std::move(f)), keep(k) {}
    // A moved-from connection is no connection, kept or not: whoever replied with it has it.
    Connection(Connection&& other) noexcept : fd(std::move(other.fd)), keep(std::exchange(other.keep, false)) {}
    Connection& operator=(Connection&& other) noexcept {
        fd = std::move(other.fd);
        keep = std::exchange(other.keep, false);
        return *this;
    }

    int get() const { return fd.get(); }
    explicit operator bool() const { return static_cast<bool>(fd); }
};

inline constexpr int kBuildFailuresBeforePause = 3;
// A command released this recently has the machine to itself: a pool that still holds a
// sandbox is refilled after it (or once it has run this long). A build costs ~3 ms of CPU,
// which on a small machine would otherwise come out of the command's start and exit.
inline constexpr auto kQuietAfterRelease = std::chrono::milliseconds(30);
// A reply leaves the machine to its client this long: no build starts and the answered
// sandbox is killed only after it. The kernel here is not preemptible (PREEMPT_NONE, as on
// many distributions' servers): a build's clone or a sandbox's teardown holds a CPU for
// hundreds of us, and a client woken by the reply waited for one.
inline constexpr auto kClientsTurn = std::chrono::milliseconds(2);
// Held embryos (HeldPool): kept this long after the kind's last session ended (a tree
// search may close a parent before it forks a child), retried this long after a failure.
inline constexpr auto kHeldLinger = std::chrono::seconds(2);
inline constexpr auto kHeldRetry = std::chrono::seconds(10);

inline std::string errno_text(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }

// One request being served on a connection: a command (in a fresh sandbox, or in a
// session's), a file verb in a session, or the making of a session (for a create, or as
// one child of a fork, which has no connection of its own).
struct Run {
    enum class Purpose : uint8_t { Command, File, MakeSession };
    uint64_t id = 0;
    Purpose purpose = Purpose::Command;
    Connection conn;
    uid_t peer = 0;
    RunRequest request;
    SandboxKind kind;
    std::string session;          // Command/File: the session it runs in ("" for a fresh sandbox)
    FileRequest file;             // File
    SessionRequest make;          // MakeSession: what the session is
    std::string parent;           // MakeSession of a fork: the parent session
    uint64_t job = 0;             // MakeSession of a fork: its job
    uint64_t embryo = 0;  // 0: none yet
    unique_fd out[2];     // read ends of stdout, stderr
    bool out_open[2] = {false, false};
    unique_fd in;  // write end of stdin
    std::string stdin_buffer;
    bool stdin_end = false;
    uint64_t stdin_bytes = 0;  // taken from the client
    bool stdin_refused = false;  // the command closed its end
    std::optional<OutputCapture> capture[2];
    std::deque<std::string> outbox;  // frames the client's socket did not take yet
    unique_fd timer;
    Clock::time_point released{}, ended{};
    Clock::time_point deadline{};  // released + timeout_ms, when there is one
    std::vector<unique_fd> doomed;  // a one-shot's init's children, opened as the deadline nears; the living
    // When every process the deadline's SIGKILL went to was seen dead (their pidfds readable,
    // Watch::Killed): a timed-out run ends there, not at the init's report of their reaping.
    std::optional<Clock::time_point> killed_seen_dead;
    bool started = false, exited = false, timed_out = false, client_gone = false, replied = false;
    int status = 0;
    rusage usage{};
    std::optional<std::string> exec_error;
    bool usage_is_command = false;  // `usage` is the command's own (the embryo's "W")
    // A warm shell's line: our end of the shell's fd 4, where it says its line's status
    // before its exit (warm_shell.cpp), what it said so far, and whether the run ends at the
    // shell's reaping all the same (a trap's listing came too; its usage is not the run's).
    unique_fd line_end;
    std::string line_said;
    bool ends_at_reaping = false;
    std::optional<LiveProcess> shell;  // a session's run: the warm shell that took its line ("S")
    int64_t stage_used_at_release = -1;  // bytes on the sandbox's writable layer
    std::optional<double> cpu_ms_at_release;  // the sandbox cgroup's CPU time then
    std::optional<int64_t> written_bytes;  // the growth of the sandbox's writable layer
    uint64_t oom_kills_before = 0;  // a session's count when the run began
    std::string error_text;         // a file verb's stderr: its error message
};

struct Embryo {
    uint64_t id = 0;
    pid_t pid = -1;
    unique_fd pidfd, control;
    SandboxKind kind;
    std::vector<std::string> cgroup_dirs;  // per hierarchy of the service's layout
    oci::Resources applied;  // the limits its cgroups have now
    // Held: namespaces made, root not yet (embryo.hpp), kept for a fork's child.
    enum class State { Building, Held, Ready, Running, Session } state = State::Building;
    uint64_t run = 0;  // reserved for or running this run
    bool pooled = false;  // made for its kind's pool (counted in Pool::building while made)
    bool held = false;    // made for its kind's HeldPool (counted in its building while made)
    unique_fd held_lower;  // a held embryo's lower layer, sent with its "M"
    bool fork = false;    // a fork's child: made for its run alone, never another's
    bool copied = false;  // a fork's child said its parent's state is copied ("C")
    std::string failure;  // "F" message
    // Its mount namespace, held from ready on: the sandbox's last process then exits without
    // unmounting its ~20 mounts (an RCU grace period and superblock teardowns before its
    // parent hears of the exit); the builder drops it afterwards, off the request path.
    unique_fd mount_ns;
    double setup_cpu_ms = 0;  // its own CPU time when ready: not the command's
    double python_cpu_ms = 0;  // a warm Python's CPU time when ready: not the request's either
    // Its cgroups' usage files, opened when it is ready so that a result costs one pread each.
    unique_fd cpu_usage, memory_peak, memory_events;
    // A pooled embryo's stdout and stderr pipes, made while it waits ("N" gave it the write
    // ends): their read ends. The release then carries stdin's fd alone.
    unique_fd output_ready[2];
    unique_fd line_end_ready;  // and, for a shell line's end before its exit, our end of that socket
    unique_fd script_ready;    // and a write end of the pipe its warm shell reads its line from
    Rlimits shell_rlimits;     // what that shell was started under (the default limits')
    // That shell, when no cgroup counts a run's usage ("S"): its line's end reads the run's
    // CPU time and peak memory from it (usage.hpp) instead of waiting for its exit's wait4.
    std::optional<LiveProcess> shell;
    unique_fd waiting_shell;  // our end of that shell's fd 4 after its run ended there: it waits on
    uint64_t shell_run = 0;   // a session's: the run that took its warm shell last
    // Its writable layer's tmpfs ("R"): what a run wrote, without its init's word; a session
    // takes it for its forks.
    unique_fd stage;
    bool cpu_usage_keyed = false;  // v2 cpu.stat (usage_usec) instead of v1 cpuacct.usage (ns)
    Clock::time_point asked = Clock::now();
    bool reaped = false;
    bool retired = false;  // killed unused (a pool already full): its exit is no failure

    // Killed unused; reaped when its pidfd says so.
    void retire() {
        retired = true;
        sys::pidfd_send_signal(pidfd.get(), SIGKILL);
    }
};

struct Pool {
    std::deque<uint64_t> ready;
    int building = 0;
    int failures = 0;  // builds failed in a row
    std::string last_error;
    Clock::time_point retry_at{};
    Clock::time_point asked = Clock::now();  // the last request of its kind
};

// Held embryos of one kind, for forks of its sessions: a fork's child then skips the
// builder (cgroups, clone, id maps, the lower layer) and its own namespaces, and only
// copies its parent's state and builds its root. Kept for a kind once one of its sessions
// has forked, as many as its last fork asked for (at most kHeldMax), while a session of
// the kind lives and kHeldLinger after.
inline constexpr int kHeldMax = 8;
struct HeldPool {
    std::deque<uint64_t> ready;
    int building = 0;
    int want = 0;
    Clock::time_point needed = Clock::now();  // a session of the kind was live then
    Clock::time_point retry_at{};             // after a failed build
};

// A sandbox that lives for many runs and file verbs.
struct Session {
    std::string id;
    uint64_t embryo = 0;
    uid_t owner = 0;
    SessionRequest settings;
    SandboxKind kind;
    std::string parent;  // the session it was forked from
    unique_fd stage;     // its stage tmpfs (a fork's source)
    Clock::time_point created = Clock::now(), last_active = Clock::now();
    std::set<uint64_t> runs;  // live runs and file verbs
    uint64_t served = 0;
    bool paused = false;
    bool frozen = false;  // by its cgroup's freezer (its init too: no file verb until resumed)
    // Who waits for the init's "s" / "t": a pause's or resume's connection, or a fork job.
    struct Waiter {
        char reply;  // 's' or 't'
        Connection conn;
        uint64_t job = 0;
    };
    std::deque<Waiter> waiters;
};

// A fork: its parent is stopped, `count` children copy its state, it goes on.
struct ForkJob {
    uint64_t id = 0;
    Connection conn;
    std::string parent;
    uint64_t count = 0;
    std::vector<uint64_t> children;  // their MakeSession runs
    std::vector<std::string> made;   // their sessions, in order
    std::set<uint64_t> copied;  // children (their runs) that copied, or failed before
    uint64_t failed = 0;
    bool stopped = false, resumed = false, was_paused = false;
    bool still_already = false;  // nothing but the parent's init lived: not frozen nor stopped
    std::string error;
    Clock::time_point asked = Clock::now();
};

// A run's end as its sandbox's init reports it (server.cpp).
void take_end_report(Run& r, std::string_view report);

class Server {
public:
    Server(int handoff, int listener, const ServerOptions& o)
        : handoff_(handoff), listener_(listener), acceptor_(listener), opt_(o) {}
    int run();

private:
    Result<void> setup();
    Result<CgroupLayout> sandbox_cgroups(const CgroupLayout& host);
    void watch(int fd, uint32_t events, Watch w, uint64_t id);
    void rewatch(int fd, uint32_t events, Watch w, uint64_t id);
    void unwatch(int fd);
    void dispatch(const epoll_event& ev);

    void accept_handoff();
    void accept_connections();
    void classify(Connection conn);
    bool peer_allowed(int conn, uid_t& peer);
    // Why a peer may not have these binds (a group member: the daemon would reach the
    // paths with its own rights), or nothing.
    Result<std::optional<HostIdentity>> member_identity(bool names_host_paths, uid_t peer, int conn) const;
    Result<std::string> sandbox_rootfs(const std::string& requested, const std::optional<HostIdentity>& member) const;
    void read_first_message(uint64_t id);
    void await_request(Connection conn);
    void reply_final(Connection conn, const std::string& message);
    Run& start_run(Connection conn, RunRequest request, uid_t peer);
    std::string info_json();
    size_t live_sandboxes() const;

    Result<uint64_t> start_embryo(const SandboxKind& kind, uint64_t reserved_for, int fork_source = -1, bool hold = false);
    void on_builder();
    void build_failed(uint64_t embryo_id, const std::string& why);
    void remove_later(const std::vector<std::string>& dirs, unique_fd mount_ns = {});
    void on_control(uint64_t embryo_id);
    void on_session_message(Embryo& e, std::string_view m);
    void on_embryo_exit(uint64_t embryo_id);
    void embryo_ready(Embryo& e);
    void discard_embryo(uint64_t embryo_id);
    void discard_after_clients_turn(uint64_t embryo_id);
    int discard_due_embryos();  // ms until the next is due, -1: none
    int end_due_session_turns();  // the same
    void end_session_turn(const std::string& session);  // now (its next run is here)
    bool refill_one();
    bool refill_held_one();
    bool held_wants_refill(Clock::time_point now) const;
    int retire_unneeded_held();  // ms until the next look, -1: none
    int retire_unasked_pools();  // the same
    void retire_ready(std::deque<uint64_t>& ready);
    // What a request that names no rootfs gets: the daemon's --rootfs, nothing else.
    SandboxKind default_kind() const;
    Clock::time_point builds_wait_until() const;

    void place(Run& r);
    void release(Run& r, Embryo& e);
    Result<void> limit_sandbox(Embryo& e, uint64_t memory_mb, uint64_t pids, double cpus, Release& release);
    Result<void> apply_limits(Embryo& e, const oci::Resources& want);
    // `line_end`: and the socket a pooled one's warm shell says its line's end on.
    void make_output_pipes(Embryo& e, bool line_end, bool script, bool shell_usage = false);
    bool give_line(Run& r, Embryo& e, const Release& rel, bool took_shell);  // to its warm shell, directly
    bool pipe_for_sandbox(int ends[2]) const;
    void take_written_bytes(Run& r, const Embryo& e);
    int stage_of(const Run& r, const Embryo& e) const;  // its writable layer's tmpfs (a session's too)
    bool can_end_lines_early(const Embryo& e) const;
    bool counts_usage_in_cgroups(const Embryo& e) const;  // a run's CPU time and peak memory
    // 0: failed. `take_ready`: the embryo's "N" pipes, when it has them, are the run's output.
    size_t open_pipes(Run& r, Embryo& e, int* stdio, unique_fd* child_ends, bool take_ready);
    void arm_deadline(Run& r);
    void watch_pipes(Run& r);
    bool on_output(Run& r, int stream);  // false: nothing more to read now
    // A run that ended: what is in its pipes, and no more (what it left running may hold them).
    void take_output_left(Run& r);
    void on_line_end(Run& r);  // the warm shell's fd 4
    void on_stdin_writable(Run& r);
    void on_client(Run& r, uint32_t events);
    void on_timer(Run& r);
    void on_deadline(Run& r);
    void on_killed(Run& r);
    int poll_awake();  // the epoll timeout while a deadline is near: 0, else -1
    void watch_the_killed(Run& r);
    void send_frame(Run& r, std::string frame);
    void flush_outbox(Run& r);
    void kill_sandbox(Run& r, int signal = SIGKILL);
    void maybe_finish(Run& r);
    void fail_run(Run& r, ErrorKind kind, const std::string& message);
    void drop_run(uint64_t run_id);
    void collect_usage(Run& r, Embryo& e, RunOutcome& o);
    std::optional<double> cgroup_cpu_ms(const Embryo& e) const;  // its cgroup's CPU time so far
    void open_usage_files(Embryo& e);
    void serve_first_message(Connection conn, uid_t peer);
    void shutdown();

    // sessions.cpp
    void serve_session_verb(Connection conn, const FirstMessage& first, uid_t peer);
    Session* find_session(const std::string& id, uid_t peer, Connection& conn);
    void start_in_session(Run& r, Session& s);
    void release_session(Run& r, Embryo& e);
    void session_made(Run& r, Embryo& e, unique_fd stage);
    // The session's next warm shell ("N"), unless it has one coming or the daemon has none.
    void start_warm_shell(const std::string& session_id);
    void finish_file_verb(Run& r, const RunOutcome& o);
    void close_session(std::string id, const std::string& reason);  // by value: it erases its holder
    void start_fork(Connection conn, Session& parent, uint64_t count);
    void on_session_stopped(Session& s, char reply);
    bool has_freezer() const;
    bool only_init_lives(const Session& s) const;
    Result<void> freeze_session(Session& s, bool frozen);  // its cgroup's freezer
    void start_fork_children(ForkJob& job, Session& parent);
    std::optional<uint64_t> start_held_child(const SandboxKind& kind, uint64_t run_id, int stage);
    void fork_child_copied(uint64_t job_id, uint64_t run_id);
    void fork_child_done(uint64_t job_id, uint64_t run_id, const std::string& session, const std::string& error);
    void resume_fork_parent(ForkJob& job);
    void finish_fork(ForkJob& job);
    std::string sessions_json(uid_t peer);
    int expire_sessions();  // ms until the next expiry, -1: none

    int handoff_;
    int listener_;
    Acceptor acceptor_;  // sheds clients at EMFILE instead of spinning
    ServerOptions opt_;
    unique_fd epoll_, signals_, dev_null_, builder_, builder_pidfd_;
    bool mapped_range_ = false;  // a root daemon
    bool daemon_lower_ = false;  // ... with CAP_SYS_ADMIN (BuilderConfig::daemon_lower)
    std::string cgroup_parent_;  // relative to each hierarchy's root (BuilderConfig)
    uid_t euid_ = ::geteuid();
    LimitMechanisms limits_;  // cgroups, or rlimits where the host lacks a controller
    bool idmapped_lower_ = true;  // until it fails once
    CgroupLayout layout_;         // the hierarchies sandboxes get cgroups in
    std::map<uint64_t, Connection> new_conns_;  // waiting for a first message
    std::map<uint64_t, std::unique_ptr<Embryo>> embryos_;
    std::map<uint64_t, std::unique_ptr<Run>> runs_;
    std::map<SandboxKind, Pool> pools_;
    std::map<SandboxKind, HeldPool> held_;
    std::map<pid_t, uint64_t> embryo_by_pid_;
    std::map<std::string, std::unique_ptr<Session>> sessions_;
    std::map<uint64_t, std::string> session_by_embryo_;
    std::map<std::string, std::string> ended_;  // recently ended sessions: why (bounded)
    std::deque<std::string> ended_order_;
    std::map<uint64_t, std::unique_ptr<ForkJob>> forks_;
    std::set<uint64_t> near_deadline_;  // runs whose timer fired kDeadlineLead early
    Clock::time_point clients_turn_until_{};  // kClientsTurn after the last reply
    std::deque<std::pair<Clock::time_point, uint64_t>> discards_due_;  // answered sandboxes, killed then
    // A session whose line ended at its shell's word: after its client's turn, that shell
    // goes on to its exit (our end of its fd 4 shut) and the session's next warm shell starts.
    struct SessionTurn {
        Clock::time_point due;
        std::string session;
        unique_fd shell;
    };
    std::deque<SessionTurn> session_turns_;
    void end_session_turn(std::deque<SessionTurn>::iterator turn);
    uint64_t next_id_ = 1;
    uint64_t served_ = 0, failed_builds_ = 0, built_ = 0;
    double build_ms_total_ = 0, build_cpu_ms_total_ = 0;  // asked -> ready; the embryos' own CPU
    bool stopping_ = false;
    std::string read_buffer_ = std::string(kMaxRequestBytes + 1, '\0');
};

}  // namespace forkbox::sandbox
