// linux.resources -> cgroup files. Planning is pure (which file of which hierarchy gets
// which value, with runc's v1<->v2 conversions); applying only writes the plan in order.
#pragma once

#include <linux/bpf.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/device_filter.hpp"
#include "oci/spec.hpp"

namespace forkbox {

struct CgroupWrite {
    size_t hierarchy = 0;     // index into CgroupLayout::hierarchies (and CgroupPlacement::dirs())
    std::string file;         // "memory.limit_in_bytes", "cpu.max"
    std::string value;
    bool if_exists = false;   // skip when the kernel lacks the file (ENOENT), e.g. kmem on new kernels

    bool operator==(const CgroupWrite&) const = default;
};

// runc's conversions, for a user who writes the v1 value on a v2 host.
uint64_t cpu_shares_to_weight(uint64_t shares);        // 1 + ((shares-2)*9999)/262142
uint64_t blkio_weight_to_io_weight(uint64_t weight);   // 1 + (weight-10)*9999/990
// memory.swap.max from the v1 memory+swap value: swap - limit; -1 is "max". Fails when the
// pair cannot be expressed (swap below the limit, swap without a limit).
Result<int64_t> memory_swap_to_v2(int64_t swap, int64_t limit);

// A memory size as runc's `update` flags take it (--memory, --memory-swap, ...): bytes, or a
// number with a unit k, m, g (also kb, K, KB, ...: powers of 1024), or -1 for unlimited.
Result<int64_t> parse_memory_size(std::string_view text);

// linux.resources.memory.checkBeforeUpdate on cgroup v2 (whose memory.max, unlike v1's
// limit, takes a value below the usage and reclaims or OOM-kills to reach it): a new limit
// below `usage` (memory.current) is refused. -1 / 0: no limit, nothing to check.
Result<void> check_memory_limit_above_usage(int64_t limit, uint64_t usage);

// Fills the unified hierarchy's `controllers` with the v2 controllers its root offers
// (cgroup.controllers, comma-separated), which plan_cgroup_writes needs to place v2 writes.
Result<void> load_v2_controllers(CgroupLayout& layout);

// The writes, in order. v1 writes go to the hierarchy mounted with the controller; v2 writes
// to the unified hierarchy when its `controllers` lists the controller. A requested limit
// that no hierarchy can hold is an error. runc's default devices are allowed after the
// configured device rules, when device rules are applied: from "devices.deny a" on, or, given
// `devices_now` (read_device_cgroup of a live container), as the minimal transition from
// that state (devices_v1.hpp). No device rules leave the device cgroup as it is (an update
// without any); create always has some (Plan::resources).
// Device rules on a host without a v1 devices hierarchy are plan_device_program's.
Result<std::vector<CgroupWrite>> plan_cgroup_writes(const oci::Resources& resources,
                                                    const CgroupLayout& layout,
                                                    const std::optional<DeviceCgroup>& devices_now = std::nullopt);

// Enables the v2 controllers the plan uses in cgroup.subtree_control of every parent of the
// container's v2 cgroup (root first), then writes each file in `dirs` (parallel to the
// layout's hierarchies).
Result<void> apply_cgroup_writes(const std::vector<CgroupWrite>& writes, const CgroupLayout& layout,
                                 const std::vector<std::string>& dirs);

// linux.resources.devices where no v1 hierarchy has the devices controller (cgroup v2, which
// has none): the eBPF program for the container's v2 cgroup (device_filter.hpp), with the
// default devices allowed after the rules as on v1. std::nullopt when there
// are no device rules, or when v1's devices.allow/deny enforce them (plan_cgroup_writes).
Result<std::optional<std::vector<bpf_insn>>> plan_device_program(const oci::Resources& resources,
                                                                 const CgroupLayout& layout);

// Attaches `program` to the container's v2 cgroup (in `dirs`, parallel to the layout's
// hierarchies) in place of the device program attached there before.
Result<void> apply_device_program(const std::vector<bpf_insn>& program, const CgroupLayout& layout,
                                  const std::vector<std::string>& dirs);
// The same with the program loaded already (the zygote daemon's, for a warm container).
Result<void> apply_device_program(int prog_fd, const CgroupLayout& layout, const std::vector<std::string>& dirs);

}  // namespace forkbox
