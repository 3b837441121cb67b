#include "libforkbox/cgroup/resources.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/cgroup/bpf.hpp"
#include "libforkbox/cgroup/device_filter.hpp"
#include "libforkbox/cgroup/devices_v1.hpp"

namespace forkbox {

uint64_t cpu_shares_to_weight(uint64_t shares) {
    // v1 shares range over [2, 262144], v2 weights over [1, 10000].
    shares = std::clamp<uint64_t>(shares, 2, 262144);
    return 1 + ((shares - 2) * 9999) / 262142;
}

uint64_t blkio_weight_to_io_weight(uint64_t weight) {
    // blkio.weight ranges over [10, 1000], io.weight over [1, 10000].
    weight = std::clamp<uint64_t>(weight, 10, 1000);
    return 1 + ((weight - 10) * 9999) / 990;
}

Result<int64_t> memory_swap_to_v2(int64_t swap, int64_t limit) {
    // An unlimited memory with swap unset means both unlimited, as on v1.
    if (limit == -1 && swap == 0) return -1;
    if (swap == -1 || swap == 0) return swap;
    if (limit == 0 || limit == -1)
        return fail(EINVAL, "linux.resources.memory.swap: cannot set a swap limit without a memory limit");
    if (swap < limit)
        return fail(EINVAL, "linux.resources.memory.swap: memory+swap limit must be >= memory limit");
    return swap - limit;
}

Result<int64_t> parse_memory_size(std::string_view text) {
    auto invalid = [&](std::string_view why = {}) {
        return fail(EINVAL, "invalid size \"" + std::string(text) + "\"" + (why.empty() ? "" : ": ") + std::string(why));
    };
    if (text == "-1") return -1;
    // Digits, an optional fraction, a unit; computed exactly in integers (no float to
    // convert back: "1e30g" or "nan" there overflowed the conversion, undefined behaviour).
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    constexpr unsigned __int128 kMax = INT64_MAX;
    unsigned __int128 whole = 0, frac = 0, scale = 1;
    size_t i = 0;
    for (; i < text.size() && is_digit(text[i]); ++i) {
        whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
        if (whole > kMax) return invalid("larger than 2^63-1 bytes");
    }
    bool digits = i > 0;
    if (i < text.size() && text[i] == '.') {
        for (++i; i < text.size() && is_digit(text[i]); ++i) {
            digits = true;
            if (scale < static_cast<unsigned __int128>(1000000000000000000ULL)) {  // finer than a byte is moot
                frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
                scale *= 10;
            }
        }
    }
    if (!digits) return invalid();
    std::string_view unit = text.substr(i);
    uint64_t mult;
    if (unit.empty() || unit == "b" || unit == "B") mult = 1;
    else if (unit == "k" || unit == "K" || unit == "kb" || unit == "KB") mult = 1ULL << 10;
    else if (unit == "m" || unit == "M" || unit == "mb" || unit == "MB") mult = 1ULL << 20;
    else if (unit == "g" || unit == "G" || unit == "gb" || unit == "GB") mult = 1ULL << 30;
    else return invalid();
    unsigned __int128 bytes = whole * mult + frac * mult / scale;
    if (bytes > kMax) return invalid("larger than 2^63-1 bytes");
    return static_cast<int64_t>(bytes);
}

namespace {

bool in_list(std::string_view list, std::string_view name) {
    size_t i = 0;
    while (i <= list.size()) {
        size_t j = list.find(',', i);
        if (j == std::string_view::npos) j = list.size();
        if (list.substr(i, j - i) == name) return true;
        i = j + 1;
    }
    return false;
}

// The kernel's names of huge page sizes in hugetlb file names: digits, then KB, MB or GB.
bool is_hugepage_size(std::string_view s) {
    if (s.size() < 3 || !s.ends_with('B') || std::string_view("KMG").find(s[s.size() - 2]) == std::string_view::npos)
        return false;
    std::string_view digits = s.substr(0, s.size() - 2);
    return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string num(int64_t v) { return std::to_string(v); }
std::string num(uint64_t v) { return std::to_string(v); }
// -1 (and any negative) means no limit: "max" in v2 files.
std::string max_or(int64_t v) { return v < 0 ? "max" : std::to_string(v); }

std::string dev(int64_t major, int64_t minor) { return num(major) + ":" + num(minor); }

struct Planner {
    const CgroupLayout& layout;
    std::vector<CgroupWrite> out;

    // v1 hierarchy mounted with `ctrl`, or -1.
    int v1(std::string_view ctrl) const {
        for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
            const auto& h = layout.hierarchies[i];
            if (!h.unified && in_list(h.controllers, ctrl)) return static_cast<int>(i);
        }
        return -1;
    }
    // The unified hierarchy when it offers `ctrl`, or -1.
    int v2(std::string_view ctrl) const {
        for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
            const auto& h = layout.hierarchies[i];
            if (h.unified && in_list(h.controllers, ctrl)) return static_cast<int>(i);
        }
        return -1;
    }
    void add(int h, std::string file, std::string value, bool if_exists = false) {
        out.push_back(CgroupWrite{static_cast<size_t>(h), std::move(file), std::move(value), if_exists});
    }
};

std::unexpected<Error> no_controller(std::string_view field, std::string_view ctrl) {
    return fail(EOPNOTSUPP, "linux.resources." + std::string(field) + ": no " + std::string(ctrl) +
                                " controller on this host");
}

bool is_deny_all(const oci::DeviceRule& r) {
    return !r.allow && (r.type.empty() || r.type == "a") && (!r.major || *r.major == -1) &&
           (!r.minor || *r.minor == -1) && (r.access.empty() || r.access == "rwm");
}

std::string device_rule_text(const std::string& type, std::optional<int64_t> major,
                             std::optional<int64_t> minor, const std::string& access) {
    auto part = [](std::optional<int64_t> v) { return v && *v >= 0 ? std::to_string(*v) : std::string("*"); };
    return (type.empty() ? std::string("a") : type) + " " + part(major) + ":" + part(minor) + " " +
           (access.empty() ? std::string("rwm") : access);
}

Result<void> plan_memory(Planner& p, const oci::MemoryResources& m) {
    int64_t limit = m.limit.value_or(0), reservation = m.reservation.value_or(0),
            swap = m.swap.value_or(0);
    bool any = limit || reservation || swap || m.kernel.value_or(0) || m.kernel_tcp.value_or(0) ||
               m.swappiness || m.disable_oom_killer.value_or(false);
    if (!any) return {};
    if (int h = p.v1("memory"); h >= 0) {
        // 0 means unset, as in runc; -1 is unlimited and v1 takes it as is.
        // An unlimited memory with swap unsaid is unlimited swap too (runc): memsw may never
        // be below memory.limit_in_bytes, and -1 is above every limit.
        if (limit == -1 && !swap) swap = -1;
        if (limit) p.add(h, "memory.limit_in_bytes", num(limit));
        if (reservation) p.add(h, "memory.soft_limit_in_bytes", num(reservation));
        // After the limit here; apply_cgroup_writes puts it first when it grows.
        if (swap) p.add(h, "memory.memsw.limit_in_bytes", num(swap), swap == -1);
        // Kernel memory limits are gone from new kernels; where the files remain, write them.
        if (m.kernel.value_or(0)) p.add(h, "memory.kmem.limit_in_bytes", num(*m.kernel), true);
        if (m.kernel_tcp.value_or(0))
            p.add(h, "memory.kmem.tcp.limit_in_bytes", num(*m.kernel_tcp), true);
        if (m.swappiness) p.add(h, "memory.swappiness", num(*m.swappiness));
        if (m.disable_oom_killer.value_or(false)) p.add(h, "memory.oom_control", "1");
        return {};
    }
    int h = p.v2("memory");
    if (h < 0) return no_controller("memory", "memory");
    // v2 has no kernel memory limit, swappiness or OOM-killer switch: like runc, ignore them.
    if (limit) p.add(h, "memory.max", max_or(limit));
    if (reservation) p.add(h, "memory.low", max_or(reservation));
    FB_ASSIGN(int64_t swap2, memory_swap_to_v2(swap, limit));
    // Without swap accounting there is no memory.swap.max: "max" and 0 then change nothing.
    if (swap2) p.add(h, "memory.swap.max", max_or(swap2), swap2 < 0);
    return {};
}

Result<void> plan_cpu(Planner& p, const oci::CpuResources& c) {
    uint64_t shares = c.shares.value_or(0), period = c.period.value_or(0);
    int64_t quota = c.quota.value_or(0), rt_runtime = c.realtime_runtime.value_or(0);
    uint64_t rt_period = c.realtime_period.value_or(0);
    bool any = shares || period || quota || c.burst || rt_runtime || rt_period || c.idle;
    if (any) {
        if (int h = p.v1("cpu"); h >= 0) {
            if (shares) p.add(h, "cpu.shares", num(shares));
            // Period first: a quota is checked against the period in place.
            if (period) p.add(h, "cpu.cfs_period_us", num(period));
            if (quota) p.add(h, "cpu.cfs_quota_us", num(quota));
            // After the quota, which bounds it.
            if (c.burst) p.add(h, "cpu.cfs_burst_us", num(*c.burst));
            if (rt_period) p.add(h, "cpu.rt_period_us", num(rt_period));
            if (rt_runtime) p.add(h, "cpu.rt_runtime_us", num(rt_runtime));
            if (c.idle) p.add(h, "cpu.idle", num(*c.idle));
        } else if (int h2 = p.v2("cpu"); h2 >= 0) {
            if (rt_runtime || rt_period)
                return fail(EOPNOTSUPP, "linux.resources.cpu.realtimeRuntime/realtimePeriod: "
                                        "not supported on cgroup v2");
            if (shares) p.add(h2, "cpu.weight", num(cpu_shares_to_weight(shares)));
            if (quota || period) {
                std::string v = quota > 0 ? num(quota) : std::string("max");
                if (period) v += " " + num(period);
                p.add(h2, "cpu.max", v);
            }
            if (c.burst) p.add(h2, "cpu.max.burst", num(*c.burst));
            if (c.idle) p.add(h2, "cpu.idle", num(*c.idle));
        } else {
            return no_controller("cpu", "cpu");
        }
    }
    if (!c.cpus.empty() || !c.mems.empty()) {
        int h = p.v1("cpuset");
        if (h < 0) h = p.v2("cpuset");
        if (h < 0) return no_controller("cpu.cpus/mems", "cpuset");
        if (!c.cpus.empty()) p.add(h, "cpuset.cpus", c.cpus);
        if (!c.mems.empty()) p.add(h, "cpuset.mems", c.mems);
    }
    return {};
}

Result<void> plan_block_io(Planner& p, const oci::BlockIoResources& b) {
    bool throttles = !b.throttle_read_bps.empty() || !b.throttle_write_bps.empty() ||
                     !b.throttle_read_iops.empty() || !b.throttle_write_iops.empty();
    bool any = b.weight.value_or(0) || b.leaf_weight.value_or(0) || !b.weight_device.empty() || throttles;
    if (!any) return {};
    if (int h = p.v1("blkio"); h >= 0) {
        if (b.weight.value_or(0)) p.add(h, "blkio.weight", num(uint64_t{*b.weight}));
        if (b.leaf_weight.value_or(0)) p.add(h, "blkio.leaf_weight", num(uint64_t{*b.leaf_weight}));
        for (const auto& wd : b.weight_device) {
            if (wd.weight) p.add(h, "blkio.weight_device", dev(wd.major, wd.minor) + " " + num(uint64_t{*wd.weight}));
            if (wd.leaf_weight)
                p.add(h, "blkio.leaf_weight_device", dev(wd.major, wd.minor) + " " + num(uint64_t{*wd.leaf_weight}));
        }
        auto throttle = [&](const std::vector<oci::ThrottleDevice>& list, const char* file) {
            for (const auto& t : list) p.add(h, file, dev(t.major, t.minor) + " " + num(t.rate));
        };
        throttle(b.throttle_read_bps, "blkio.throttle.read_bps_device");
        throttle(b.throttle_write_bps, "blkio.throttle.write_bps_device");
        throttle(b.throttle_read_iops, "blkio.throttle.read_iops_device");
        throttle(b.throttle_write_iops, "blkio.throttle.write_iops_device");
        return {};
    }
    int h = p.v2("io");
    if (h < 0) return no_controller("blockIO", "blkio or io");
    // v2 has no leaf weight; like runc, it is ignored.
    if (b.weight.value_or(0)) p.add(h, "io.weight", num(blkio_weight_to_io_weight(*b.weight)));
    for (const auto& wd : b.weight_device)
        if (wd.weight)
            p.add(h, "io.weight", dev(wd.major, wd.minor) + " " + num(blkio_weight_to_io_weight(*wd.weight)));
    // One io.max line per device with every limit it has, devices in order of first mention.
    std::vector<std::pair<std::string, std::string>> lines;
    auto throttle = [&](const std::vector<oci::ThrottleDevice>& list, const char* key) {
        for (const auto& t : list) {
            std::string d = dev(t.major, t.minor);
            auto it = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l.first == d; });
            if (it == lines.end()) it = lines.insert(lines.end(), {d, std::string()});
            it->second += std::string(" ") + key + "=" + num(t.rate);
        }
    };
    throttle(b.throttle_read_bps, "rbps");
    throttle(b.throttle_write_bps, "wbps");
    throttle(b.throttle_read_iops, "riops");
    throttle(b.throttle_write_iops, "wiops");
    for (const auto& [d, limits] : lines) p.add(h, "io.max", d + limits);
    return {};
}

