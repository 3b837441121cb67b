#include "libforkbox/base/elf.hpp"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "libforkbox/base/fd.hpp"

using namespace forkbox;

namespace {

// A minimal dynamically linked ELF64 file: the header, three program headers (PT_LOAD over
// the whole file, PT_INTERP, PT_DYNAMIC), the interpreter's path, the dynamic section and
// its string table. Tests break one part at a time.
struct SyntheticElf {
    std::string interpreter = "/lib64/ld-linux-x86-64.so.2";
    std::vector<std::string> needed = {"libc.so.6", "libm.so.6"};
    uint64_t load_vaddr = 0x400000;

    std::vector<unsigned char> bytes() const {
        std::string strings(1, '\0');
        std::vector<uint64_t> offsets;
        for (const auto& n : needed) {
            offsets.push_back(strings.size());
            strings += n + '\0';
        }
        const uint64_t phoff = sizeof(Elf64_Ehdr), phnum = 3;
        const uint64_t interp_off = phoff + phnum * sizeof(Elf64_Phdr);
        const uint64_t strtab_off = interp_off + interpreter.size() + 1;
        const uint64_t dyn_off = (strtab_off + strings.size() + 7) & ~7ull;
        std::vector<Elf64_Dyn> dyn;
        for (uint64_t o : offsets) dyn.push_back({DT_NEEDED, {o}});
        dyn.push_back({DT_STRTAB, {load_vaddr + strtab_off}});
        dyn.push_back({DT_STRSZ, {strings.size()}});
        dyn.push_back({DT_NULL, {0}});
        const uint64_t size = dyn_off + dyn.size() * sizeof(Elf64_Dyn);

        std::vector<unsigned char> out(size);
        Elf64_Ehdr eh{};
        std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
        eh.e_ident[EI_CLASS] = ELFCLASS64;
        eh.e_ident[EI_DATA] = ELFDATA2LSB;
        eh.e_ident[EI_VERSION] = EV_CURRENT;
        eh.e_type = ET_DYN;
        eh.e_machine = EM_X86_64;
        eh.e_phoff = phoff;
        eh.e_phentsize = sizeof(Elf64_Phdr);
        eh.e_phnum = phnum;
        eh.e_ehsize = sizeof(Elf64_Ehdr);
        std::memcpy(out.data(), &eh, sizeof eh);
        Elf64_Phdr ph[3]{};
        ph[0] = {PT_LOAD, PF_R, 0, load_vaddr, load_vaddr, size, size, 4096};
        ph[1] = {PT_INTERP, PF_R, interp_off, load_vaddr + interp_off, 0, interpreter.size() + 1, interpreter.size() + 1, 1};
        ph[2] = {PT_DYNAMIC, PF_R, dyn_off, load_vaddr + dyn_off, 0, dyn.size() * sizeof(Elf64_Dyn), dyn.size() * sizeof(Elf64_Dyn), 8};
        std::memcpy(out.data() + phoff, ph, sizeof ph);
        std::memcpy(out.data() + interp_off, interpreter.c_str(), interpreter.size() + 1);
        std::memcpy(out.data() + strtab_off, strings.data(), strings.size());
        std::memcpy(out.data() + dyn_off, dyn.data(), dyn.size() * sizeof(Elf64_Dyn));
        return out;
    }
};

ReadAt reader_of(const std::vector<unsigned char>& file) {
    return [&file](uint64_t offset, std::span<unsigned char> out) {
        if (offset > file.size() || out.size() > file.size() - offset) return false;
        std::memcpy(out.data(), file.data() + offset, out.size());
        return true;
    };
}

// The offset of the first program header of `type` in a SyntheticElf's bytes.
size_t phdr_at(const std::vector<unsigned char>& file, uint32_t type) {
    for (size_t i = 0; i < 3; ++i) {
        size_t at = sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr);
        Elf64_Phdr ph;
        std::memcpy(&ph, file.data() + at, sizeof ph);
        if (ph.p_type == type) return at;
    }
    return 0;
}

}  // namespace

TEST(ElfLinkage, ReadsTheInterpreterAndTheNeededLibrariesInOrder) {
    auto file = SyntheticElf{}.bytes();
    auto linkage = elf_linkage(reader_of(file));
    ASSERT_TRUE(linkage) << linkage.error().what();
    EXPECT_EQ(linkage->interpreter, "/lib64/ld-linux-x86-64.so.2");
    EXPECT_EQ(linkage->needed, (std::vector<std::string>{"libc.so.6", "libm.so.6"}));
}

