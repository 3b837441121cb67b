// A container's resource usage read from its cgroups (v1, v2 or hybrid), in the shape of
// runc's `events` stats (runc/types/events.go, runc 1.1): cpu, cpuset, memory, pids, blkio,
// hugetlb. Parsers of the cgroup files are pure and unit-tested; read_cgroup_stats is the
// only part that touches the filesystem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"

namespace forkbox {

struct CpuUsageStats {
    uint64_t total = 0;  // nanoseconds
    std::vector<uint64_t> percpu, percpu_kernel, percpu_user;
    uint64_t kernel = 0, user = 0;
};

struct CpuThrottlingStats {
    uint64_t periods = 0, throttled_periods = 0, throttled_time = 0;  // time in nanoseconds
};

struct CpuStats {
    CpuUsageStats usage;
    CpuThrottlingStats throttling;
};

// v1 cpuset only (runc 1.1 reads no cpuset stats on v2).
struct CpusetStats {
    std::vector<uint16_t> cpus, mems;
    uint64_t cpu_exclusive = 0, mem_hardwall = 0, mem_exclusive = 0, memory_migrate = 0,
             memory_spread_page = 0, memory_spread_slab = 0, memory_pressure = 0, sched_load_balance = 0;
    int64_t sched_relax_domain_level = 0;
};

// One of memory's usage/swap/kernel/kernelTCP counters. An unlimited v2 limit ("max") is
// UINT64_MAX, an unlimited v1 one is what the kernel prints (9223372036854771712).
struct MemoryEntry {
    uint64_t limit = 0, usage = 0, max = 0, failcnt = 0;
};

struct MemoryStats {
    uint64_t cache = 0;
    MemoryEntry usage, swap, kernel, kernel_tcp;  // swap is memory+swap, as v1 counts it
    std::map<std::string, uint64_t> raw;          // memory.stat
};

struct PidsStats {
    uint64_t current = 0, limit = 0;  // limit 0: none
};

struct BlkioEntry {
    uint64_t major = 0, minor = 0;
    std::string op;  // "Read", "Write", ... or "" for files without one (sectors, time)
    uint64_t value = 0;
    bool operator==(const BlkioEntry&) const = default;
};

struct BlkioStats {
    std::vector<BlkioEntry> io_service_bytes_recursive, io_serviced_recursive, io_queued_recursive,
        io_service_time_recursive, io_wait_time_recursive, io_merged_recursive, io_time_recursive,
        sectors_recursive;
};

struct HugetlbStats {
    uint64_t usage = 0, max = 0, failcnt = 0;
};

struct CgroupStats {
    CpuStats cpu;
    CpusetStats cpuset;
    MemoryStats memory;
    PidsStats pids;
    BlkioStats blkio;
    std::map<std::string, HugetlbStats> hugetlb;  // by page size: "2MB", "1GB"
};

// --- pure parsers of cgroup file contents ---

// One number file: trailing whitespace ignored, "max" is UINT64_MAX, a negative value is 0
// (v1 prints -1 for some unset values).
Result<uint64_t> parse_cgroup_uint(std::string_view text);

// "key value" lines (memory.stat, cpu.stat, memory.events, pids.events ...).
Result<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view text);

// Whitespace-separated numbers (cpuacct.usage_percpu).
Result<std::vector<uint64_t>> parse_uint_list(std::string_view text);

// cpuacct.stat ("user N\nsystem N" in USER_HZ ticks) -> {user, kernel} in nanoseconds.
struct UserKernel {
    uint64_t user = 0, kernel = 0;
};
Result<UserKernel> parse_cpuacct_stat(std::string_view text);

// cpuacct.usage_all ("cpu user system" header, then one line per cpu) -> per-cpu
// kernel and user nanoseconds.
struct PercpuModes {
    std::vector<uint64_t> kernel, user;
};
Result<PercpuModes> parse_cpuacct_usage_all(std::string_view text);

// A cpu or node list ("0-3,8,10-11") -> each number.
Result<std::vector<uint16_t>> parse_cpu_list(std::string_view text);

// A v1 blkio file ("8:0 Read 123", "8:0 123"; "Total N" lines skipped).
Result<std::vector<BlkioEntry>> parse_blkio_v1(std::string_view text);

// v2 io.stat ("8:0 rbytes=1 wbytes=2 rios=3 wios=4 ...") -> the service bytes and serviced
// tables in v1's naming (Read/Write); other keys have no v1 counterpart and are skipped.
Result<void> parse_io_stat(std::string_view text, BlkioStats& out);

// The name runc gives a huge page size from its size in kB: 2048 -> "2MB", 1048576 -> "1GB",
// 64 -> "64KB".
std::string hugepage_size_name(uint64_t kb);

// --- reading ---

// Huge page sizes the kernel offers (/sys/kernel/mm/hugepages), as hugepage_size_name.
std::vector<std::string> hugepage_sizes();

// Reads every controller's stats for a container whose cgroup dirs are `dirs` (the state's
// cgroup_dirs): the v1 hierarchy with the controller, else the v2 one. A controller the
// container has no cgroup for, or whose files are missing, is left zero.
Result<CgroupStats> read_cgroup_stats(const CgroupLayout& layout, const std::vector<std::string>& dirs);

// --- JSON (stats_json.cpp) ---

// The `data` object of runc's stats event, with Go's omitempty rules of runc's types.
std::string cgroup_stats_json(const CgroupStats& s);

// One event line without the newline: {"type":TYPE,"id":ID} plus "data" when given.
std::string event_json(std::string_view type, std::string_view id, const CgroupStats* data = nullptr);

}  // namespace forkbox