Result<void> plan_devices(Planner& p, const std::vector<oci::DeviceRule>& rules,
                          const std::optional<DeviceCgroup>& now) {
    if (rules.empty()) return {};
    int h = p.v1("devices");
    if (h < 0) {
        // cgroup v2 has no devices controller: plan_device_program enforces the rules there.
        if (p.layout.unified()) return {};
        // A host with no devices controller cannot restrict anything, and the default deny-all
        // asks for nothing the rest of forkbox relies on. Anything else must not be dropped.
        if (std::all_of(rules.begin(), rules.end(), is_deny_all)) return {};
        return no_controller("devices", "devices");
    }
    if (now) {
        // A live container: only what changes, so that /dev/null and the like stay usable.
        FB_ASSIGN(DeviceCgroup target, emulate_device_rules(effective_device_rules(rules)));
        for (const auto& w : plan_device_transition(*now, target))
            p.add(h, w.allow ? "devices.allow" : "devices.deny", w.rule);
        return {};
    }
    // Start from nothing, then the rules in their order: the kernel keeps the exceptions in
    // the order written, and a later rule overrides an earlier one. The default devices
    // come last, as in the v2 device program.
    p.add(h, "devices.deny", "a");
    for (const auto& r : effective_device_rules(rules))
        p.add(h, r.allow ? "devices.allow" : "devices.deny",
              device_rule_text(r.type, r.major, r.minor, r.access));
    return {};
}

}  // namespace

