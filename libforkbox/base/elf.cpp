#include "libforkbox/base/elf.hpp"

#include <elf.h>
#include <unistd.h>

#include <cstring>

namespace forkbox {

namespace {

// Bounds on what one program's headers may make us read: far above any real program's.
constexpr size_t kMaxProgramHeaders = 256;
constexpr size_t kMaxInterpreterBytes = 4096;
constexpr size_t kMaxDynamicEntries = 4096;
constexpr size_t kMaxStringTableBytes = 1 << 20;
constexpr size_t kMaxNeeded = 256;

template <typename T>
bool read_object(const ReadAt& read, uint64_t offset, T& out) {
    return read(offset, std::span<unsigned char>(reinterpret_cast<unsigned char*>(&out), sizeof out));
}

template <typename T>
bool read_array(const ReadAt& read, uint64_t offset, std::vector<T>& out, size_t count) {
    out.resize(count);
    return read(offset, std::span<unsigned char>(reinterpret_cast<unsigned char*>(out.data()), count * sizeof(T)));
}

// The file offset of virtual address `vaddr`, through the PT_LOAD segment holding it.
bool file_offset(const std::vector<Elf64_Phdr>& phdrs, uint64_t vaddr, uint64_t& offset) {
    for (const auto& p : phdrs)
        if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz) {
            offset = p.p_offset + (vaddr - p.p_vaddr);
            return true;
        }
    return false;
}

}  // namespace

Result<ElfLinkage> elf_linkage(const ReadAt& read) {
    Elf64_Ehdr eh{};
    if (!read_object(read, 0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return fail(ENOEXEC, "not an ELF file");
    constexpr unsigned char native = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != native) return fail(ENOEXEC, "not a 64-bit ELF file of this byte order");
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > kMaxProgramHeaders)
        return fail(ENOEXEC, "bad program headers");
    std::vector<Elf64_Phdr> phdrs;
    if (!read_array(read, eh.e_phoff, phdrs, eh.e_phnum)) return fail(ENOEXEC, "truncated program headers");

    ElfLinkage linkage;
    const Elf64_Phdr* dynamic = nullptr;
    for (const auto& p : phdrs) {
        if (p.p_type == PT_INTERP) {
            if (p.p_filesz == 0 || p.p_filesz > kMaxInterpreterBytes) return fail(ENOEXEC, "bad PT_INTERP");
            std::string path(p.p_filesz, '\0');
            if (!read(p.p_offset, std::span<unsigned char>(reinterpret_cast<unsigned char*>(path.data()), path.size())))
                return fail(ENOEXEC, "truncated PT_INTERP");
            path.resize(std::strlen(path.c_str()));
            linkage.interpreter = std::move(path);
        } else if (p.p_type == PT_DYNAMIC) {
            dynamic = &p;
        }
    }
    size_t entries = dynamic ? dynamic->p_filesz / sizeof(Elf64_Dyn) : 0;
    if (entries == 0) return linkage;
    if (entries > kMaxDynamicEntries) return fail(ENOEXEC, "bad PT_DYNAMIC");
    std::vector<Elf64_Dyn> dyn;
    if (!read_array(read, dynamic->p_offset, dyn, entries)) return fail(ENOEXEC, "truncated PT_DYNAMIC");
    uint64_t strtab = 0, strsz = 0;
    bool has_strtab = false;
    std::vector<uint64_t> needed;
    for (const auto& d : dyn) {
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED && needed.size() < kMaxNeeded) needed.push_back(d.d_un.d_val);
        if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr, has_strtab = true;
        if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    }
    if (needed.empty()) return linkage;
    uint64_t strtab_offset = 0;
    if (!has_strtab || strsz == 0 || strsz > kMaxStringTableBytes || !file_offset(phdrs, strtab, strtab_offset))
        return fail(ENOEXEC, "bad DT_STRTAB");
    std::string strings(strsz, '\0');
    if (!read(strtab_offset, std::span<unsigned char>(reinterpret_cast<unsigned char*>(strings.data()), strings.size())))
        return fail(ENOEXEC, "truncated DT_STRTAB");
    for (uint64_t at : needed) {
        if (at >= strings.size()) return fail(ENOEXEC, "bad DT_NEEDED");
        size_t end = strings.find('\0', at);
        if (end == std::string::npos) return fail(ENOEXEC, "bad DT_NEEDED");
        linkage.needed.push_back(strings.substr(at, end - at));
    }
    return linkage;
}

Result<ElfLinkage> elf_linkage(int fd) {
    return elf_linkage([fd](uint64_t offset, std::span<unsigned char> out) {
        size_t done = 0;
        while (done < out.size()) {
            ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            done += static_cast<size_t>(n);
        }
        return true;
    });
}

}  // namespace forkbox
