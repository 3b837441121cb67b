// A foreground `run` or `exec`: forkbox waits for the container process, forwards the
// signals it gets, and with a terminal copies between the caller's stdio and the pty.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Blocks every signal forkbox forwards and reads them from a signalfd, from construction
// on: block before the process starts so no signal meant for it is lost or acts on us.
class ForwardedSignals {
public:
    static Result<ForwardedSignals> block();
    ForwardedSignals(ForwardedSignals&& other) noexcept;
    ForwardedSignals& operator=(ForwardedSignals&&) = delete;
    ~ForwardedSignals();
    int fd() const { return fd_.get(); }

private:
    ForwardedSignals() = default;
    unique_fd fd_;
    sigset_t old_{};
    bool restore_ = false;
};

// Waits until `pid` (a child of ours) exits, forwarding signals to it. With a pty master
// (>= 0): the caller's stdin goes to the master, the master's output to stdout, a tty stdin
// is in raw mode meanwhile, and SIGWINCH resizes the pty. Returns the exit code (128 + N
// when killed by signal N).
Result<int> supervise_foreground(pid_t pid, const ForwardedSignals& signals, int pty_master);

}  // namespace forkbox