Result<void> check_memory_limit_above_usage(int64_t limit, uint64_t usage) {
    if (limit <= 0 || static_cast<uint64_t>(limit) >= usage) return {};
    return fail(EINVAL, "linux.resources.memory.limit: " + std::to_string(limit) + " is below the current usage (" +
                            std::to_string(usage) + " bytes) and checkBeforeUpdate is set");
}

Result<void> load_v2_controllers(CgroupLayout& layout) {
    for (auto& h : layout.hierarchies) {
        if (!h.unified) continue;
        FB_ASSIGN(std::string text, read_file(h.mountpoint + "/cgroup.controllers"));
        h.controllers = v2_controller_list(text);
    }
    return {};
}

Result<std::vector<CgroupWrite>> plan_cgroup_writes(const oci::Resources& r, const CgroupLayout& layout,
                                                    const std::optional<DeviceCgroup>& devices_now) {
    Planner p{layout, {}};
    // Device rules first: they restrict what the rest of create may open.
    FB_TRY(plan_devices(p, r.devices, devices_now));
    if (r.memory) FB_TRY(plan_memory(p, *r.memory));
    if (r.cpu) FB_TRY(plan_cpu(p, *r.cpu));
    if (r.pids_limit) {
        int h = p.v1("pids");
        if (h < 0) h = p.v2("pids");
        if (h < 0) return no_controller("pids", "pids");
        // 0 and -1 both mean no limit.
        p.add(h, "pids.max", *r.pids_limit > 0 ? num(*r.pids_limit) : std::string("max"));
    }
    if (r.block_io) FB_TRY(plan_block_io(p, *r.block_io));
    for (const auto& hp : r.hugepage_limits) {
        // It becomes part of a file name: "2MB/../../x" would write outside the cgroup.
        if (!is_hugepage_size(hp.page_size))
            return fail(EINVAL, "linux.resources.hugepageLimits: pageSize \"" + hp.page_size +
                                    "\" is not a huge page size (64KB, 2MB, 1GB, ...)");
        if (int h = p.v1("hugetlb"); h >= 0)
            p.add(h, "hugetlb." + hp.page_size + ".limit_in_bytes", num(hp.limit));
        else if (int h2 = p.v2("hugetlb"); h2 >= 0)
            p.add(h2, "hugetlb." + hp.page_size + ".max", num(hp.limit));
        else
            return no_controller("hugepageLimits", "hugetlb");
    }
    if (r.network) {
        if (r.network->class_id) {
            int h = p.v1("net_cls");
            if (h < 0) return no_controller("network.classID", "net_cls");
            p.add(h, "net_cls.classid", num(uint64_t{*r.network->class_id}));
        }
        if (!r.network->priorities.empty()) {
            int h = p.v1("net_prio");
            if (h < 0) return no_controller("network.priorities", "net_prio");
            for (const auto& prio : r.network->priorities)
                p.add(h, "net_prio.ifpriomap", prio.name + " " + num(uint64_t{prio.priority}));
        }
    }
    for (const auto& [device, limit] : r.rdma) {
        int h = p.v1("rdma");
        if (h < 0) h = p.v2("rdma");
        if (h < 0) return no_controller("rdma", "rdma");
        std::string line = device;
        if (limit.hca_handles) line += " hca_handle=" + num(uint64_t{*limit.hca_handles});
        if (limit.hca_objects) line += " hca_object=" + num(uint64_t{*limit.hca_objects});
        p.add(h, "rdma.max", line);
    }
    for (const auto& [key, value] : r.unified) {
        if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..")
            return fail(EINVAL, "linux.resources.unified: \"" + key + "\" must be a cgroup file name");
        const CgroupHierarchy* u = layout.unified();
        if (!u) return fail(EOPNOTSUPP, "linux.resources.unified: no cgroup v2 hierarchy on this host");
        std::string ctrl = key.substr(0, key.find('.'));
        int h = static_cast<int>(u - layout.hierarchies.data());
        if (ctrl != "cgroup" && !in_list(u->controllers, ctrl))
            return fail(EOPNOTSUPP, "linux.resources.unified." + key + ": no " + ctrl +
                                        " controller in the cgroup v2 hierarchy of this host");
        p.add(h, key, value);
    }
    return std::move(p.out);
}

