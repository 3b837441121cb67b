// The cgroup freezer behind pause and resume: the v1 `freezer` controller when a v1
// hierarchy has it (hybrid hosts included), else cgroup v2's cgroup.freeze.
#pragma once

#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"

namespace forkbox {

struct Freezer {
    enum class Kind { None, V1, V2 };
    Kind kind = Kind::None;
    std::string dir;  // the container's cgroup directory in that hierarchy
};

// The container's freezer among its cgroup dirs (pure, unit-tested): the dir under the v1
// hierarchy whose controllers include "freezer", else the dir under the v2 hierarchy.
Freezer find_freezer(const CgroupLayout& layout, const std::vector<std::string>& cgroup_dirs);

// find_freezer with the host's layout, read once per invocation.
Result<Freezer> container_freezer(const std::vector<std::string>& cgroup_dirs);

// Writes FROZEN/THAWED (v1) or 1/0 (v2) and polls until the kernel reports the new state,
// for at most ~5 s; a cgroup that does not get there is an error.
Result<void> freeze_cgroup(const Freezer& f);
Result<void> thaw_cgroup(const Freezer& f);

// One read: v1 freezer.state is FROZEN (FREEZING counts as not yet), v2 cgroup.events
// says "frozen 1". No freezer: false.
Result<bool> cgroup_frozen(const Freezer& f);

// One read: no freeze is asked for nor under way. v1 freezer.state is THAWED (FREEZING, as
// while a task that joined a frozen cgroup stops, is not), v2 cgroup.freeze is 0. No
// freezer: true.
Result<bool> cgroup_thawed(const Freezer& f);

}  // namespace forkbox
