// A foreground `run` or `exec`: forkbox waits for the container process, forwards the
// signals it gets, and with a terminal copies between the caller's stdio and the pty.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Blocks every signal forkbox forwards and reads them from a signalfd, from construction
// on: block before the process starts so no signal meant for it is lost or acts on us.
class ForwardedSignals {
public:
    // Cancels::Later leaves SIGINT, SIGTERM and SIGHUP to act (kill us) until
    // block_cancels: a run that owns its container has a guardian to clean up after it, and
    // must not ignore a cancel while its create or start waits (a hook that hangs).
    enum class Cancels { Now, Later };
    static Result<ForwardedSignals> block(Cancels cancels = Cancels::Now);
    Result<void> block_cancels();
    ForwardedSignals(ForwardedSignals&& other) noexcept;
    ForwardedSignals& operator=(ForwardedSignals&&) = delete;
    ~ForwardedSignals();
    int fd() const { return fd_.get(); }
    // Waits until `fd` is readable (true) or `timeout_ms` passed (false; -1 waits on),
    // before the process runs. Signals that come meanwhile are held for forward_held;
    // SIGINT, SIGTERM or SIGHUP ends the wait with EINTR, so a caller can give up on a
    // process that may never start (one that joined a frozen cgroup waits for the thaw).
    Result<bool> wait_readable(int fd, int timeout_ms);
    // Sends the held signals to the process, now that it runs.
    void forward_held(pid_t pid);

private:
    ForwardedSignals() = default;
    unique_fd fd_;
    std::vector<int> held_;
    sigset_t old_{};
    bool restore_ = false;
};

// What a supervised run may end early: a deadline, and (for a run that owns its container,
// such as `forkbox run BUNDLE` in CI) the signals that cancel a job. Either calls
// kill_container, which must kill every process of the container; the run then still
// waits for `pid` to exit.
struct Supervision {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    bool cancel_on_signal = false;  // SIGINT, SIGTERM, SIGHUP kill instead of being forwarded
    std::function<void()> kill_container;
};

struct ForegroundExit {
    int code = 0;           // 128 + N when killed by signal N
    bool timed_out = false;  // the deadline passed: code is 124, as coreutils timeout
    int cancelled_by = 0;    // the cancelling signal: code is 128 + it
};

// Waits until `pid` (a child of ours) exits, forwarding signals to it. With a pty master
// (>= 0): the caller's stdin goes to the master, the master's output to stdout, a tty stdin
// is in raw mode meanwhile, and SIGWINCH resizes the pty.
Result<ForegroundExit> supervise_foreground(pid_t pid, const ForwardedSignals& signals, int pty_master,
                                            const Supervision& supervision);
// The same without deadline or cancelling: returns the exit code (128 + N when killed by
// signal N).
Result<int> supervise_foreground(pid_t pid, const ForwardedSignals& signals, int pty_master);

}  // namespace forkbox
