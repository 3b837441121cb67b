// linux.resources.devices -> an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE, which is
// how cgroup v2 restricts device access (it has no devices controller). Pure: no syscalls;
// bpf.hpp loads and attaches the program.
#pragma once

#include <linux/bpf.h>

#include <vector>

#include "libforkbox/error.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// What every container may use whatever its rules say (runc's and crun's defaults), allowed
// after the configured rules on v1 and v2 alike: mknod of any device; null, zero, full,
// random, urandom, tty, console, ptmx and the pts devices.
const std::vector<oci::DeviceRule>& default_device_rules();

// The rules a container's device access is decided by, in order (a later rule wins):
// linux.resources.devices, then the default devices, then an allow rwm for each of
// linux.devices (type u counts as c). Everything no rule allows is denied.
std::vector<oci::DeviceRule> effective_device_rules(const std::vector<oci::DeviceRule>& rules,
                                                    const std::vector<oci::Device>& devices);

// The program for `rules` (as effective_device_rules returns them). Each access bit the
// kernel asks for (r, w, m) is decided by the last rule that matches the device's type,
// major and minor and names that bit; an access is allowed when all its bits are. A bit no
// rule names is denied.
//
// This is the rule order v1's devices.allow/devices.deny is written in, with one
// difference in the kernel's v1 emulation it does not copy: there a deny only trims an
// earlier allow with the very same type:major:minor ("allow c 1:* rwm" then "deny c 1:3 w"
// leaves /dev/null writable); here the later deny wins for every device it matches.
//
// Program shape: r2 = ctx->access_type, r3 = device type (low 16 bits), r4 = access bits
// still undecided (high 16 bits), r5 = major, r6 = minor; then one block per rule, the last
// rule first; a block that does not match jumps to the next. A matching deny returns 0
// when it names an undecided bit; a matching allow clears its bits and returns 1 once
// none is left. After the last block: return 0.
Result<std::vector<bpf_insn>> device_filter_program(const std::vector<oci::DeviceRule>& rules);

}  // namespace forkbox
