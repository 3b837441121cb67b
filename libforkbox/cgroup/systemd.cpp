#include "libforkbox/cgroup/systemd.hpp"

#include <linux/bpf.h>

#include <cctype>
#include <cstdlib>
#include <limits>

#include "libforkbox/cgroup/device_filter.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/dbus/variant_text.hpp"

namespace forkbox::systemd {

namespace {

using dbus::Value;

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t i = 0;
    for (;;) {
        size_t j = s.find(sep, i);
        out.push_back(s.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
        if (j == std::string_view::npos) return out;
        i = j + 1;
    }
}

constexpr uint64_t kInfinity = std::numeric_limits<uint64_t>::max();  // systemd's USEC_INFINITY, "infinity"

// A limit where -1 (any negative) is none: systemd's infinity.
uint64_t limit_value(int64_t v) { return v < 0 ? kInfinity : static_cast<uint64_t>(v); }

void add(Properties& p, std::string name, Value v) { p.push_back(Property{std::move(name), std::move(v)}); }

// runc's addCpuQuota: the period as CPUQuotaPeriodUSec (systemd >= 242), the quota as
// CPUQuotaPerSecUSec, microseconds of CPU time per second rounded up to whole percents
// (systemd keeps a percentage, and a child cgroup must still be able to set the quota).
void add_cpu_quota(Properties& p, int64_t quota, uint64_t period, int version) {
    if (period != 0 && version >= 242) add(p, "CPUQuotaPeriodUSec", Value::uint64(period));
    if (quota == 0 && period == 0) return;
    uint64_t per_sec = kInfinity;
    if (quota > 0) {
        if (period == 0) period = 100000;  // the kernel's default period
        per_sec = static_cast<uint64_t>(quota) * 1000000 / period;
        if (per_sec % 10000) per_sec = (per_sec / 10000 + 1) * 10000;
    }
    add(p, "CPUQuotaPerSecUSec", Value::uint64(per_sec));
}

Result<void> add_cpuset(Properties& p, const std::string& cpus, const std::string& mems, int version) {
    if (version < 244) return {};  // AllowedCPUs/AllowedMemoryNodes are newer: cgroupfs only
    if (!cpus.empty()) {
        auto mask = cpu_list_to_mask(cpus);
        if (!mask) return fail(EINVAL, "linux.resources.cpu.cpus=\"" + cpus + "\": " + mask.error().what());
        add(p, "AllowedCPUs", Value::bytes(*mask));
    }
    if (!mems.empty()) {
        auto mask = cpu_list_to_mask(mems);
        if (!mask) return fail(EINVAL, "linux.resources.cpu.mems=\"" + mems + "\": " + mask.error().what());
        add(p, "AllowedMemoryNodes", Value::bytes(*mask));
    }
    return {};
}

Result<uint64_t> unified_number(const std::string& key, std::string_view v) {
    if (v == "max") return kInfinity;
    char* end = nullptr;
    std::string s(v);
    errno = 0;
    unsigned long long n = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || s[0] == '-')
        return fail(EINVAL, "linux.resources.unified: " + key + "=\"" + s + "\" is not a number");
    return n;
}

std::string trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return std::string(s);
}

// runc's unifiedResToSystemdProps: the unified keys systemd has a property for; the rest are
// cgroupfs only.
Result<void> add_unified(Properties& p, const std::map<std::string, std::string>& unified, int version) {
    for (const auto& [key, raw] : unified) {
        std::string v = trim(raw);
        if (key == "cpu.max") {
            auto fields = split(v, ' ');
            if (fields.empty() || fields.size() > 2 || fields[0].empty())
                return fail(EINVAL, "linux.resources.unified: cpu.max=\"" + v + "\" is not \"QUOTA [PERIOD]\"");
            int64_t quota = 0;
            uint64_t period = 100000;
            if (fields[0] != "max") {
                FB_ASSIGN(uint64_t q, unified_number(key, fields[0]));
                quota = static_cast<int64_t>(q);
            }
            if (fields.size() == 2) {
                FB_ASSIGN(period, unified_number(key, fields[1]));
            }
            add_cpu_quota(p, quota, period, version);
        } else if (key == "cpu.weight") {
            FB_ASSIGN(uint64_t w, unified_number(key, v));
            add(p, "CPUWeight", Value::uint64(w));
        } else if (key == "cpuset.cpus" || key == "cpuset.mems") {
            if (version < 244) continue;
            auto mask = cpu_list_to_mask(v);
            if (!mask) return fail(EINVAL, "linux.resources.unified: " + key + "=\"" + v + "\": " + mask.error().what());
            add(p, key == "cpuset.cpus" ? "AllowedCPUs" : "AllowedMemoryNodes", Value::bytes(*mask));
        } else if (key == "memory.high" || key == "memory.low" || key == "memory.min" || key == "memory.max" ||
                   key == "memory.swap.max") {
            static const std::map<std::string, std::string> names = {
                {"memory.high", "MemoryHigh"}, {"memory.low", "MemoryLow"}, {"memory.min", "MemoryMin"},
                {"memory.max", "MemoryMax"},   {"memory.swap.max", "MemorySwapMax"}};
            FB_ASSIGN(uint64_t n, unified_number(key, v));
            add(p, names.at(key), Value::uint64(n));
        } else if (key == "pids.max") {
            FB_ASSIGN(uint64_t n, unified_number(key, v));
            add(p, "TasksMax", Value::uint64(n));
        }
    }
    return {};
}