Result<std::optional<std::vector<bpf_insn>>> plan_device_program(const oci::Resources& r,
                                                                 const CgroupLayout& layout) {
    if (r.devices.empty() || !layout.unified()) return std::nullopt;
    Planner p{layout, {}};
    if (p.v1("devices") >= 0) return std::nullopt;  // devices.allow/deny on v1 (plan_cgroup_writes)
    FB_ASSIGN(auto program, device_filter_program(effective_device_rules(r.devices)));
    return program;
}

namespace {
Result<std::string> v2_dir(const CgroupLayout& layout, const std::vector<std::string>& dirs) {
    const CgroupHierarchy* u = layout.unified();
    size_t h = u ? static_cast<size_t>(u - layout.hierarchies.data()) : dirs.size();
    if (h >= dirs.size()) return fail(EINVAL, "cgroup: device program: no cgroup v2 directory");
    return dirs[h];
}
}  // namespace

Result<void> apply_device_program(const std::vector<bpf_insn>& program, const CgroupLayout& layout,
                                  const std::vector<std::string>& dirs) {
    FB_ASSIGN(std::string dir, v2_dir(layout, dirs));
    FB_TRY_CTX(replace_cgroup_device_program(dir, program), "cgroup: linux.resources.devices");
    return {};
}

Result<void> apply_device_program(int prog_fd, const CgroupLayout& layout, const std::vector<std::string>& dirs) {
    FB_ASSIGN(std::string dir, v2_dir(layout, dirs));
    FB_TRY_CTX(replace_cgroup_device_program(dir, prog_fd), "cgroup: linux.resources.devices");
    return {};
}

