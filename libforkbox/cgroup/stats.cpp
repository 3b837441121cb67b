#include "libforkbox/cgroup/stats.hpp"

#include <dirent.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>

#include "libforkbox/base/files.hpp"

namespace forkbox {

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// USER_HZ: cpuacct.stat counts in these ticks; 100 on every Linux architecture.
constexpr uint64_t kClockTicks = 100;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// Splits on runs of any of `seps`, dropping empty fields.
std::vector<std::string_view> fields(std::string_view s, std::string_view seps = " \t") {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && seps.find(s[i]) != std::string_view::npos) ++i;
        size_t j = i;
        while (j < s.size() && seps.find(s[j]) == std::string_view::npos) ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::vector<std::string_view> lines(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find('\n', i);
        if (j == std::string_view::npos) j = s.size();
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

std::optional<uint64_t> to_u64(std::string_view s) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

std::unexpected<Error> bad(std::string_view what, std::string_view text) {
    return fail(EINVAL, std::string(what) + ": cannot parse \"" + std::string(text) + "\"");
}

// Reads dir/file. A missing file (ENOENT) is nullopt: the controller or the kernel feature
// is not there for this cgroup.
Result<std::optional<std::string>> read_optional(const std::string& dir, const std::string& file) {
    auto text = read_file(dir + "/" + file);
    if (!text) {
        if (text.error().errnum() == ENOENT) return std::optional<std::string>();
        return std::unexpected(text.error());
    }
    return std::optional<std::string>(std::move(*text));
}

// A number file; nullopt when missing.
Result<std::optional<uint64_t>> read_uint(const std::string& dir, const std::string& file) {
    FB_ASSIGN(auto text, read_optional(dir, file));
    if (!text) return std::optional<uint64_t>();
    auto v = parse_cgroup_uint(*text);
    if (!v) return std::unexpected(v.error().wrap(dir + "/" + file));
    return std::optional<uint64_t>(*v);
}

// A number file that must be there once its controller's other files are.
Result<uint64_t> read_required_uint(const std::string& dir, const std::string& file) {
    FB_ASSIGN(auto v, read_uint(dir, file));
    if (!v) return fail(ENOENT, dir + "/" + file + ": missing");
    return *v;
}

Result<std::optional<std::map<std::string, uint64_t>>> read_keyed(const std::string& dir, const std::string& file) {
    FB_ASSIGN(auto text, read_optional(dir, file));
    if (!text) return std::optional<std::map<std::string, uint64_t>>();
    auto m = parse_flat_keyed(*text);
    if (!m) return std::unexpected(m.error().wrap(dir + "/" + file));
    return std::optional<std::map<std::string, uint64_t>>(std::move(*m));
}

uint64_t get(const std::map<std::string, uint64_t>& m, const char* key) {
    auto it = m.find(key);
    return it == m.end() ? 0 : it->second;
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }

// --- cpu ---

Result<void> read_cpuacct_v1(const std::string& dir, CpuUsageStats& u) {
    FB_ASSIGN(auto stat, read_optional(dir, "cpuacct.stat"));
    if (!stat) return {};
    FB_ASSIGN(UserKernel uk, parse_cpuacct_stat(*stat));
    u.user = uk.user;
    u.kernel = uk.kernel;
    FB_ASSIGN(u.total, read_required_uint(dir, "cpuacct.usage"));
    FB_ASSIGN(auto percpu, read_optional(dir, "cpuacct.usage_percpu"));
    if (percpu) {
        FB_ASSIGN(u.percpu, parse_uint_list(*percpu));
    }
    FB_ASSIGN(auto all, read_optional(dir, "cpuacct.usage_all"));  // kernel 4.7+
    if (all) {
        FB_ASSIGN(PercpuModes modes, parse_cpuacct_usage_all(*all));
        u.percpu_kernel = std::move(modes.kernel);
        u.percpu_user = std::move(modes.user);
    }
    return {};
}

// v2 cpu.stat: the usage lines exist in every cgroup, the throttling ones with the cpu
// controller enabled.
Result<void> read_cpu_stat_v2(const std::string& dir, CpuStats& cpu, bool usage, bool throttling) {
    FB_ASSIGN(auto m, read_keyed(dir, "cpu.stat"));
    if (!m) return {};
    if (usage) {
        cpu.usage.total = get(*m, "usage_usec") * 1000;
        cpu.usage.user = get(*m, "user_usec") * 1000;
        cpu.usage.kernel = get(*m, "system_usec") * 1000;
    }
    if (throttling) {
        cpu.throttling.periods = get(*m, "nr_periods");
        cpu.throttling.throttled_periods = get(*m, "nr_throttled");
        cpu.throttling.throttled_time = get(*m, "throttled_usec") * 1000;
    }
    return {};
}

Result<void> read_cpu(const CgroupLayout& layout, const std::vector<std::string>& dirs, CpuStats& cpu) {
    auto acct = controller_dir(layout, dirs, "cpuacct");
    auto sched = controller_dir(layout, dirs, "cpu");
    if (acct && !acct->unified) {
        FB_TRY(read_cpuacct_v1(acct->dir, cpu.usage));
    } else if (acct) {
        FB_TRY(read_cpu_stat_v2(acct->dir, cpu, true, false));
    }
    if (sched && !sched->unified) {
        FB_ASSIGN(auto m, read_keyed(sched->dir, "cpu.stat"));
        if (m) {
            cpu.throttling.periods = get(*m, "nr_periods");
            cpu.throttling.throttled_periods = get(*m, "nr_throttled");
            cpu.throttling.throttled_time = get(*m, "throttled_time");
        }
    } else if (sched) {
        FB_TRY(read_cpu_stat_v2(sched->dir, cpu, false, true));
    }
    return {};
}

Result<void> read_cpuset_v1(const std::string& dir, CpusetStats& c) {
    FB_ASSIGN(auto cpus, read_optional(dir, "cpuset.cpus"));
    if (!cpus) return {};
    FB_ASSIGN(c.cpus, parse_cpu_list(*cpus));
    FB_ASSIGN(auto mems, read_optional(dir, "cpuset.mems"));
    if (mems) {
        FB_ASSIGN(c.mems, parse_cpu_list(*mems));
    }
    struct Flag {
        const char* file;
        uint64_t* out;
    };
    for (auto [file, out] : {Flag{"cpuset.cpu_exclusive", &c.cpu_exclusive},
                             Flag{"cpuset.mem_hardwall", &c.mem_hardwall},
                             Flag{"cpuset.mem_exclusive", &c.mem_exclusive},
                             Flag{"cpuset.memory_migrate", &c.memory_migrate},
                             Flag{"cpuset.memory_spread_page", &c.memory_spread_page},
                             Flag{"cpuset.memory_spread_slab", &c.memory_spread_slab},
                             Flag{"cpuset.memory_pressure", &c.memory_pressure},
                             Flag{"cpuset.sched_load_balance", &c.sched_load_balance}}) {
        FB_ASSIGN(auto v, read_uint(dir, file));
        *out = v.value_or(0);
    }
    // Signed: -1 means the system default.
    FB_ASSIGN(auto level, read_optional(dir, "cpuset.sched_relax_domain_level"));
    if (level) {
        auto t = trim(*level);
        long long v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || p != t.data() + t.size()) return bad("cpuset.sched_relax_domain_level", t);
        c.sched_relax_domain_level = v;
    }
    return {};
}

// --- memory ---

// v1 memory.<prefix>.{usage_in_bytes,max_usage_in_bytes,failcnt,limit_in_bytes}. The swap
// (memsw) and kmem counters are optional in the kernel: missing, they stay zero.
Result<void> read_memory_entry_v1(const std::string& dir, const std::string& prefix, bool optional,
                                  MemoryEntry& e) {
    FB_ASSIGN(auto usage, read_uint(dir, prefix + ".usage_in_bytes"));
    if (!usage) {
        if (optional) return {};
        return fail(ENOENT, dir + "/" + prefix + ".usage_in_bytes: missing");
    }
    e.usage = *usage;
    FB_ASSIGN(e.max, read_required_uint(dir, prefix + ".max_usage_in_bytes"));
    FB_ASSIGN(e.failcnt, read_required_uint(dir, prefix + ".failcnt"));
    FB_ASSIGN(e.limit, read_required_uint(dir, prefix + ".limit_in_bytes"));
    return {};
}

Result<void> read_memory_v1(const std::string& dir, MemoryStats& m) {
    FB_ASSIGN(auto raw, read_keyed(dir, "memory.stat"));
    if (!raw) return {};
    m.raw = std::move(*raw);
    m.cache = get(m.raw, "cache");
    FB_TRY(read_memory_entry_v1(dir, "memory", false, m.usage));
    FB_TRY(read_memory_entry_v1(dir, "memory.memsw", true, m.swap));
    FB_TRY(read_memory_entry_v1(dir, "memory.kmem", true, m.kernel));
    FB_TRY(read_memory_entry_v1(dir, "memory.kmem.tcp", true, m.kernel_tcp));
    return {};
}

Result<void> read_memory_v2(const std::string& dir, MemoryStats& m) {
    FB_ASSIGN(auto raw, read_keyed(dir, "memory.stat"));
    if (!raw) return {};
    m.raw = std::move(*raw);
    m.cache = get(m.raw, "file");
    FB_ASSIGN(m.usage.usage, read_required_uint(dir, "memory.current"));
    FB_ASSIGN(m.usage.limit, read_required_uint(dir, "memory.max"));
    // v2 counts swap alone; report memory+swap as v1 (and runc) does. No swap accounting
    // (CONFIG_MEMCG_SWAP off, swapaccount=0): the files are missing and swap stays zero.
    FB_ASSIGN(auto swap, read_uint(dir, "memory.swap.current"));
    if (swap) {
        FB_ASSIGN(uint64_t swap_max, read_required_uint(dir, "memory.swap.max"));
        m.swap.usage = saturating_add(*swap, m.usage.usage);
        m.swap.limit = swap_max == kMax ? kMax : saturating_add(swap_max, m.usage.limit);
    }
    return {};
}

Result<void> read_memory(const CgroupLayout& layout, const std::vector<std::string>& dirs, MemoryStats& m) {
    auto d = controller_dir(layout, dirs, "memory");
    if (!d) return {};
    return d->unified ? read_memory_v2(d->dir, m) : read_memory_v1(d->dir, m);
}

// --- pids ---

Result<void> read_pids(const CgroupLayout& layout, const std::vector<std::string>& dirs, PidsStats& p) {
    auto d = controller_dir(layout, dirs, "pids");
    if (!d) return {};
    FB_ASSIGN(auto current, read_uint(d->dir, "pids.current"));
    if (!current) {
        // v2 without the pids controller enabled: count the processes instead.
        if (d->unified) p.current = cgroup_tree_pids(d->dir).size();
        return {};
    }
    p.current = *current;
    FB_ASSIGN(auto limit, read_uint(d->dir, "pids.max"));
    p.limit = limit && *limit != kMax ? *limit : 0;  // "max": no limit, which runc shows as 0
    return {};
}

// --- blkio ---

Result<std::vector<BlkioEntry>> read_blkio_file(const std::string& dir, const std::string& file) {
    FB_ASSIGN(auto text, read_optional(dir, file));
    if (!text) return std::vector<BlkioEntry>();
    auto entries = parse_blkio_v1(*text);
    if (!entries) return std::unexpected(entries.error().wrap(dir + "/" + file));
    return entries;
}

// The v1 blkio files come from one of several policies: the first group whose first file
// has entries is used, in runc's order (BFQ with its debug files, BFQ, CFQ, the throttle
// policy's recursive files, the throttle policy's own).
Result<void> read_blkio_v1(const std::string& dir, BlkioStats& b) {
    struct Item {
        const char* file;
        std::vector<BlkioEntry>* out;
    };
    const std::vector<std::vector<Item>> groups = {
        {{"blkio.bfq.sectors_recursive", &b.sectors_recursive},
         {"blkio.bfq.io_service_time_recursive", &b.io_service_time_recursive},
         {"blkio.bfq.io_wait_time_recursive", &b.io_wait_time_recursive},
         {"blkio.bfq.io_merged_recursive", &b.io_merged_recursive},
         {"blkio.bfq.io_queued_recursive", &b.io_queued_recursive},
         {"blkio.bfq.time_recursive", &b.io_time_recursive},
         {"blkio.bfq.io_serviced_recursive", &b.io_serviced_recursive},
         {"blkio.bfq.io_service_bytes_recursive", &b.io_service_bytes_recursive}},
        {{"blkio.bfq.io_serviced_recursive", &b.io_serviced_recursive},
         {"blkio.bfq.io_service_bytes_recursive", &b.io_service_bytes_recursive}},
        {{"blkio.sectors_recursive", &b.sectors_recursive},
         {"blkio.io_service_time_recursive", &b.io_service_time_recursive},
         {"blkio.io_wait_time_recursive", &b.io_wait_time_recursive},
         {"blkio.io_merged_recursive", &b.io_merged_recursive},
         {"blkio.io_queued_recursive", &b.io_queued_recursive},
         {"blkio.time_recursive", &b.io_time_recursive},
         {"blkio.io_serviced_recursive", &b.io_serviced_recursive},
         {"blkio.io_service_bytes_recursive", &b.io_service_bytes_recursive}},
        {{"blkio.throttle.io_serviced_recursive", &b.io_serviced_recursive},
         {"blkio.throttle.io_service_bytes_recursive", &b.io_service_bytes_recursive}},
        {{"blkio.throttle.io_serviced", &b.io_serviced_recursive},
         {"blkio.throttle.io_service_bytes", &b.io_service_bytes_recursive}},
    };
    for (const auto& group : groups) {
        FB_ASSIGN(auto first, read_blkio_file(dir, group.front().file));
        if (first.empty()) continue;
        *group.front().out = std::move(first);
        for (size_t i = 1; i < group.size(); ++i) {
            FB_ASSIGN(*group[i].out, read_blkio_file(dir, group[i].file));
        }
        return {};
    }
    return {};
}

Result<void> read_blkio(const CgroupLayout& layout, const std::vector<std::string>& dirs, BlkioStats& b) {
    auto d = controller_dir(layout, dirs, "blkio");
    if (!d) return {};
    if (!d->unified) return read_blkio_v1(d->dir, b);
    FB_ASSIGN(auto text, read_optional(d->dir, "io.stat"));
    if (!text) return {};
    auto r = parse_io_stat(*text, b);
    if (!r) return std::unexpected(r.error().wrap(d->dir + "/io.stat"));
    return {};
}

// --- hugetlb ---

Result<void> read_hugetlb(const CgroupLayout& layout, const std::vector<std::string>& dirs,
                          std::map<std::string, HugetlbStats>& out) {
    auto d = controller_dir(layout, dirs, "hugetlb");
    if (!d) return {};
    for (const auto& size : hugepage_sizes()) {
        std::string prefix = "hugetlb." + size;
        HugetlbStats h;
        if (!d->unified) {
            FB_ASSIGN(auto usage, read_uint(d->dir, prefix + ".usage_in_bytes"));
            if (!usage) continue;
            h.usage = *usage;
            FB_ASSIGN(h.max, read_required_uint(d->dir, prefix + ".max_usage_in_bytes"));
            FB_ASSIGN(h.failcnt, read_required_uint(d->dir, prefix + ".failcnt"));
        } else {
            // Present only where hugetlb is enabled in the parent's cgroup.subtree_control.
            FB_ASSIGN(auto usage, read_uint(d->dir, prefix + ".current"));
            if (!usage) continue;
            h.usage = *usage;
            FB_ASSIGN(auto events, read_keyed(d->dir, prefix + ".events"));
            if (events) h.failcnt = get(*events, "max");  // allocations refused at the limit
        }
        out[size] = h;
    }
    return {};
}

}  // namespace

