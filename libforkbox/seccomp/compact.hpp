// A shorter seccomp program with the same meaning. Pure.
// libseccomp exports one `jeq` per listed syscall; the kernel's load cost (cBPF->eBPF
// conversion, JIT, its action-cache emulation) grows with the program's length. Allowed
// syscalls mostly form runs of consecutive numbers, so a tree over ranges of numbers
// decides the same much more briefly.
#pragma once

#include <linux/filter.h>

#include <span>
#include <vector>

namespace forkbox {

// Rewrites the part of `program` that depends only on the syscall number and architecture
// as a binary search over ranges of both, keeping the instructions from the first read of
// the instruction pointer or an argument on as they are. Returns `program` unchanged when
// it cannot show the two agree for every number and architecture (scratch memory, the X
// register, arithmetic or JSET on the number or arch), or when the result is not shorter.
std::vector<sock_filter> compact_seccomp_program(std::span<const sock_filter> program);

}  // namespace forkbox
