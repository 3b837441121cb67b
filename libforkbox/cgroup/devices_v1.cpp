#include "libforkbox/cgroup/devices_v1.hpp"

#include <linux/bpf.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "libforkbox/base/files.hpp"

namespace forkbox {

namespace {

// "*" or a decimal number (devices.list prints numbers with %u).
bool parse_device_number(std::string_view text, int64_t& out) {
    if (text == "*") {
        out = -1;
        return true;
    }
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return false;
    out = v;
    return true;
}

bool parse_access(std::string_view text, uint32_t& out) {
    out = 0;
    for (char c : text) {
        if (c == 'r') out |= BPF_DEVCG_ACC_READ;
        else if (c == 'w') out |= BPF_DEVCG_ACC_WRITE;
        else if (c == 'm') out |= BPF_DEVCG_ACC_MKNOD;
        else return false;
    }
    return out != 0;
}

std::string access_text(uint32_t access) {
    std::string s;
    if (access & BPF_DEVCG_ACC_READ) s += 'r';
    if (access & BPF_DEVCG_ACC_WRITE) s += 'w';
    if (access & BPF_DEVCG_ACC_MKNOD) s += 'm';
    return s;
}

bool same_device(const DeviceException& a, const DeviceException& b) {
    return a.type == b.type && a.major == b.major && a.minor == b.minor;
}

// The access the exception for ex's numbers holds in `list` (0 when there is none).
uint32_t access_in(const std::vector<DeviceException>& list, const DeviceException& ex) {
    auto it = std::find_if(list.begin(), list.end(), [&](const DeviceException& e) { return same_device(e, ex); });
    return it == list.end() ? 0 : it->access;
}

}  // namespace

Result<DeviceCgroup> parse_devices_list(std::string_view text) {
    DeviceCgroup cg;
    bool saw_all = false;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find('\n', i);
        if (j == std::string_view::npos) j = text.size();
        std::string_view line = text.substr(i, j - i);
        i = j + 1;
        if (line.empty()) continue;
        auto bad = [&] { return fail(EINVAL, "devices.list: cannot parse \"" + std::string(line) + "\""); };
        // "T MAJOR:MINOR ACCESS"
        size_t sp1 = line.find(' '), colon = line.find(':'), sp2 = line.rfind(' ');
        if (sp1 != 1 || colon == std::string_view::npos || colon < sp1 || sp2 <= colon) return bad();
        DeviceException ex;
        ex.type = line[0];
        if (!parse_device_number(line.substr(sp1 + 1, colon - sp1 - 1), ex.major) ||
            !parse_device_number(line.substr(colon + 1, sp2 - colon - 1), ex.minor) ||
            !parse_access(line.substr(sp2 + 1), ex.access))
            return bad();
        if (ex.type == 'a') {
            saw_all = true;
            continue;
        }
        if (ex.type != 'c' && ex.type != 'b') return bad();
        cg.exceptions.push_back(ex);
    }
    // The kernel prints "a *:* rwm" for a default-allow cgroup and nothing else.
    if (saw_all) {
        if (!cg.exceptions.empty()) return fail(EINVAL, "devices.list: \"a\" listed beside exceptions");
        cg.default_allow = true;
    }
    return cg;
}

std::string device_exception_text(const DeviceException& ex) {
    auto number = [](int64_t v) { return v < 0 ? std::string("*") : std::to_string(v); };
    return std::string(1, ex.type) + " " + number(ex.major) + ":" + number(ex.minor) + " " + access_text(ex.access);
}

std::vector<DeviceCgroupWrite> plan_device_transition(const DeviceCgroup& now, const DeviceCgroup& target) {
    std::vector<DeviceCgroupWrite> out;
    // An exception is an allow in a default-deny cgroup and a deny in a default-allow one.
    bool grant = !target.default_allow;
    const std::vector<DeviceException> none;
    const std::vector<DeviceException>* before = &now.exceptions;
    if (now.default_allow || now.default_allow != target.default_allow) {
        // Also the one way to a new default; the kernel reads nothing after the "a". (On a
        // cgroup with children it fails, EINVAL: one reason to avoid it where we can.)
        out.push_back({target.default_allow, "a"});
        before = &none;
    }
    for (const auto& ex : target.exceptions) {
        uint32_t gained = ex.access & ~access_in(*before, ex);
        if (gained) out.push_back({grant, device_exception_text({ex.type, ex.major, ex.minor, gained})});
    }
    for (const auto& ex : *before) {
        uint32_t lost = ex.access & ~access_in(target.exceptions, ex);
        if (lost) out.push_back({!grant, device_exception_text({ex.type, ex.major, ex.minor, lost})});
    }
    return out;
}

Result<std::optional<DeviceCgroup>> read_device_cgroup(const CgroupLayout& layout,
                                                       const std::vector<std::string>& dirs) {
    for (const auto& h : layout.hierarchies) {
        if (h.unified || !hierarchy_has(h, "devices")) continue;
        auto dir = cgroup_dir_in(layout, h, dirs);
        if (!dir || dir->empty()) return std::nullopt;  // a hole: plan_cgroup_writes reports it
        FB_ASSIGN(std::string text, read_file(*dir + "/devices.list"));
        FB_ASSIGN(DeviceCgroup cg, parse_devices_list(text));
        return cg;
    }
    return std::nullopt;
}

}  // namespace forkbox