namespace {
Result<void> write_cgroup_file(const std::string& dir, const std::string& file, const std::string& value,
                               bool if_exists) {
    std::string path = dir + "/" + file;
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) {
        if (if_exists && errno == ENOENT) return {};
        return sys_error("cgroup: open " + path);
    }
    // One write per value: each write to a cgroup file is one command to the kernel.
    if (::write(fd.get(), value.data(), value.size()) < 0)
        return sys_error("cgroup: write " + file + "=" + value);
    return {};
}
}  // namespace

namespace {

// v1 keeps memory.limit_in_bytes <= memory.memsw.limit_in_bytes at every moment (EINVAL
// otherwise), so the order of the two writes depends on the values live now: raising both,
// memsw goes first; lowering, the limit does (runc's order: memsw first when it is -1 or
// above the current limit).
std::vector<CgroupWrite> order_memory_writes(const std::vector<CgroupWrite>& writes,
                                             const std::vector<std::string>& dirs) {
    std::vector<CgroupWrite> out = writes;
    auto find = [&](const char* file) {
        return std::find_if(out.begin(), out.end(), [&](const CgroupWrite& w) { return w.file == file; });
    };
    auto limit = find("memory.limit_in_bytes"), swap = find("memory.memsw.limit_in_bytes");
    if (limit == out.end() || swap == out.end() || swap < limit || limit->hierarchy >= dirs.size()) return out;
    bool swap_first = swap->value == "-1";
    if (!swap_first) {
        auto current = read_file(dirs[limit->hierarchy] + "/memory.limit_in_bytes");
        unsigned long long cur = current ? std::strtoull(current->c_str(), nullptr, 10) : 0;
        unsigned long long next = std::strtoull(swap->value.c_str(), nullptr, 10);
        swap_first = current && cur < next;
    }
    if (swap_first) std::rotate(limit, swap, swap + 1);
    return out;
}

}  // namespace

