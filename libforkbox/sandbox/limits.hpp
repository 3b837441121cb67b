// How a sandbox's limits are enforced on this host, decided once when the service starts
// (pure; unit-tested): memory and pids through the sandbox's cgroup when the hierarchies it
// gets cgroups in offer those controllers, otherwise rlimits; cpu through the cgroup, or
// not at all. A result names what held (Enforcement): a limit is never claimed that the host
// did not apply.
#pragma once

#include <cstdint>

#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "oci/spec.hpp"

namespace forkbox::sandbox {

struct LimitMechanisms {
    bool cgroups = false;  // each sandbox gets cgroups: placement, kill, freezer, usage
    bool memory = false;   // memory.max / memory.limit_in_bytes; else RLIMIT_AS
    bool pids = false;     // pids.max; else RLIMIT_NPROC
    bool cpu = false;      // cpu.max / cpu.cfs_quota_us; else no cpu limit
    bool nproc_rlimit_holds = true;  // RLIMIT_NPROC counts the sandbox's processes (not host root's)

    // What a run or session with these requests reports.
    Enforcement enforcement(bool cpu_asked) const;
};

// Which limits the controllers of `layout` can hold (its v2 hierarchy's `controllers`: those
// enabled for the sandboxes' cgroups). No hierarchy: no cgroups at all.
LimitMechanisms limit_mechanisms(const CgroupLayout& layout);

// The cgroup writes' source for a sandbox: what these mechanisms enforce through cgroups.
// 0 (or cpus <= 0): no limit of that kind.
oci::Resources cgroup_limits(const LimitMechanisms& m, uint64_t memory_mb, uint64_t pids, double cpus);

// The rlimits that stand in for the controllers this host lacks: 0 leaves one unchanged.
struct Rlimits {
    uint64_t nproc = 0;    // RLIMIT_NPROC, counted in the sandbox's user namespace
    uint64_t address = 0;  // RLIMIT_AS in bytes (per process: a process's address space)
};
Rlimits rlimits_for(const LimitMechanisms& m, uint64_t memory_mb, uint64_t pids);

}  // namespace forkbox::sandbox
