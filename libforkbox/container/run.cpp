// `run`: create + start + wait, forwarding signals to init (and driving its terminal when
// process.terminal asks for one), then delete unless --keep. With a deadline (--timeout)
// or as an ephemeral run (`forkbox run BUNDLE/`), the container is killed early too.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "libforkbox/base/log.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/process/foreground.hpp"
#include "libforkbox/process/terminal.hpp"

namespace forkbox {

namespace {

// An ephemeral run's guardian: a child of ours in a session of its own (so a cancelled
// job's process-group kill does not reach it) that holds the read end of a pipe. When our
// end closes without a word, we died unannounced (SIGKILL, OOM): it deletes the container
// by force, so nothing is left on the machine. We say "done" once the run has deleted the
// container itself.
class RunGuardian {
public:
    static Result<RunGuardian> start(const StateStore& store, const std::string& id) {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) < 0) return sys_error("guardian pipe");
        unique_fd read_end(p[0]), write_end(p[1]);
        pid_t pid = ::fork();
        if (pid < 0) return sys_error("fork guardian");
        if (pid == 0) {
            write_end.reset();
            guard(store, id, read_end.get());
        }
        RunGuardian g;
        g.pid_ = pid;
        g.pipe_ = std::move(write_end);
        return g;
    }
    RunGuardian(RunGuardian&& o) noexcept : pid_(o.pid_), pipe_(std::move(o.pipe_)) { o.pid_ = -1; }
    RunGuardian& operator=(RunGuardian&&) = delete;
    // Leaving early (an error of ours): the guardian cleans up once the pipe closes.
    ~RunGuardian() = default;

    // The run removed the container itself: the guardian exits without doing anything.
    void dismiss() {
        if (!pipe_) return;
        (void)!::write(pipe_.get(), "d", 1);
        pipe_.reset();
        ::waitpid(pid_, nullptr, 0);
    }

private:
    RunGuardian() = default;

    [[noreturn]] static void guard(const StateStore& store, const std::string& id, int pipe) {
        ::setsid();
        // Not the job's output: a runner waits for every holder of its stdout to close it.
        int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        for (int fd = 0; fd <= 2; ++fd) ::dup3(null, fd, 0);
        // Nor anything else of the caller's (a socket, a pipe to the runner); only the --log file.
        close_inherited_fds({pipe, log::file_fd()});
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
        char word = 0;
        ssize_t n;
        do n = ::read(pipe, &word, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1) ::_exit(0);
        // The run died. Its lock on the container died with it, so delete does not wait.
        if (auto r = delete_container(store, id, true); !r && r.error().errnum() != ENOENT)
            log::warn("guardian: delete " + id + ": " + r.error().what());
        else
            log::info("guardian: removed container " + id + " after forkbox run died");
        ::_exit(0);
    }

    // Closes every fd above stdio but those in `keep`.
    static void close_inherited_fds(std::initializer_list<int> keep) {
        std::vector<int> kept;
        for (int fd : keep)
            if (fd > 2) kept.push_back(fd);
        std::sort(kept.begin(), kept.end());
        unsigned first = 3;
        for (int fd : kept) {
            if (static_cast<unsigned>(fd) > first) ::close_range(first, static_cast<unsigned>(fd) - 1, 0);
            first = static_cast<unsigned>(fd) + 1;
        }
        ::close_range(first, ~0U, 0);
    }

    pid_t pid_ = -1;
    unique_fd pipe_;
};

}  // namespace

Result<int> run_container(const StateStore& store, const RunOptions& opt) {
    const std::string& id = opt.create.id;
    if (opt.detach) {
        if (opt.timeout || opt.ephemeral) return fail(EINVAL, "--timeout and a bundle path need a foreground run, not --detach");
        FB_TRY(create_container(store, opt.create));
        auto r = start_container(store, id);
        if (!r) {
            (void)delete_container(store, id, true);
            return std::unexpected(r.error());
        }
        return 0;
    }
    if (!opt.create.console_socket.empty())
        return fail(EINVAL, "cannot use console socket if forkbox will not detach or allocate tty");
    // Before the signals are blocked: the guardian must not inherit that mask.
    std::optional<RunGuardian> guardian;
    if (opt.ephemeral && !opt.keep) {
        FB_ASSIGN(RunGuardian g, RunGuardian::start(store, id));
        guardian.emplace(std::move(g));
    }
    // The deadline counts from the start of the run, create included, as `timeout` would.
    Supervision supervision;
    if (opt.timeout)
        supervision.deadline =
            std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(*opt.timeout);
    supervision.cancel_on_signal = opt.ephemeral;
    supervision.kill_container = [&] {
        if (auto r = kill_container(store, id, SIGKILL, true); !r) log::warn("kill " + id + ": " + r.error().what());
    };
    // A run that owns its container (a bundle path) dies of a cancel that comes during
    // create or start, and its guardian removes the container; from supervision on, the
    // cancel kills the container and the run reports it.
    bool owns = guardian.has_value();
    FB_ASSIGN(ForwardedSignals signals, ForwardedSignals::block(owns ? ForwardedSignals::Cancels::Later
                                                                     : ForwardedSignals::Cancels::Now));
    // A job started in the background by a shell has SIGINT ignored, and an ignored signal
    // never reaches the signalfd: a cancelled job must still stop the container.
    if (opt.ephemeral)
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    unique_fd pty_master;
    std::unique_ptr<CreationRemains> remains;
    FB_ASSIGN(pid_t init, create_container(store, opt.create, &pty_master, &remains));
    auto started = start_container(store, id);
    KnownToRun known;
    known.poststop_hooks = remains->has_poststop_hooks();
    // Freed while init execs, on the other CPU, and without copying pages it shares.
    remains.reset();
    if (!started) {
        (void)delete_container(store, id, true);
        if (guardian) guardian->dismiss();
        return std::unexpected(started.error());
    }
    if (owns) FB_TRY(signals.block_cancels());
    // delete --force's sweep of what crashed creates left, done while the container runs
    // rather than after it exits.
    store.remove_stale_staging();
    known.staging_swept = true;
    trace::mark("run: started");
    auto exit = supervise_foreground(init, signals, pty_master.get(), supervision);
    trace::mark("run: exited");
    if (!exit) {
        // We cannot tell what the container does: kill it rather than leave it behind.
        if (opt.ephemeral || opt.timeout) supervision.kill_container();
        return std::unexpected(exit.error());
    }
    if (exit->timed_out) log::info("container " + id + " killed at its --timeout deadline");
    if (exit->cancelled_by)
        log::info("container " + id + " killed: forkbox run got SIG" + std::string(sigabbrev_np(exit->cancelled_by)));
    if (!opt.keep) {
        if (auto r = delete_container(store, id, true, known); !r) log::warn("delete " + id + ": " + r.error().what());
        else if (guardian) guardian->dismiss();
    }
    trace::mark("run: deleted");
    return exit->code;
}

}  // namespace forkbox
