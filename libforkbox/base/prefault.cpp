#include "libforkbox/base/prefault.hpp"

#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <utility>

#include "libforkbox/base/syscalls.hpp"


namespace forkbox::prefault {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kStackBytes = 64 * 1024;
// The kernel's fault-around window (fault_around_bytes): one fault on code maps this much.
constexpr uintptr_t kFaultAround = 64 * 1024;

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

// The executable's code segment, [from, to) with the load bias applied; {0, 0} if none.
[[gnu::always_inline]] inline std::pair<uintptr_t, uintptr_t> code_segment(const ElfW(Phdr)* phdrs, size_t count,
                                                                           uintptr_t bias) {
    for (size_t i = 0; i < count; ++i)
        if (phdrs[i].p_type == PT_LOAD && (phdrs[i].p_flags & PF_X))
            return {bias + page_down(phdrs[i].p_vaddr), bias + page_up(phdrs[i].p_vaddr + phdrs[i].p_memsz)};
    return {0, 0};
}

// A timestamp in arbitrary units, without libc: only ratios of two intervals are used.
[[gnu::always_inline]] inline uint64_t ticks() {
#if defined(__x86_64__)
    uint32_t lo, hi;
    asm volatile("lfence; rdtsc; lfence" : "=a"(lo), "=d"(hi)::"memory");
    return (uint64_t{hi} << 32) | lo;
#else
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
#endif
}

// What one fault and one madvise cost for the same 64 KiB of code, on four blocks at the end
// of the code segment that nothing has run yet (glibc's start-up runs before the preinit
// entry, but from the start of the segment). Each cost's first instance carries more than
// itself: the first touch there also makes the page table for those blocks, and a process's
// first madvise pays set-up of its own (on a PVM guest a first fault took 64k-500k ticks and a
// later one ~33k; a first madvise 24k-46k, a later one ~8k), which populating the whole
// segment pays once. So: a fault, two madvises, a fault; each the cheaper of its two (an
// interrupt in one must not decide either). Ordered the other way the probe took a madvise
// for as dear as a fault there and chose faults, while mapping in bulk made a `run` 5% faster.
// `running` is an address of the caller's code, which must not be probed.
template <typename Advise>
[[gnu::always_inline]] inline Costs probe_costs(uintptr_t code_from, uintptr_t code_to, uintptr_t running,
                                                Advise advise) {
    uintptr_t last = (code_to & ~(kFaultAround - 1)) - kFaultAround;  // the last whole block
    uintptr_t first = last - 3 * kFaultAround;
    if (code_from > first || (running >= first && running < last + kFaultAround)) return Costs{};
    uint64_t t0 = ticks();
    (void)*reinterpret_cast<const volatile char*>(first);
    uint64_t t1 = ticks();
    advise(first + kFaultAround, first + 2 * kFaultAround, MADV_POPULATE_READ);
    uint64_t t2 = ticks();
    advise(first + 2 * kFaultAround, last, MADV_POPULATE_READ);
    uint64_t t3 = ticks();
    (void)*reinterpret_cast<const volatile char*>(last);
    uint64_t t4 = ticks();
    uint64_t fault = t1 - t0 < t4 - t3 ? t1 - t0 : t4 - t3;
    uint64_t populate = t2 - t1 < t3 - t2 ? t2 - t1 : t3 - t2;
    return Costs{fault, populate};
}

// FORKBOX_PREFAULT in an environment block, without libc.
[[gnu::always_inline]] inline Setting setting_in(char* const* envp) {
    constexpr char kName[] = "FORKBOX_PREFAULT=";
    for (; envp && *envp; ++envp) {
        const char* e = *envp;
        size_t i = 0;
        while (kName[i] && e[i] == kName[i]) ++i;
        if (kName[i]) continue;
        const char* v = e + i;
        if (v[0] == 'o' && v[1] == 'n' && v[2] == 0) return Setting::on;
        if (v[0] == 'o' && v[1] == 'f' && v[2] == 'f' && v[3] == 0) return Setting::off;
        return Setting::measure;
    }
    return Setting::measure;
}

// Set once, at start-up, by forkbox_start_early (the static forkbox's entry point) or by the
// preinit entry; read by pays().
enum class Decision : uint8_t { undecided, populate, fault };
Decision decision = Decision::undecided;
Costs measured_at_start;

template <typename Advise>
[[gnu::always_inline]] inline Decision decide(char* const* envp, const ElfW(Phdr)* phdrs, size_t count, uintptr_t bias,
                                              uintptr_t running, Advise advise) {
    switch (setting_in(envp)) {
    case Setting::on: return Decision::populate;
    case Setting::off: return Decision::fault;
    case Setting::measure: break;
    }
    auto [from, to] = code_segment(phdrs, count, bias);
    measured_at_start = probe_costs(from, to, running, advise);
    return bulk_mapping_pays(measured_at_start) ? Decision::populate : Decision::fault;
}

// The executable's program headers as the kernel told us (libc running): none when absent.
struct ProgramHeaders {
    const ElfW(Phdr)* phdrs = nullptr;
    size_t count = 0;
    uintptr_t bias = 0;  // the load bias: 0 for the static forkbox, the PIE's base for the unit tests
};

ProgramHeaders executable_headers() {
    ProgramHeaders h;
    h.phdrs = reinterpret_cast<const ElfW(Phdr)*>(::getauxval(AT_PHDR));
    h.count = h.phdrs ? ::getauxval(AT_PHNUM) : 0;
    for (size_t i = 0; i < h.count; ++i)
        if (h.phdrs[i].p_type == PT_PHDR) h.bias = reinterpret_cast<uintptr_t>(h.phdrs) - h.phdrs[i].p_vaddr;
    return h;
}

void populate_executable_segments(bool read_only_only) {
    ProgramHeaders h = executable_headers();
    if (h.count == 0) return;
    populate_segments(h.phdrs, h.count, h.bias, populate, read_only_only);
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

void reserve_heap(size_t bytes) {
    static bool reserved = false;
    if (reserved || decision != Decision::populate) return;
    reserved = true;
    // Every later move of the break keeps `bytes` spare as well. One allocation larger than
    // all the free memory malloc holds moves it now (below the mmap threshold, so from the
    // heap); freed, the top keeps the pad (malloc trims down to it), and one madvise writes
    // all of it.
    constexpr size_t kMmapThreshold = 128 << 10;  // glibc's default, fixed here
    ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
    ::mallopt(M_TOP_PAD, static_cast<int>(bytes));
    struct mallinfo2 m = ::mallinfo2();
    if (m.keepcost < bytes && m.fordblks + 4096 < kMmapThreshold) {
        void* volatile grown = ::malloc(m.fordblks + 4096);  // volatile: the compiler drops a bare free(malloc())
        ::free(grown);
    }
    populate_heap();
}

void warm_thread_heap(size_t bytes) {
    if (decision != Decision::populate) return;
    // From this thread's arena while below the mmap threshold; freed, the pages stay (malloc
    // trims an arena down to M_TOP_PAD, no further).
    void* volatile block = ::malloc(bytes);
    if (!block) return;
    uintptr_t from = page_down(reinterpret_cast<uintptr_t>(block));
    populate(from, from + bytes, MADV_POPULATE_WRITE);
    ::free(block);
}

bool bulk_mapping_pays(Costs costs) {
    // Unmeasured: populate, as a kernel without MADV_POPULATE_* ignores it anyway.
    if (costs.fault == 0 || costs.populate == 0) return true;
    // Populating maps every block, faulting only those a process runs (about half to
    // three quarters of them): bulk pays once a fault costs clearly more than a madvise.
    return 2 * costs.fault > 3 * costs.populate;
}

Setting setting(char* const* envp) { return setting_in(envp); }

bool pays() { return decision == Decision::populate; }

Costs measured() { return measured_at_start; }

namespace {

// Before glibc's and libstdc++'s constructors, which are the first to fault on most pages.
void populate_at_start(int, char**, char** envp) {
    if (decision == Decision::undecided) {
        ProgramHeaders h = executable_headers();
        decision = decide(envp, h.phdrs, h.count, h.bias, reinterpret_cast<uintptr_t>(&populate_at_start), populate);
        if (decision == Decision::populate) {
            populate_executable();
            populate_stack();
        }
    }
    if (decision == Decision::populate) populate_heap();
}

}  // namespace
}  // namespace forkbox::prefault

#if defined(__x86_64__)
// The ELF header as mapped, from the linker: the program headers follow it at e_phoff.
extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

// The functions below run before glibc has run a single instruction: no TLS (so no stack
// protector, whose canary lives there), no errno, no libc call at all.
namespace {

[[gnu::always_inline]] inline void raw_madvise(uintptr_t from, uintptr_t to, int advice) {
    if (to <= from) return;
    // Best effort, as populate().
    (void)forkbox::sys::raw_syscall(SYS_madvise, static_cast<long>(from), static_cast<long>(to - from), advice);
}

[[gnu::always_inline]] inline const ElfW(Phdr)* early_phdrs() {
    return reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<uintptr_t>(&__ehdr_start) + __ehdr_start.e_phoff);
}

// No PT_PHDR in a static executable: the bias is where the header is against where the
// first PT_LOAD (which maps it, at file offset 0) says it is.
[[gnu::always_inline]] inline uintptr_t early_bias() {
    const ElfW(Phdr)* phdrs = early_phdrs();
    for (size_t i = 0; i < __ehdr_start.e_phnum; ++i)
        if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0)
            return reinterpret_cast<uintptr_t>(&__ehdr_start) - phdrs[i].p_vaddr;
    return 0;
}

}  // namespace

