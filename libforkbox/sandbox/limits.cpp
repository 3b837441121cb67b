#include "libforkbox/sandbox/limits.hpp"

namespace forkbox::sandbox {

Enforcement LimitMechanisms::enforcement(bool cpu_asked) const {
    Enforcement e;
    e.memory = memory ? "cgroup" : "rlimit";
    e.pids = pids ? "cgroup" : nproc_rlimit_holds ? "rlimit" : "none";
    e.cpu = cpu && cpu_asked ? "cgroup" : "none";
    return e;
}

LimitMechanisms limit_mechanisms(const CgroupLayout& layout) {
    LimitMechanisms m;
    m.cgroups = !layout.hierarchies.empty();
    m.memory = layout_offers(layout, "memory");
    m.pids = layout_offers(layout, "pids");
    m.cpu = layout_offers(layout, "cpu");
    return m;
}

oci::Resources cgroup_limits(const LimitMechanisms& m, uint64_t memory_mb, uint64_t pids, double cpus) {
    oci::Resources res;
    if (m.memory && memory_mb) {
        res.memory.emplace();
        res.memory->limit = static_cast<int64_t>(memory_mb << 20);
    }
    if (m.pids && pids) res.pids_limit = static_cast<int64_t>(pids) + 1;  // the sandbox's init counts too
    if (m.cpu && cpus > 0) {
        res.cpu.emplace();
        res.cpu->period = 100000;
        res.cpu->quota = static_cast<int64_t>(cpus * 100000);
    }
    return res;
}

Rlimits rlimits_for(const LimitMechanisms& m, uint64_t memory_mb, uint64_t pids) {
    Rlimits r;
    if (!m.pids && m.nproc_rlimit_holds && pids) r.nproc = pids + 1;  // the sandbox's init counts too
    if (!m.memory) r.address = memory_mb << 20;
    return r;
}

}  // namespace forkbox::sandbox