std::string access_text(uint32_t access) {
    std::string s;
    if (access & BPF_DEVCG_ACC_READ) s += 'r';
    if (access & BPF_DEVCG_ACC_WRITE) s += 'w';
    if (access & BPF_DEVCG_ACC_MKNOD) s += 'm';
    return s;
}

// runc's checkPropertyName.
bool valid_property_name(std::string_view name) {
    if (name.size() < 3) return false;
    for (char c : name)
        if (!std::isalpha(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) > 127) return false;
    return true;
}

Result<Value> seconds_to_usec(const Value& v) {
    constexpr uint64_t M = 1000000;
    switch (v.code()) {
    case 'y': case 'q': case 'u': case 't': return Value::uint64(v.as_uint() * M);
    case 'n': case 'i': case 'x': return Value::uint64(static_cast<uint64_t>(v.as_int()) * M);
    case 'd': return Value::uint64(static_cast<uint64_t>(v.as_double() * M));
    default: return fail(EINVAL, "not a number");
    }
}

}  // namespace

Result<std::string> expand_slice(std::string_view slice) {
    constexpr std::string_view suffix = ".slice";
    auto invalid = [&] { return fail(EINVAL, "invalid slice name: " + std::string(slice)); };
    if (slice.size() <= suffix.size() || !slice.ends_with(suffix) || slice.find('/') != std::string_view::npos)
        return invalid();
    std::string_view name = slice.substr(0, slice.size() - suffix.size());
    if (name == "-") return std::string("/");
    std::string path, prefix;
    for (auto component : split(name, '-')) {
        if (component.empty()) return invalid();
        path += "/" + prefix + std::string(component) + std::string(suffix);
        prefix += std::string(component) + "-";
    }
    return path;
}

Result<Unit> parse_cgroups_path(std::string_view cgroups_path, std::string_view id, bool rootless) {
    std::string slice, prefix = "forkbox", name(id);
    if (!cgroups_path.empty()) {
        auto parts = split(cgroups_path, ':');
        if (parts.size() != 3)
            return fail(EINVAL, "expected cgroupsPath to be of format \"slice:prefix:name\" for systemd cgroups, got \"" +
                                    std::string(cgroups_path) + "\" instead");
        slice = parts[0];
        prefix = parts[1];
        name = parts[2];
    }
    if (slice.empty()) slice = rootless ? "user.slice" : "system.slice";
    Unit u;
    u.slice = slice;
    u.unit = name.ends_with(".slice") ? name : prefix + "-" + name + ".scope";
    auto slice_path = expand_slice(slice);
    if (!slice_path) return std::unexpected(slice_path.error());
    u.path = (*slice_path == "/" ? std::string() : *slice_path) + "/" + u.unit;
    return u;
}