TEST(ElfLinkage, AStaticProgramHasNoInterpreterAndNeedsNothing) {
    auto file = SyntheticElf{}.bytes();
    // Both PT_INTERP and PT_DYNAMIC become PT_NULL, as in a static executable.
    for (uint32_t type : {PT_INTERP, PT_DYNAMIC}) {
        size_t at = phdr_at(file, type);
        uint32_t null_type = PT_NULL;
        std::memcpy(file.data() + at, &null_type, sizeof null_type);
    }
    auto linkage = elf_linkage(reader_of(file));
    ASSERT_TRUE(linkage) << linkage.error().what();
    EXPECT_TRUE(linkage->interpreter.empty());
    EXPECT_TRUE(linkage->needed.empty());
}

TEST(ElfLinkage, EveryTruncationIsAnErrorNotACrash) {
    auto file = SyntheticElf{}.bytes();
    for (size_t n = 0; n < file.size(); ++n) {
        std::vector<unsigned char> cut(file.begin(), file.begin() + static_cast<long>(n));
        EXPECT_FALSE(elf_linkage(reader_of(cut))) << "truncated to " << n << " bytes";
    }
}

TEST(ElfLinkage, RefusesWhatIsNotA64BitElfOfThisByteOrder) {
    std::vector<unsigned char> text = {'#', '!', '/', 'b', 'i', 'n', '/', 's', 'h', '\n'};
    text.resize(128);
    EXPECT_FALSE(elf_linkage(reader_of(text)));
    auto file = SyntheticElf{}.bytes();
    auto class32 = file;
    class32[EI_CLASS] = ELFCLASS32;
    EXPECT_FALSE(elf_linkage(reader_of(class32)));
    auto big_endian = file;
    big_endian[EI_DATA] = ELFDATA2MSB;
    EXPECT_FALSE(elf_linkage(reader_of(big_endian)));
}

TEST(ElfLinkage, RefusesHeadersThatPointOutsideTheirTables) {
    auto base = SyntheticElf{}.bytes();
    {  // too many program headers
        auto file = base;
        uint16_t phnum = 4096;
        std::memcpy(file.data() + offsetof(Elf64_Ehdr, e_phnum), &phnum, sizeof phnum);
        EXPECT_FALSE(elf_linkage(reader_of(file)));
    }
    {  // a string table outside every PT_LOAD
        SyntheticElf elf;
        elf.load_vaddr = 0x400000;
        auto file = elf.bytes();
        size_t load = phdr_at(file, PT_LOAD);
        uint64_t vaddr = 0x900000;
        std::memcpy(file.data() + load + offsetof(Elf64_Phdr, p_vaddr), &vaddr, sizeof vaddr);
        EXPECT_FALSE(elf_linkage(reader_of(file)));
    }
    {  // a DT_NEEDED offset past the string table
        auto file = base;
        size_t dyn = 0;
        std::memcpy(&dyn, file.data() + phdr_at(file, PT_DYNAMIC) + offsetof(Elf64_Phdr, p_offset), sizeof dyn);
        uint64_t past = 1 << 20;
        std::memcpy(file.data() + dyn + offsetof(Elf64_Dyn, d_un), &past, sizeof past);
        EXPECT_FALSE(elf_linkage(reader_of(file)));
    }
    {  // an interpreter of an absurd size
        auto file = base;
        uint64_t huge = uint64_t{1} << 40;
        std::memcpy(file.data() + phdr_at(file, PT_INTERP) + offsetof(Elf64_Phdr, p_filesz), &huge, sizeof huge);
        EXPECT_FALSE(elf_linkage(reader_of(file)));
    }
}

TEST(ElfLinkage, ReadsTheHostShellFromItsFile) {
    unique_fd fd(::open("/bin/sh", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    auto linkage = elf_linkage(fd.get());
    ASSERT_TRUE(linkage) << linkage.error().what();
    EXPECT_EQ(linkage->interpreter.substr(0, 1), "/");
    EXPECT_NE(std::find(linkage->needed.begin(), linkage->needed.end(), "libc.so.6"), linkage->needed.end());
}