Result<void> apply_cgroup_writes(const std::vector<CgroupWrite>& unordered, const CgroupLayout& layout,
                                 const std::vector<std::string>& dirs) {
    std::vector<CgroupWrite> writes = order_memory_writes(unordered, dirs);
    // v2: a controller's files appear in a cgroup only once every ancestor has it in
    // cgroup.subtree_control; enable from the root down.
    std::set<std::string> needed;
    size_t unified = layout.hierarchies.size();
    for (const auto& w : writes) {
        if (w.hierarchy >= layout.hierarchies.size() || w.hierarchy >= dirs.size())
            return fail(EINVAL, "cgroup: write " + w.file + ": no cgroup for hierarchy " + std::to_string(w.hierarchy));
        if (dirs[w.hierarchy].empty())  // a hole: a rootless container's subtree does not reach it
            return fail(EACCES, "cgroup: write " + w.file + ": the container has no cgroup in " +
                                    layout.hierarchies[w.hierarchy].mountpoint + " (not delegated to the user)");
        if (!layout.hierarchies[w.hierarchy].unified) continue;
        unified = w.hierarchy;
        std::string ctrl = w.file.substr(0, w.file.find('.'));
        if (ctrl != "cgroup") needed.insert(ctrl);
    }
    if (!needed.empty()) {
        const std::string& root = layout.hierarchies[unified].mountpoint;
        const std::string& leaf = dirs[unified];
        std::string parent = root;
        while (true) {
            for (const auto& ctrl : needed)
                FB_TRY(write_cgroup_file(parent, "cgroup.subtree_control", "+" + ctrl, false));
            size_t next = leaf.find('/', parent.size() + 1);
            if (next == std::string::npos) break;  // the next one is the leaf itself
            parent = leaf.substr(0, next);
        }
    }
    // Runs of writes to one file (the device rules: a dozen lines to devices.allow) share
    // one open file: each write is still one command to the kernel.
    unique_fd open_file;
    std::string open_path;
    for (const auto& w : writes) {
        std::string path = dirs[w.hierarchy] + "/" + w.file;
        if (path != open_path) {
            open_file.reset(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
            open_path = path;
            if (!open_file) {
                open_path.clear();
                if (w.if_exists && errno == ENOENT) continue;
                return sys_error("cgroup: open " + path);
            }
        }
        if (::write(open_file.get(), w.value.data(), w.value.size()) < 0)
            return sys_error("cgroup: write " + w.file + "=" + w.value);
    }
    return {};
}

}  // namespace forkbox
