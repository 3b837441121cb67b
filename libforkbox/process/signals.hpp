// Signal state a new container process (init, exec, hook) starts from.
#pragma once

#include <sys/types.h>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Every catchable signal back to its default action (SIG_DFL). execve resets handlers but
// keeps SIG_IGN, so without this a process inherits what the runtime's caller ignores:
// conmon ignores SIGPIPE, and a container under podman then gets EPIPE where a pipeline
// (`yes | head`) expects to die quietly, and its shell cannot trap SIGPIPE (POSIX: a signal
// ignored on entry stays ignored). runc (Go) and crun start processes with SIG_DFL.
// Async-signal-safe (open, read and sigaction), for use between clone and execve: only the
// signals /proc/self/status shows ignored or caught are set back, not all 64. It reads the
// runtime's /proc: callers reset before they enter a container's mount namespace, where the
// container could put a file of its own there.
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

// clone(2) of a child that shares our memory (CLONE_VM | flags, on the stack whose top is
// given), born with every signal blocked: a handler of ours run there would run on our
// memory. Our own mask is back at once; the child sets its own. -1 and errno on failure.
pid_t clone_vm_signals_blocked(int (*fn)(void*), void* stack_top, int flags, void* arg);

}  // namespace forkbox