// A static glibc's own start-up (IRELATIVE relocations, tunables, the first malloc) faults on
// ~30 of the executable's pages before a preinit_array entry can run: here one madvise per
// segment maps them all first. Exposed for the unit tests, which call it on their own stack.
extern "C" __attribute__((no_stack_protector, used)) void forkbox_populate_early(uintptr_t initial_stack) {
    forkbox::prefault::populate_segments(early_phdrs(), __ehdr_start.e_phnum, early_bias(), raw_madvise);
    uintptr_t top = forkbox::prefault::page_up(initial_stack);
    raw_madvise(top - forkbox::prefault::kStackBytes, top, MADV_POPULATE_WRITE);
}

// Called by forkbox_entry with the stack the kernel made (argc, argv, NULL, envp, NULL):
// decides whether bulk mapping pays here, and if so does it.
extern "C" __attribute__((no_stack_protector, used)) void forkbox_start_early(uintptr_t initial_stack) {
    using forkbox::prefault::Decision;
    auto* argc = reinterpret_cast<const long*>(initial_stack);
    auto* envp = reinterpret_cast<char* const*>(initial_stack + sizeof(long)) + *argc + 1;
    Decision d = forkbox::prefault::decide(envp, early_phdrs(), __ehdr_start.e_phnum, early_bias(),
                                           reinterpret_cast<uintptr_t>(&forkbox_start_early), raw_madvise);
    forkbox::prefault::decision = d;
    if (d == Decision::populate) forkbox_populate_early(initial_stack);
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
    call forkbox_start_early
    mov %r13, %rsp
    mov %r12, %rdx
    jmp _start
    .size forkbox_entry, . - forkbox_entry
)");
#endif  // x86_64: elsewhere the Makefile keeps glibc's entry point, and the preinit entry does it

__attribute__((section(".preinit_array"), used)) static void (*const forkbox_populate_at_start)(int, char**, char**) =
    forkbox::prefault::populate_at_start;
