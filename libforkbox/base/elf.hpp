// What an ELF program needs from the dynamic loader: its interpreter (PT_INTERP) and the
// libraries it names (DT_NEEDED). Read from the file's headers, bounded and checked at
// every step: the file may come from an untrusted root filesystem.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"

namespace forkbox {

struct ElfLinkage {
    std::string interpreter;          // empty: a static program
    std::vector<std::string> needed;  // library names, in the file's order
};

// Fills `out` from the file's bytes at `offset`; false when the file has fewer.
using ReadAt = std::function<bool(uint64_t offset, std::span<unsigned char> out)>;

// The linkage of a 64-bit ELF file of this machine's byte order; an error for anything else
// (not ELF, another class, truncated or inconsistent headers).
Result<ElfLinkage> elf_linkage(const ReadAt& read);
// The same, read with pread from `fd`.
Result<ElfLinkage> elf_linkage(int fd);

}  // namespace forkbox
