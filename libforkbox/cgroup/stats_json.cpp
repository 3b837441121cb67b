// runc's stats and event JSON (runc/types/events.go) from CgroupStats.
#include "libforkbox/base/json.hpp"
#include "libforkbox/cgroup/stats.hpp"

namespace forkbox {

namespace {

// Go's omitempty rules of runc's types: zero numbers, empty lists and maps are left out
// where runc leaves them out.

void put_nonzero(json::Writer& w, const char* key, uint64_t v) {
    if (v != 0) w.key(key).value(v);
}

template <typename T>
void put_list(json::Writer& w, const char* key, const std::vector<T>& v) {
    if (v.empty()) return;
    w.key(key).begin_array();
    for (auto x : v) w.value(static_cast<uint64_t>(x));
    w.end_array();
}

void put_memory_entry(json::Writer& w, const char* key, const MemoryEntry& e) {
    w.key(key).begin_object();
    w.key("limit").value(e.limit);
    put_nonzero(w, "usage", e.usage);
    put_nonzero(w, "max", e.max);
    w.key("failcnt").value(e.failcnt);
    w.end_object();
}

void put_blkio(json::Writer& w, const char* key, const std::vector<BlkioEntry>& entries) {
    if (entries.empty()) return;
    w.key(key).begin_array();
    for (const auto& e : entries) {
        w.begin_object();
        put_nonzero(w, "major", e.major);
        put_nonzero(w, "minor", e.minor);
        if (!e.op.empty()) w.key("op").value(e.op);
        put_nonzero(w, "value", e.value);
        w.end_object();
    }
    w.end_array();
}

void put_stats(json::Writer& w, const CgroupStats& s) {
    w.begin_object();

    w.key("cpu").begin_object();
    w.key("usage").begin_object();
    put_nonzero(w, "total", s.cpu.usage.total);
    put_list(w, "percpu", s.cpu.usage.percpu);
    put_list(w, "percpu_kernel", s.cpu.usage.percpu_kernel);
    put_list(w, "percpu_user", s.cpu.usage.percpu_user);
    w.key("kernel").value(s.cpu.usage.kernel);
    w.key("user").value(s.cpu.usage.user);
    w.end_object();
    w.key("throttling").begin_object();
    put_nonzero(w, "periods", s.cpu.throttling.periods);
    put_nonzero(w, "throttledPeriods", s.cpu.throttling.throttled_periods);
    put_nonzero(w, "throttledTime", s.cpu.throttling.throttled_time);
    w.end_object();
    w.end_object();

    const auto& c = s.cpuset;
    w.key("cpuset").begin_object();
    put_list(w, "cpus", c.cpus);
    w.key("cpu_exclusive").value(c.cpu_exclusive);
    put_list(w, "mems", c.mems);
    w.key("mem_hardwall").value(c.mem_hardwall);
    w.key("mem_exclusive").value(c.mem_exclusive);
    w.key("memory_migrate").value(c.memory_migrate);
    w.key("memory_spread_page").value(c.memory_spread_page);
    w.key("memory_spread_slab").value(c.memory_spread_slab);
    w.key("memory_pressure").value(c.memory_pressure);
    w.key("sched_load_balance").value(c.sched_load_balance);
    w.key("sched_relax_domain_level").value(c.sched_relax_domain_level);
    w.end_object();

    w.key("memory").begin_object();
    put_nonzero(w, "cache", s.memory.cache);
    put_memory_entry(w, "usage", s.memory.usage);
    put_memory_entry(w, "swap", s.memory.swap);
    put_memory_entry(w, "kernel", s.memory.kernel);
    put_memory_entry(w, "kernelTCP", s.memory.kernel_tcp);
    if (!s.memory.raw.empty()) {
        w.key("raw").begin_object();
        for (const auto& [k, v] : s.memory.raw) w.key(k).value(v);
        w.end_object();
    }
    w.end_object();

    w.key("pids").begin_object();
    put_nonzero(w, "current", s.pids.current);
    put_nonzero(w, "limit", s.pids.limit);
    w.end_object();

    const auto& b = s.blkio;
    w.key("blkio").begin_object();
    put_blkio(w, "ioServiceBytesRecursive", b.io_service_bytes_recursive);
    put_blkio(w, "ioServicedRecursive", b.io_serviced_recursive);
    put_blkio(w, "ioQueueRecursive", b.io_queued_recursive);  // sic: runc's spelling
    put_blkio(w, "ioServiceTimeRecursive", b.io_service_time_recursive);
    put_blkio(w, "ioWaitTimeRecursive", b.io_wait_time_recursive);
    put_blkio(w, "ioMergedRecursive", b.io_merged_recursive);
    put_blkio(w, "ioTimeRecursive", b.io_time_recursive);
    put_blkio(w, "sectorsRecursive", b.sectors_recursive);
    w.end_object();

    w.key("hugetlb").begin_object();
    for (const auto& [size, h] : s.hugetlb) {
        w.key(size).begin_object();
        put_nonzero(w, "usage", h.usage);
        put_nonzero(w, "max", h.max);
        w.key("failcnt").value(h.failcnt);
        w.end_object();
    }
    w.end_object();

    // runc's Intel RDT and network interface stats: forkbox manages neither.
    w.key("intel_rdt").begin_object().end_object();
    w.key("network_interfaces").null();

    w.end_object();
}

}  // namespace

std::string cgroup_stats_json(const CgroupStats& s) {
    json::Writer w;
    put_stats(w, s);
    return w.take();
}

std::string event_json(std::string_view type, std::string_view id, const CgroupStats* data) {
    json::Writer w;
    w.begin_object();
    w.key("type").value(type);
    w.key("id").value(id);
    if (data) {
        w.key("data");
        put_stats(w, *data);
    }
    w.end_object();
    return w.take();
}

}  // namespace forkbox