Properties unit_properties(const Unit& unit, pid_t pid, bool unified, std::string_view description) {
    Properties p;
    add(p, "Description", Value::string(std::string(description)));
    bool is_slice = unit.unit.ends_with(".slice");
    // A slice's parent comes with Wants=; a scope is placed with Slice=.
    if (is_slice)
        add(p, "Wants", Value::strings({unit.slice}));
    else
        add(p, "Slice", Value::string(unit.slice));
    if (pid > 0) add(p, "PIDs", Value::uint32s({static_cast<uint32_t>(pid)}));
    if (!is_slice) add(p, "Delegate", Value::boolean(true));
    add(p, "MemoryAccounting", Value::boolean(true));
    add(p, "CPUAccounting", Value::boolean(true));
    add(p, unified ? "IOAccounting" : "BlockIOAccounting", Value::boolean(true));
    add(p, "TasksAccounting", Value::boolean(true));
    add(p, "DefaultDependencies", Value::boolean(false));
    return p;
}

bool needs_version(const oci::Resources& r) {
    if (r.cpu && (r.cpu->period.value_or(0) != 0 || !r.cpu->cpus.empty() || !r.cpu->mems.empty())) return true;
    for (const auto& [key, value] : r.unified)
        if (key == "cpu.max" || key.starts_with("cpuset.")) return true;
    return false;
}

Result<Properties> resource_properties(const oci::Resources& r, bool unified, int version) {
    Properties p;
    if (!r.devices.empty()) {
        FB_ASSIGN(Properties devices, device_properties(effective_device_rules(r.devices)));
        p = std::move(devices);
    }
    if (r.memory) {
        const auto& m = *r.memory;
        int64_t limit = m.limit.value_or(0);
        if (!unified) {
            if (limit != 0) add(p, "MemoryLimit", Value::uint64(limit_value(limit)));
        } else {
            if (limit != 0) add(p, "MemoryMax", Value::uint64(limit_value(limit)));
            if (m.reservation.value_or(0) != 0) add(p, "MemoryLow", Value::uint64(limit_value(*m.reservation)));
            FB_ASSIGN(int64_t swap, memory_swap_to_v2(m.swap.value_or(0), limit));
            if (swap != 0) add(p, "MemorySwapMax", Value::uint64(limit_value(swap)));
        }
    }
    if (r.cpu) {
        const auto& c = *r.cpu;
        if (c.shares.value_or(0) != 0) {
            if (unified)
                add(p, "CPUWeight", Value::uint64(cpu_shares_to_weight(*c.shares)));
            else
                add(p, "CPUShares", Value::uint64(*c.shares));
        }
        add_cpu_quota(p, c.quota.value_or(0), c.period.value_or(0), version);
    }
    if (!unified && r.block_io && r.block_io->weight.value_or(0) != 0)
        add(p, "BlockIOWeight", Value::uint64(*r.block_io->weight));
    // forkbox's cgroupfs writes take 0 and -1 alike as "no limit" (pids.max "max"): so does
    // the property, where runc sends nothing for 0.
    if (r.pids_limit) add(p, "TasksMax", Value::uint64(*r.pids_limit > 0 ? static_cast<uint64_t>(*r.pids_limit) : kInfinity));
    if (r.cpu) FB_TRY(add_cpuset(p, r.cpu->cpus, r.cpu->mems, version));
    if (unified) FB_TRY(add_unified(p, r.unified, version));
    return p;
}

Result<Properties> device_properties(const std::vector<oci::DeviceRule>& rules) {
    FB_ASSIGN(DeviceCgroup emulated, emulate_device_rules(rules));
    Properties p;
    auto allow_list = [](std::vector<Value> entries) { return Value::array("(ss)", std::move(entries)); };
    if (emulated.default_allow) {
        // Allow-all is "auto" with no list; systemd has no deny lists, so any other
        // default-allow rule set is a deny-all here that cgroupfs then opens up (as runc).
        add(p, "DevicePolicy", Value::string(emulated.exceptions.empty() ? "auto" : "strict"));
        add(p, "DeviceAllow", allow_list({}));
        return p;
    }
    add(p, "DevicePolicy", Value::string("strict"));
    // An empty DeviceAllow first: a new list replaces the old instead of adding to it.
    add(p, "DeviceAllow", allow_list({}));
    std::vector<Value> entries;
    for (const auto& ex : emulated.exceptions) {
        std::string kind = ex.type == 'b' ? "block" : "char";
        std::string path;
        if (ex.major < 0) {
            if (ex.minor >= 0) continue;  // "c *:N": systemd cannot say it; cgroupfs has it
            path = kind + "-*";
        } else if (ex.minor < 0) {
            path = kind + "-" + std::to_string(ex.major);  // systemd >= 240
        } else {
            path = "/dev/" + kind + "/" + std::to_string(ex.major) + ":" + std::to_string(ex.minor);
        }
        entries.push_back(Value::structure({Value::string(path), Value::string(access_text(ex.access))}));
    }
    add(p, "DeviceAllow", allow_list(std::move(entries)));
    return p;
}

