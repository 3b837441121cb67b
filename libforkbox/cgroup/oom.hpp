// Out-of-memory notifications from a container's memory cgroup. v1: an eventfd registered
// for memory.oom_control through cgroup.event_control; the kernel signals it at each OOM and
// once more when the cgroup is removed. v2: inotify on memory.events (its oom_kill counter)
// and cgroup.events ("populated 0" once every process has exited).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/cgroup/cgroups.hpp"

namespace forkbox {

class OomNotifier {
public:
    // Registers for the container's memory cgroup. A container without one gets a notifier
    // whose fd() is -1 (nothing to wait for).
    static Result<OomNotifier> open(const CgroupLayout& layout, const std::vector<std::string>& dirs);

    // Becomes readable (POLLIN) when the kernel has something to report.
    int fd() const { return fd_.get(); }

    struct Report {
        uint64_t ooms = 0;  // OOM events since the last read
        bool gone = false;  // the cgroup was removed (v1) or has no process left (v2)
    };
    // Non-blocking: what happened since the last read (nothing when fd() was not readable).
    Result<Report> read();

private:
    bool unified_ = false;
    std::string dir_;
    unique_fd fd_;           // eventfd (v1) or inotify instance (v2)
    unique_fd oom_control_;  // v1: memory.oom_control, open while the event is registered
    uint64_t oom_kills_ = 0; // v2: memory.events oom_kill at the last read
};

// The value of `key` in a flat-keyed cgroup file ("oom_kill 3"); 0 when absent (pure).
uint64_t cgroup_keyed_value(std::string_view text, std::string_view key);

}  // namespace forkbox
