// The systemd cgroup driver's pure half: runc's `slice:prefix:name` cgroupsPath, slice
// expansion, and a container's unit properties (the ones runc 1.1.5 sends, by systemd
// version). systemd_manager.hpp asks systemd for the unit over D-Bus.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/dbus/message.hpp"
#include "oci/spec.hpp"

namespace forkbox::systemd {

// The container's unit: `unit` in `slice`, its cgroup `path` below the manager's root.
struct Unit {
    std::string slice;  // "system.slice"
    std::string unit;   // "forkbox-ID.scope", "libpod-ID.scope", or a name ending in ".slice"
    std::string path;   // "/system.slice/forkbox-ID.scope"
    bool operator==(const Unit&) const = default;
};

// linux.cgroupsPath for the systemd driver, as runc reads it: "" is ":forkbox:<id>"; else
// exactly "slice:prefix:name", where an empty slice is system.slice (user.slice rootless) and
// the unit is "<prefix>-<name>.scope", or name itself when it ends in ".slice". Anything else
// is runc's error (`expected cgroupsPath to be of format "slice:prefix:name" ...`).
Result<Unit> parse_cgroups_path(std::string_view cgroups_path, std::string_view id, bool rootless);

// A slice's cgroup path: "a-b.slice" is "/a.slice/a-b.slice", "-.slice" is "/". runc's
// "invalid slice name: NAME" for anything else (no ".slice", a '/', an empty component).
Result<std::string> expand_slice(std::string_view slice);

struct Property {
    std::string name;
    dbus::Value value;
    bool operator==(const Property&) const = default;
};
using Properties = std::vector<Property>;

// The unit's own properties, as runc sets them: Description; Slice (or, for a slice, Wants);
// PIDs=[pid]; Delegate=true for a scope; memory, CPU, tasks and block-I/O accounting (IO on
// cgroup v2, BlockIO on v1 and hybrid, where systemd drives the v1 controllers);
// DefaultDependencies=false.
Properties unit_properties(const Unit& unit, pid_t pid, bool unified, std::string_view description);

// Whether resource_properties needs systemd's version: the CPU quota period and the allowed
// CPUs and memory nodes depend on it (242 and 244).
bool needs_version(const oci::Resources& r);

// linux.resources as unit properties for systemd `version`, the names runc uses: on v1 and
// hybrid MemoryLimit, CPUShares, BlockIOWeight; on v2 MemoryMax, MemoryLow, MemorySwapMax,
// CPUWeight; both TasksMax, CPUQuotaPerSecUSec (CPUQuotaPeriodUSec from 242), AllowedCPUs and
// AllowedMemoryNodes (from 244), on v2 the unified map's cpu.max, cpu.weight, cpuset.*,
// memory.* and pids.max; and the device policy (device_properties). What has no property is
// written to cgroupfs only, as runc does.
Result<Properties> resource_properties(const oci::Resources& r, bool unified, int version);

// The device rules (effective_device_rules order) as DevicePolicy and DeviceAllow, as runc
// does: "strict" with the allowed devices ("/dev/char/1:3", "char-136", "char-*"), "auto" with
// none for allow-all; rules systemd cannot say (a deny list, "*:N") are left to cgroupfs, with
// "strict" and an empty list meanwhile.
Result<Properties> device_properties(const std::vector<oci::DeviceRule>& rules);

// org.systemd.property.NAME annotations (value in GVariant text, see dbus/variant_text.hpp),
// as runc reads them; NAME of letters only, 3 at least; a NAME ending in a lowercase letter
// and "Sec" is sent as "...USec" with the seconds turned into microseconds.
Result<Properties> annotation_properties(const std::map<std::string, std::string>& annotations);

// "0-3,5" (cpuset syntax) as the byte mask AllowedCPUs and AllowedMemoryNodes take: byte i
// holds CPUs 8i..8i+7, lowest bit first (systemd's cpu_set_to_dbus).
Result<std::vector<uint8_t>> cpu_list_to_mask(std::string_view list);

// The first integer of a version string ("252.38-1~deb12u1", "v245.4-1.fc32"), -1 if none.
int parse_version(std::string_view text);

// Whether systemd itself places a unit's processes in hierarchy h: cgroup2 (the unified
// hierarchy is systemd's own on v2 and hybrid hosts), name=systemd, and on v1 the controllers
// it drives (cpu, cpuacct, blkio, memory, devices, pids). The others (cpuset, freezer,
// net_cls, perf_event, hugetlb, ...) are forkbox's, as with runc's legacy manager.
bool manages(const CgroupHierarchy& h);

// Where systemd's root is in each hierarchy: PID 1's cgroup in name=systemd (or cgroup2), less
// a trailing "/init.scope", from /proc/1/cgroup's text (pure). "" at the hierarchy's root.
std::string manager_root(const CgroupLayout& layout, std::string_view proc1_cgroup);

}  // namespace forkbox::systemd
