#include "libforkbox/base/prefault.hpp"

#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "libforkbox/base/syscalls.hpp"


namespace forkbox::prefault {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kStackBytes = 64 * 1024;

// Inlined into forkbox_populate_early, which runs before glibc (and cannot call out).
[[gnu::always_inline]] inline uintptr_t page_down(uintptr_t a) { return a & ~(kPage - 1); }
[[gnu::always_inline]] inline uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(kPage - 1); }

// Best effort: a kernel before 5.14 answers EINVAL, and the pages fault in as before.
void populate(uintptr_t from, uintptr_t to, int advice) {
    if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, advice);
}

// Text and read-only data mapped; .data and .bss written, which copies and zeroes in one
// call what a run would fault on page by page. RELRO only mapped: read-only once the
// relocations are done, written by them before (a write there would fail afterwards).
// `advise(from, to, advice)` does the madvise: glibc's, or a raw syscall before glibc runs.
template <typename Advise>
[[gnu::always_inline]] inline void populate_segments(const ElfW(Phdr)* phdrs, size_t count, uintptr_t bias, Advise advise,
                                                     bool read_only_only = false) {
    uintptr_t relro_from = 0, relro_to = 0;
    for (size_t i = 0; i < count; ++i)
        if (phdrs[i].p_type == PT_GNU_RELRO) {
            relro_from = page_down(phdrs[i].p_vaddr);
            relro_to = page_up(phdrs[i].p_vaddr + phdrs[i].p_memsz);
        }
    for (size_t i = 0; i < count; ++i) {
        const ElfW(Phdr)& p = phdrs[i];
        if (p.p_type != PT_LOAD) continue;
        uintptr_t from = page_down(p.p_vaddr), to = page_up(p.p_vaddr + p.p_memsz);
        if (!(p.p_flags & PF_W)) {
            advise(bias + from, bias + to, MADV_POPULATE_READ);
            continue;
        }
        if (read_only_only) continue;
        if (relro_from < to && relro_to > from) {
            advise(bias + relro_from, bias + relro_to, MADV_POPULATE_READ);
            from = relro_to;
        }
        advise(bias + from, bias + to, MADV_POPULATE_WRITE);
    }
}

void populate_executable_segments(bool read_only_only) {
    const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(::getauxval(AT_PHDR));
    size_t count = ::getauxval(AT_PHNUM);
    if (!phdrs || count == 0) return;
    // The load bias: 0 for the static forkbox, the PIE's base for the unit tests.
    uintptr_t bias = 0;
    for (size_t i = 0; i < count; ++i)
        if (phdrs[i].p_type == PT_PHDR) bias = reinterpret_cast<uintptr_t>(phdrs) - phdrs[i].p_vaddr;
    populate_segments(phdrs, count, bias, populate, read_only_only);
}

}  // namespace

void populate_executable() { populate_executable_segments(false); }

void populate_text() { populate_executable_segments(true); }

void populate_stack() {
    char here;
    uintptr_t top = page_up(reinterpret_cast<uintptr_t>(&here));
    // Within the 128 KiB the kernel maps below a new program's arguments (setup_arg_pages).
    populate(top - kStackBytes, top, MADV_POPULATE_WRITE);
}

void populate_heap() {
    // The main arena is malloc's part of the brk heap, and ends at the break.
    uintptr_t brk_now = reinterpret_cast<uintptr_t>(::sbrk(0));
    size_t arena = ::mallinfo2().arena;
    if (brk_now == static_cast<uintptr_t>(-1) || arena == 0 || arena > brk_now) return;
    populate(page_down(brk_now - arena), page_up(brk_now), MADV_POPULATE_WRITE);
}

namespace {

// Set by forkbox_populate_early (the static forkbox's entry point), which did it all already.
bool populated_early = false;

// Before glibc's and libstdc++'s constructors, which are the first to fault on most pages.
void populate_at_start(int, char**, char**) {
    if (!populated_early) {
        populate_executable();
        populate_stack();
    }
    populate_heap();
}

}  // namespace
}  // namespace forkbox::prefault

#if defined(__x86_64__)
// The ELF header as mapped, from the linker: the program headers follow it at e_phoff.
extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

// Called by forkbox_entry below before glibc has run a single instruction: no TLS (so no
// stack protector, whose canary lives there), no errno, no libc call at all. A static
// glibc's own start-up (IRELATIVE relocations, tunables, the first malloc) faults on ~30 of
// the executable's pages before a preinit_array entry can run: here one madvise per segment
// maps them all first.
extern "C" __attribute__((no_stack_protector, used)) void forkbox_populate_early(uintptr_t initial_stack) {
    auto raw_madvise = [](uintptr_t from, uintptr_t to, int advice) __attribute__((always_inline)) {
        if (to <= from) return;
        // Best effort, as populate().
        (void)forkbox::sys::raw_syscall(SYS_madvise, static_cast<long>(from), static_cast<long>(to - from), advice);
    };
    const ElfW(Ehdr)& ehdr = __ehdr_start;
    const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<uintptr_t>(&ehdr) + ehdr.e_phoff);
    // No PT_PHDR in a static executable: the bias is where the header is against where the
    // first PT_LOAD (which maps it, at file offset 0) says it is.
    uintptr_t bias = 0;
    for (size_t i = 0; i < ehdr.e_phnum; ++i)
        if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0) {
            bias = reinterpret_cast<uintptr_t>(&ehdr) - phdrs[i].p_vaddr;
            break;
        }
    forkbox::prefault::populate_segments(phdrs, ehdr.e_phnum, bias, raw_madvise);
    uintptr_t top = forkbox::prefault::page_up(initial_stack);
    raw_madvise(top - forkbox::prefault::kStackBytes, top, MADV_POPULATE_WRITE);
    forkbox::prefault::populated_early = true;
}

// The static forkbox's entry point (`-e forkbox_entry`): populate, then glibc's _start with
// the stack and %rdx (the exit function a dynamic loader passes) as the kernel left them.
asm(R"(
    .text
    .globl forkbox_entry
    .type forkbox_entry, @function
forkbox_entry:
    endbr64
    mov %rdx, %r12
    mov %rsp, %r13
    mov %rsp, %rdi
    and $-16, %rsp
    call forkbox_populate_early
    mov %r13, %rsp
    mov %r12, %rdx
    jmp _start
    .size forkbox_entry, . - forkbox_entry
)");
#endif  // x86_64: elsewhere the Makefile keeps glibc's entry point, and the preinit entry does it

__attribute__((section(".preinit_array"), used)) static void (*const forkbox_populate_at_start)(int, char**, char**) =
    forkbox::prefault::populate_at_start;
