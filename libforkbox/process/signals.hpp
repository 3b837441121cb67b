// Signal state a new container process (init, exec, hook) starts from.
#pragma once

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Every catchable signal back to its default action (SIG_DFL). execve resets handlers but
// keeps SIG_IGN, so without this a process inherits what the runtime's caller ignores:
// conmon ignores SIGPIPE, and a container under podman then gets EPIPE where a pipeline
// (`yes | head`) expects to die quietly, and its shell cannot trap SIGPIPE (POSIX: a signal
// ignored on entry stays ignored). runc (Go) and crun start processes with SIG_DFL.
// Async-signal-safe: only sigaction, for use between clone and execve.
// A container's init passes ExitOnTermination: until its execve it exits with 128+N on the
// signals of waiting_init_signals.h, which pid 1 would otherwise ignore.
enum class UntilExec { Default, ExitOnTermination };
void reset_signal_dispositions(UntilExec mode = UntilExec::Default);

// Blocks (or unblocks) the signals of waiting_init_signals.h. Blocked across the execve of
// the exec stub, which unblocks them once it catches them: one sent during the exec waits.
void block_termination_signals(bool block);

// A daemon's event loop (the zygote daemon, the sandbox service): SIGTERM, SIGINT, SIGHUP,
// SIGCHLD and SIGPIPE blocked and read from the returned signalfd (non-blocking).
Result<unique_fd> daemon_signalfd();

}  // namespace forkbox