// --- parsers ---

Result<uint64_t> parse_cgroup_uint(std::string_view text) {
    auto t = trim(text);
    if (t == "max") return kMax;
    if (auto v = to_u64(t)) return *v;
    // A negative number (v1's -1 for "unset") reads as 0, as runc reads it.
    if (t.size() > 1 && t[0] == '-' && to_u64(t.substr(1))) return uint64_t{0};
    return bad("number", t);
}

Result<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view text) {
    std::map<std::string, uint64_t> out;
    for (auto line : lines(text)) {
        auto f = fields(line);
        if (f.empty()) continue;
        if (f.size() != 2) return bad("key value line", line);
        auto v = to_u64(f[1]);
        if (!v) return bad("key value line", line);
        out[std::string(f[0])] = *v;
    }
    return out;
}

Result<std::vector<uint64_t>> parse_uint_list(std::string_view text) {
    std::vector<uint64_t> out;
    for (auto f : fields(text, " \t\n")) {
        auto v = to_u64(f);
        if (!v) return bad("number list", text);
        out.push_back(*v);
    }
    return out;
}

Result<UserKernel> parse_cpuacct_stat(std::string_view text) {
    auto f = fields(text, " \t\n");
    if (f.size() < 4 || f[0] != "user" || f[2] != "system") return bad("cpuacct.stat", text);
    auto user = to_u64(f[1]), system = to_u64(f[3]);
    if (!user || !system) return bad("cpuacct.stat", text);
    constexpr uint64_t ns_per_tick = 1000000000 / kClockTicks;
    return UserKernel{*user * ns_per_tick, *system * ns_per_tick};
}

