// What wait4 would say of a process before it exits: its CPU time and peak memory, read
// while it still runs. A sandbox's warm shell says its line is done before its exit (on
// a PVM guest its exit is ~0.6 ms of tearing its address space down); without cgroups to
// read the run's usage from, this is what lets the run end at that word.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "libforkbox/base/fd.hpp"

namespace forkbox {

// A process of another pid namespace too, named by a pidfd: what usage_so_far reads.
struct LiveProcess {
    unique_fd pidfd, stat, status;
    pid_t pid = -1;  // in our pid namespace
};

// Opens its /proc files (nullopt when it is gone or /proc cannot say which pid it has here).
std::optional<LiveProcess> open_live_process(unique_fd pidfd);

struct UsageSoFar {
    uint64_t cpu_ns = 0;           // its threads' CPU time, to the nanosecond (its CPU clock)
    uint64_t peak_rss_bytes = 0;   // VmHWM
};

// Its own usage now, which is what wait4 would report only while it has reaped no child
// (their usage joins its wait4 figures, and /proc has theirs in clock ticks alone): nullopt
// once it did, once its exit has dropped its memory, or once it is reaped (its pid may be
// another's).
std::optional<UsageSoFar> usage_so_far(const LiveProcess& p);

}  // namespace forkbox
