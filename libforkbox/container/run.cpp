// `run`: create + start + wait, forwarding signals to init (and driving its terminal when
// process.terminal asks for one), then delete unless --keep. With a deadline (--timeout)
// or as an ephemeral run (`forkbox run BUNDLE/`), the container is killed early too.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/process/foreground.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/process/terminal.hpp"

namespace forkbox {

namespace {

// An ephemeral run's guardian: a child of ours in a session of its own (so a cancelled
// job's process-group kill does not reach it) that holds the read end of a pipe. When our
// end closes without a word, we died unannounced (SIGKILL, OOM): it execs the cleanup
// command (`forkbox delete --force ID`), so nothing is left on the machine. We say "d"
// once the run has deleted the container itself, and it exits.
//
// It shares our memory (CLONE_VM) on a stack of its own and makes only raw system calls,
// on data laid out before the clone in storage that is never freed: no libc (no errno, no
// lock, nothing of ours it could race with), and nothing after our death but an execve. A
// fork instead would write-protect every page we have, and each of our first writes to one
// during the run (the whole create) would take a copy-on-write fault: ~1.5 ms a run here,
// and ~0.4 ms more waiting for its address space's teardown at the end.
class RunGuardian {
public:
    static Result<RunGuardian> start(const std::vector<std::string>& cleanup) {
        if (cleanup.empty() || cleanup.size() >= kMaxArgs)
            return fail(EINVAL, "run: the guardian needs a cleanup command of 1 to " + std::to_string(kMaxArgs - 1) + " words");
        if (started_) return fail(EBUSY, "run: a guardian runs already");
        int p[2];
        if (::pipe2(p, O_CLOEXEC) < 0) return sys_error("guardian pipe");
        unique_fd read_end(p[0]), write_end(p[1]);
        unique_fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
        if (!null) return sys_error("guardian: open /dev/null");
        // Everything it uses, in static storage: it may exec after we are gone. Our
        // environment goes with the command (a user's systemd is found through it), as far
        // as it fits.
        size_t used = 0;
        auto keep = [&](const char* text) -> char* {
            size_t n = std::strlen(text) + 1;
            if (used + n > sizeof strings_) return nullptr;
            char* at = strings_ + used;
            std::memcpy(at, text, n);
            used += n;
            return at;
        };
        for (size_t i = 0; i < cleanup.size(); ++i)
            if (!(argv_[i] = keep(cleanup[i].c_str()))) return fail(E2BIG, "run: the guardian's cleanup command is too long");
        argv_[cleanup.size()] = nullptr;
        size_t envc = 0;
        for (char** e = environ; e && *e && envc + 1 < kMaxEnv; ++e)
            if (char* kept = keep(*e)) envp_[envc++] = kept;
        envp_[envc] = nullptr;
        args_.pipe = read_end.get();
        args_.null = null.get();
        args_.log = log::file_fd();
        // Born with every signal blocked, until it has ignored those it must survive: a
        // Ctrl-C in its first microseconds would otherwise end it, and the cleanup with it.
        pid_t pid = clone_vm_signals_blocked(guard, stack_ + sizeof stack_, SIGCHLD, &args_);
        if (pid < 0) return sys_error("start the run's guardian");
        started_ = true;
        RunGuardian g;
        g.pid_ = pid;
        g.pipe_ = std::move(write_end);
        return g;
    }
    RunGuardian(RunGuardian&& o) noexcept : pid_(o.pid_), pipe_(std::move(o.pipe_)) { o.pid_ = -1; }
    RunGuardian& operator=(RunGuardian&&) = delete;
    // Leaving early (an error of ours): our end of the pipe closes when this process exits
    // (the guardian closed its own copy), and the guardian cleans up.
    ~RunGuardian() = default;

    // The run removed the container itself: the guardian exits without doing anything.
    void dismiss() {
        if (!pipe_) return;
        (void)!::write(pipe_.get(), "d", 1);
        pipe_.reset();
        ::waitpid(pid_, nullptr, 0);
        started_ = false;  // gone: its storage is free for another run in this process
    }

private:
    RunGuardian() = default;

    struct Args {
        int pipe, null, log;
    };
    static constexpr size_t kMaxArgs = 16;
    static constexpr size_t kMaxEnv = 256;
    static inline bool started_ = false;
    static inline Args args_;
    static inline char strings_[32768];
    static inline char* argv_[kMaxArgs];
    static inline char* envp_[kMaxEnv];
    alignas(16) static inline char stack_[16384];

    // The guardian itself, on stack_: raw system calls only (see above).
    __attribute__((no_stack_protector)) static int guard(void* p) {
        using sys::raw_syscall;
        const Args& a = *static_cast<const Args*>(p);
        raw_syscall(SYS_setsid);
        // Not the job's output: a runner waits for every holder of its stdout to close it.
        for (long fd = 0; fd <= 2; ++fd) raw_syscall(SYS_dup3, a.null, fd, 0);
        // Nor anything else of the caller's (a socket, a pipe to the runner): only the pipe,
        // the --log file (the cleanup command reopens it by name) and /dev/null stay.
        int keep[3] = {a.pipe, a.null, a.log};
        for (int i = 0; i < 3; ++i)  // sorted, small first
            for (int j = i + 1; j < 3; ++j)
                if (keep[j] < keep[i]) std::swap(keep[i], keep[j]);
        long first = 3;
        for (int fd : keep) {
            if (fd < first) continue;
            if (fd > first) raw_syscall(SYS_close_range, first, fd - 1, 0);
            first = fd + 1;
        }
        raw_syscall(SYS_close_range, first, ~0U, 0);
        struct {
            unsigned long handler, flags, restorer, mask;
        } ignore{reinterpret_cast<unsigned long>(SIG_IGN), 0, 0, 0};
        for (long sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) raw_syscall(SYS_rt_sigaction, sig, reinterpret_cast<long>(&ignore), 0, 8);
        // Now the mask start() gave it goes (the cleanup command must not inherit it): what
        // came meanwhile of those four is dropped, the rest acts as it would have.
        unsigned long none = 0;
        raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, 8);
        char word = 0;
        long n;
        do n = raw_syscall(SYS_read, a.pipe, reinterpret_cast<long>(&word), 1);
        while (n == -EINTR);
        if (n == 1) raw_syscall(SYS_exit, 0);
        // We died: our lock on the container died with us, so the delete does not wait.
        raw_syscall(SYS_execve, reinterpret_cast<long>(argv_[0]), reinterpret_cast<long>(argv_), reinterpret_cast<long>(envp_));
        raw_syscall(SYS_exit, 1);
        return 1;
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
    // Before create: what init (or a hook) orphans from then on is ours to reap.
    if (opt.subreaper && ::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        log::warn("prctl(PR_SET_CHILD_SUBREAPER): " + std::string(std::strerror(errno)));
    // Before the signals are blocked: the guardian must not inherit that mask.
    std::optional<RunGuardian> guardian;
    if (opt.ephemeral && !opt.keep) {
        FB_ASSIGN(RunGuardian g, RunGuardian::start(opt.cleanup_command));
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