Result<PercpuModes> parse_cpuacct_usage_all(std::string_view text) {
    PercpuModes out;
    auto ls = lines(text);
    for (size_t i = 1; i < ls.size(); ++i) {  // line 0: "cpu user system"
        auto f = fields(ls[i]);
        if (f.size() != 3) continue;
        auto user = to_u64(f[1]), system = to_u64(f[2]);
        if (!user || !system) return bad("cpuacct.usage_all", ls[i]);
        out.kernel.push_back(*system);
        out.user.push_back(*user);
    }
    return out;
}

Result<std::vector<uint16_t>> parse_cpu_list(std::string_view text) {
    std::vector<uint16_t> out;
    auto t = trim(text);
    if (t.empty()) return out;
    for (auto range : fields(t, ",")) {
        auto dash = range.find('-');
        auto lo = to_u64(range.substr(0, dash));
        auto hi = dash == std::string_view::npos ? lo : to_u64(range.substr(dash + 1));
        if (!lo || !hi || *hi < *lo || *hi > std::numeric_limits<uint16_t>::max()) return bad("cpu list", t);
        for (uint64_t v = *lo; v <= *hi; ++v) out.push_back(static_cast<uint16_t>(v));
    }
    return out;
}

Result<std::vector<BlkioEntry>> parse_blkio_v1(std::string_view text) {
    std::vector<BlkioEntry> out;
    for (auto line : lines(text)) {
        auto f = fields(line, " \t:");
        if (f.empty()) continue;
        if (f.size() == 2 && f[0] == "Total") continue;
        if (f.size() != 3 && f.size() != 4) return bad("blkio line", line);
        BlkioEntry e;
        auto major = to_u64(f[0]), minor = to_u64(f[1]), value = to_u64(f.back());
        if (!major || !minor || !value) return bad("blkio line", line);
        e.major = *major;
        e.minor = *minor;
        e.value = *value;
        if (f.size() == 4) e.op = std::string(f[2]);
        out.push_back(std::move(e));
    }
    return out;
}