Result<Properties> annotation_properties(const std::map<std::string, std::string>& annotations) {
    constexpr std::string_view prefix = "org.systemd.property.";
    Properties p;
    for (const auto& [key, text] : annotations) {
        if (!key.starts_with(prefix)) continue;
        std::string name = key.substr(prefix.size());
        if (!valid_property_name(name))
            return fail(EINVAL, "annotation " + key + " name incorrect: " +
                                    (name.size() < 3 ? "too short" : "contains non-alphabetic character"));
        auto value = dbus::parse_variant_text(text);
        if (!value) return fail(EINVAL, "annotation " + key + "=" + text + " value parse error: " + value.error().what());
        Value v = std::move(*value);
        // TimeoutStopSec -> TimeoutStopUSec: D-Bus has only the microsecond properties.
        if (name.size() > 3 && name.ends_with("Sec") && std::islower(static_cast<unsigned char>(name[name.size() - 4]))) {
            name = name.substr(0, name.size() - 3) + "USec";
            auto usec = seconds_to_usec(v);
            if (!usec) return fail(EINVAL, "annotation " + key + "=" + text + " value parse error: " + usec.error().what());
            v = std::move(*usec);
        }
        add(p, name, std::move(v));
    }
    return p;
}

Result<std::vector<uint8_t>> cpu_list_to_mask(std::string_view list) {
    std::vector<uint8_t> mask;
    auto number = [](std::string_view s) -> Result<unsigned long> {
        std::string t = trim(s);
        char* end = nullptr;
        errno = 0;
        unsigned long v = std::strtoul(t.c_str(), &end, 10);
        if (t.empty() || *end || errno || t[0] == '-' || v > 65535) return fail(EINVAL, "bad number \"" + t + "\"");
        return v;
    };
    for (auto part : split(list, ',')) {
        std::string item = trim(part);
        if (item.empty()) continue;  // extra commas, as runc allows
        size_t dash = item.find('-');
        unsigned long first, last;
        if (dash == std::string::npos) {
            FB_ASSIGN(first, number(item));
            last = first;
        } else {
            FB_ASSIGN(first, number(std::string_view(item).substr(0, dash)));
            FB_ASSIGN(last, number(std::string_view(item).substr(dash + 1)));
            if (first > last) return fail(EINVAL, "invalid range: " + item);
        }
        if (mask.size() < last / 8 + 1) mask.resize(last / 8 + 1, 0);
        for (unsigned long i = first; i <= last; ++i) mask[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
    if (mask.empty()) return fail(EINVAL, "empty value");
    return mask;
}

int parse_version(std::string_view text) {
    size_t i = 0;
    while (i < text.size() && (text[i] == '"' || text[i] == 'v')) ++i;
    size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && i - start < 9) ++i;
    if (i == start) return -1;
    return std::atoi(std::string(text.substr(start, i - start)).c_str());
}

bool manages(const CgroupHierarchy& h) {
    if (h.unified) return true;
    for (const char* c : {"name=systemd", "cpu", "cpuacct", "blkio", "memory", "devices", "pids"})
        if (hierarchy_has(h, c)) return true;
    return false;
}

std::string manager_root(const CgroupLayout& layout, std::string_view proc1_cgroup) {
    bool v1_named = false;
    for (const auto& h : layout.hierarchies) v1_named |= hierarchy_has(h, "name=systemd");
    std::string root;
    for (auto line : split(proc1_cgroup, '\n')) {
        auto fields = split(line, ':');
        if (fields.size() < 3) continue;
        bool wanted = v1_named ? fields[1] == "name=systemd" : (fields[0] == "0" && fields[1].empty());
        if (!wanted) continue;
        // The path may hold ':' itself: everything after the second one.
        std::string_view path = line.substr(fields[0].size() + fields[1].size() + 2);
        root = std::string(path);
        break;
    }
    if (root.ends_with("/init.scope")) root.resize(root.size() - std::string_view("/init.scope").size());
    if (root == "/") root.clear();
    return root;
}

}  // namespace forkbox::systemd
