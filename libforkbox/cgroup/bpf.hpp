// bpf(2): loading, attaching, querying and detaching cgroup programs. The device program
// itself comes from device_filter.hpp.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// The name the device programs carry (bpftool prog/cgroup show lists it).
inline constexpr const char* kDeviceProgramName = "forkbox_dev";

// BPF_PROG_LOAD; the fd is close-on-exec (the kernel always makes bpf fds so). A program the
// verifier rejects fails with the verifier's log in the message.
Result<unique_fd> bpf_prog_load(bpf_prog_type type, const std::vector<bpf_insn>& insns, const char* name);
// BPF_PROG_ATTACH of `prog_fd` to the cgroup open at `cgroup_fd` (not O_PATH: the kernel
// ignores O_PATH fds here, EBADF).
Result<void> bpf_prog_attach(int cgroup_fd, int prog_fd, bpf_attach_type type, uint32_t flags);
Result<void> bpf_prog_detach(int cgroup_fd, int prog_fd, bpf_attach_type type);
// Ids of the programs attached to this cgroup itself (not those it inherits).
Result<std::vector<uint32_t>> bpf_prog_query(int cgroup_fd, bpf_attach_type type);
Result<unique_fd> bpf_prog_get_fd_by_id(uint32_t id);
// BPF_OBJ_GET_INFO_BY_FD: the type of the program behind `prog_fd` (an error when it is
// not a BPF program).
Result<bpf_prog_type> bpf_prog_type_of(int prog_fd);

// Makes `insns` the one device program of the cgroup directory `dir`: loads it, attaches
// it with BPF_F_ALLOW_MULTI (a manager's programs on parent cgroups keep applying), then
// detaches the device programs attached there before, so `update` replaces rather than
// stacks. The new program is attached before the old ones go, so no access slips through
// in between. No fd outlives the call: the cgroup holds the program.
Result<void> replace_cgroup_device_program(const std::string& dir, const std::vector<bpf_insn>& insns);
// The same with a program loaded already (the zygote daemon's, for a warm container).
Result<void> replace_cgroup_device_program(const std::string& dir, int prog_fd);

}  // namespace forkbox