Result<void> parse_io_stat(std::string_view text, BlkioStats& out) {
    struct Key {
        std::string_view key;
        std::vector<BlkioEntry> BlkioStats::*table;
        const char* op;
    };
    static constexpr Key kKeys[] = {
        {"rbytes", &BlkioStats::io_service_bytes_recursive, "Read"},
        {"wbytes", &BlkioStats::io_service_bytes_recursive, "Write"},
        {"rios", &BlkioStats::io_serviced_recursive, "Read"},
        {"wios", &BlkioStats::io_serviced_recursive, "Write"},
    };
    for (auto line : lines(text)) {
        auto f = fields(line);
        if (f.size() < 2) continue;
        auto colon = f[0].find(':');
        if (colon == std::string_view::npos) continue;
        auto major = to_u64(f[0].substr(0, colon)), minor = to_u64(f[0].substr(colon + 1));
        if (!major || !minor) return bad("io.stat line", line);
        for (size_t i = 1; i < f.size(); ++i) {
            auto eq = f[i].find('=');
            if (eq == std::string_view::npos) continue;
            // dbytes, dios, cost.*: no v1 counterpart, skipped.
            for (const auto& k : kKeys) {
                if (f[i].substr(0, eq) != k.key) continue;
                auto value = to_u64(f[i].substr(eq + 1));
                if (!value) return bad("io.stat line", line);
                (out.*k.table).push_back({*major, *minor, k.op, *value});
            }
        }
    }
    return {};
}

