// What an installed seccomp filter would answer for one syscall, without installing it: a
// classic-BPF interpreter over the program compile_seccomp exported. Pure.
// exec_guard uses it to learn, before the call, whether the container's filter lets
// execveat through: a KILL or TRAP action cannot be recovered from after the fact.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <span>

namespace forkbox {

// The filter's return value (SECCOMP_RET_* action | data) for `data`. A program the kernel
// would not have accepted (bad opcode, jump or load out of range, no RET at the end) yields
// SECCOMP_RET_KILL_PROCESS: the caller then treats the syscall as refused.
uint32_t seccomp_evaluate(std::span<const sock_filter> program, const seccomp_data& data);

// True when the filter lets the syscall run (ALLOW or LOG).
bool seccomp_allows(std::span<const sock_filter> program, const seccomp_data& data);

// True when the filter lets syscall `nr` of the native architecture run unlogged whatever its
// arguments: the path it takes for `nr` never reads the arguments or the instruction pointer
// and ends in SECCOMP_RET_ALLOW (what the kernel's own action cache calls a constant allow).
bool seccomp_allows_any_arguments(std::span<const sock_filter> program, int nr);

// seccomp_data for syscall `nr` of the native architecture with these arguments.
seccomp_data native_seccomp_data(int nr, std::span<const uint64_t> args);

}  // namespace forkbox
