// ELF headers (elf_linkage): a sandbox's embryo reads its shell's interpreter and libraries
// from a file of the sandbox's root. Properties: any bytes give an error or a linkage, never a
// read outside the file; an interpreter holds no NUL, and every library name is one
// non-empty string without NUL.
#include "libforkbox/base/elf.hpp"

#include <cstring>

#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto linkage = elf_linkage([&](uint64_t offset, std::span<unsigned char> out) {
        FUZZ_CHECK(out.size() <= (size_t{1} << 20) + 4096 * 64, "a read larger than the bounds allow");
        if (offset > size || out.size() > size - offset) return false;
        std::memcpy(out.data(), data + offset, out.size());
        return true;
    });
    if (!linkage) return 0;
    FUZZ_CHECK(linkage->interpreter.find('\0') == std::string::npos, linkage->interpreter);
    for (const auto& name : linkage->needed) FUZZ_CHECK(name.find('\0') == std::string::npos, name);
    return 0;
}