std::string hugepage_size_name(uint64_t kb) {
    static const char* units[] = {"KB", "MB", "GB", "TB", "PB"};
    size_t u = 0;
    double v = static_cast<double>(kb);
    while (v >= 1024 && u + 1 < std::size(units)) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g%s", v, units[u]);
    return buf;
}

// --- reading ---

std::vector<std::string> hugepage_sizes() {
    std::vector<std::string> out;
    DIR* d = ::opendir("/sys/kernel/mm/hugepages");
    if (!d) return out;
    while (auto* e = ::readdir(d)) {
        std::string_view name = e->d_name;  // hugepages-2048kB
        if (!name.starts_with("hugepages-") || !name.ends_with("kB")) continue;
        auto kb = to_u64(name.substr(10, name.size() - 12));
        if (kb) out.push_back(hugepage_size_name(*kb));
    }
    ::closedir(d);
    return out;
}

Result<CgroupStats> read_cgroup_stats(const CgroupLayout& layout, const std::vector<std::string>& dirs) {
    CgroupStats s;
    FB_TRY_CTX(read_cpu(layout, dirs, s.cpu), "cpu stats");
    if (auto d = controller_dir(layout, dirs, "cpuset"); d && !d->unified)
        FB_TRY_CTX(read_cpuset_v1(d->dir, s.cpuset), "cpuset stats");
    FB_TRY_CTX(read_memory(layout, dirs, s.memory), "memory stats");
    FB_TRY_CTX(read_pids(layout, dirs, s.pids), "pids stats");
    FB_TRY_CTX(read_blkio(layout, dirs, s.blkio), "blkio stats");
    FB_TRY_CTX(read_hugetlb(layout, dirs, s.hugetlb), "hugetlb stats");
    return s;
}

}  // namespace forkbox
