#include "libforkbox/base/prefault.hpp"

#include <elf.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include <cstdint>

// Debian 12's headers predate them (Linux 5.14).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace forkbox::prefault {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kStackBytes = 64 * 1024;

uintptr_t page_down(uintptr_t a) { return a & ~(kPage - 1); }
uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(kPage - 1); }

// Best effort: a kernel before 5.14 answers EINVAL, and the pages fault in as before.
void populate(uintptr_t from, uintptr_t to, int advice) {
    if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, advice);
}

}  // namespace

void populate_executable() {
    const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(::getauxval(AT_PHDR));
    size_t count = ::getauxval(AT_PHNUM);
    if (!phdrs || count == 0) return;
    // The load bias: 0 for the static forkbox, the PIE's base for the unit tests.
    uintptr_t bias = 0, relro_from = 0, relro_to = 0;
    for (size_t i = 0; i < count; ++i) {
        if (phdrs[i].p_type == PT_PHDR) bias = reinterpret_cast<uintptr_t>(phdrs) - phdrs[i].p_vaddr;
        if (phdrs[i].p_type == PT_GNU_RELRO) {
            relro_from = page_down(phdrs[i].p_vaddr);
            relro_to = page_down(phdrs[i].p_vaddr + phdrs[i].p_memsz);
        }
    }
    for (size_t i = 0; i < count; ++i) {
        const ElfW(Phdr)& p = phdrs[i];
        if (p.p_type != PT_LOAD) continue;
        uintptr_t from = page_down(p.p_vaddr), to = page_up(p.p_vaddr + p.p_memsz);
        if (!(p.p_flags & PF_W)) {
            populate(bias + from, bias + to, MADV_POPULATE_READ);
            continue;
        }
        // The part RELRO made read-only was written by the relocations already; writing
        // the rest (.data, .bss) in one call copies and zeroes what a run would fault on.
        if (relro_from < to && relro_to > from) from = relro_to;
        populate(bias + from, bias + to, MADV_POPULATE_WRITE);
    }
}

void populate_stack() {
    char here;
    uintptr_t top = page_up(reinterpret_cast<uintptr_t>(&here));
    // Within the 128 KiB the kernel maps below a new program's arguments (setup_arg_pages).
    populate(top - kStackBytes, top, MADV_POPULATE_WRITE);
}

namespace {

// Before glibc's and libstdc++'s constructors, which are the first to fault on most pages.
void populate_at_start(int, char**, char**) {
    populate_executable();
    populate_stack();
}

}  // namespace
}  // namespace forkbox::prefault

__attribute__((section(".preinit_array"), used)) static void (*const forkbox_populate_at_start)(int, char**, char**) =
    forkbox::prefault::populate_at_start;
