// A timeline of the critical path, for measuring it: with FORKBOX_TRACE=FILE every forkbox
// process (and container init, up to its execve) appends "PID NANOSECONDS LABEL" lines,
// CLOCK_MONOTONIC, to FILE; a forked child writes "PID/PARENT" (init's PID is 1 in its
// own pid namespace). Off (one branch per mark) without the variable.
//
// For tests that kill a process at a given step (integration/kills.bats): with
// FORKBOX_TEST_STOP_AT=LABEL, the first process to reach mark(LABEL) stops there, each
// process once: raise(SIGSTOP) (its state in /proc/PID/stat becomes 'T'), or, in the init
// of a pid namespace, which cannot stop itself (the kernel drops a SIGSTOP it sends
// itself), a wait for SIGCONT with a handler for it in place ('S' with SIGCONT in SigCgt
// of /proc/PID/status). SIGCONT goes on; SIGKILL ends either. Same single branch when off.
#pragma once

namespace forkbox::trace {

// Reads FORKBOX_TRACE (the file, opened close-on-exec, append) and FORKBOX_TEST_STOP_AT
// once, at start-up.
void open_from_env();
// One line, one write(2): lines from concurrent processes never interleave.
void mark(const char* label);
// The trace file's fd (-1: off), for a child that closes every other fd.
int fd();

}  // namespace forkbox::trace
