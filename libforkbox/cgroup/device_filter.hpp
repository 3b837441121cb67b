// linux.resources.devices -> an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE, which is
// how cgroup v2 restricts device access (it has no devices controller). Pure: no syscalls;
// bpf.hpp loads and attaches the program.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// What every container may use whatever its rules say (runc's and crun's defaults), allowed
// after the configured rules on v1 and v2 alike: mknod of any device; null, zero, full,
// random, urandom, tty, console, ptmx and the pts devices.
const std::vector<oci::DeviceRule>& default_device_rules();

// The rules a container's device access is decided by, in order (a later rule wins):
// linux.resources.devices, then the default devices, all after an implicit deny of
// everything. linux.devices are made in the rootfs but not allowed here, as with runc: a
// manager that wants one usable says so in linux.resources.devices (podman and containerd do).
std::vector<oci::DeviceRule> effective_device_rules(const std::vector<oci::DeviceRule>& rules);

// The v1 devices cgroup that writing `rules` in order leaves behind, after forkbox's initial
// "devices.deny a" (v1's own semantics, as the kernel's security/device_cgroup.c has them
// and runc's emulator copies):
// - a rule of type a (whatever its numbers and access) empties the exception list and makes
//   the default allow (allow) or deny (deny);
// - with default deny, an allow adds its access to the exception with the very same type,
//   major and minor (or appends one), and a deny takes its access away from that exception
//   only: "allow c 1:* rwm" then "deny c 1:3 w" leaves /dev/null writable;
// - with default allow, the same with allow and deny swapped.
// A later rule thus wins over an earlier one for the same device numbers.
struct DeviceException {
    char type = 'c';      // c or b
    int64_t major = -1;   // -1: any
    int64_t minor = -1;
    uint32_t access = 0;  // BPF_DEVCG_ACC_* bits
    bool operator==(const DeviceException&) const = default;
};
struct DeviceCgroup {
    bool default_allow = false;
    std::vector<DeviceException> exceptions;
};
Result<DeviceCgroup> emulate_device_rules(const std::vector<oci::DeviceRule>& rules);

// The program enforcing `rules` (as effective_device_rules returns them) as v1 would.
// v1's access check: with default deny an access is allowed when one exception matching the
// device's type, major and minor has every access bit asked for; with default allow it is
// denied when a matching exception has any of them.
//
// Shape: r3 = device type (low 16 bits of ctx->access_type), r4 = access (high 16 bits),
// r5 = major, r6 = minor; one block per exception, in order, a block that does not match
// jumping to the next; after the last block the default.
Result<std::vector<bpf_insn>> device_filter_program(const std::vector<oci::DeviceRule>& rules);

}  // namespace forkbox
