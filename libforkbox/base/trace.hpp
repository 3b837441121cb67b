// A timeline of the critical path, for measuring it: with FORKBOX_TRACE=FILE every forkbox
// process (and container init, up to its execve) appends "PID NANOSECONDS LABEL" lines,
// CLOCK_MONOTONIC, to FILE; a forked child writes "PID/PARENT" (init's PID is 1 in its
// own pid namespace). Off (one branch per mark) without the variable.
#pragma once

namespace forkbox::trace {

// Opens the file named by FORKBOX_TRACE once, at start-up (close-on-exec, append).
void open_from_env();
// One line, one write(2): lines from concurrent processes never interleave.
void mark(const char* label);
// The trace file's fd (-1: off), for a child that closes every other fd.
int fd();

}  // namespace forkbox::trace
