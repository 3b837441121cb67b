// The v1 devices controller of a live container: what devices.list shows, and the writes to
// devices.allow/devices.deny that take it to new rules without ever refusing an access that
// both the old and the new rules allow (an `update` of a running container). Create, where
// nothing runs yet, writes "devices.deny a" and the rules instead (plan_cgroup_writes).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/device_filter.hpp"

namespace forkbox {

// devices.list -> the state it shows (pure). A default-deny cgroup lists its exceptions, one
// "c 1:3 rwm" a line ("*" for any number), nothing at all when it has none; a default-allow
// one lists "a *:* rwm" alone, since the kernel does not show its deny exceptions: that
// comes back as default_allow with no exceptions, which plan_device_transition therefore
// treats as unknown.
Result<DeviceCgroup> parse_devices_list(std::string_view text);

// "c 1:3 rwm", "b 8:* r": an exception as devices.allow, devices.deny and devices.list spell it.
std::string device_exception_text(const DeviceException& ex);

struct DeviceCgroupWrite {
    bool allow = false;  // devices.allow; else devices.deny
    std::string rule;    // "c 1:3 rw", "a"
    bool operator==(const DeviceCgroupWrite&) const = default;
};

// The writes, in order, that turn the cgroup `now` (parse_devices_list) into `target`
// (emulate_device_rules of the new rules). Pure.
// - Same default, `now` default-deny: only the access that differs, per exception: first
//   what `target` adds, then what it takes away. While the additions are written every
//   exception holds at least its old access, and while the removals are, at least its new
//   one, so nothing both rule sets allow is refused in between (runc writes the removals
//   first: an access that moves from one exception to another is refused for a moment). An
//   unchanged rule set writes nothing.
// - Otherwise (the default changes, or `now` is default-allow with deny exceptions nobody
//   can list): the type-a rule of target's default, which empties the exception list, then
//   every exception of `target`. The window this opens cannot be avoided on v1.
std::vector<DeviceCgroupWrite> plan_device_transition(const DeviceCgroup& now, const DeviceCgroup& target);

// The container's devices cgroup as its devices.list shows it now; std::nullopt when no v1
// hierarchy has the devices controller (cgroup v2 replaces a device program instead).
Result<std::optional<DeviceCgroup>> read_device_cgroup(const CgroupLayout& layout,
                                                       const std::vector<std::string>& dirs);

}  // namespace forkbox
