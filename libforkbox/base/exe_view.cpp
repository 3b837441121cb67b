#include "libforkbox/base/exe_view.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/mount.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "libforkbox/base/syscalls.hpp"

namespace {

// Written only after the last segment is mapped again (.bss: nothing to remap there).
bool remapped_all = false;

}  // namespace

namespace forkbox::exe_view {

bool remapped() { return remapped_all; }

}  // namespace forkbox::exe_view

#if defined(__x86_64__)
extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

// Before glibc's start-up: no TLS (no stack protector), no errno, no libc call, and no loop
// the compiler may turn into a call to memset or strcmp (their ifuncs are not resolved yet).
namespace {

constexpr uintptr_t kPage = 4096;

[[gnu::always_inline]] inline bool same(const char* a, const char* b) {
    for (; *a && *a == *b; ++a, ++b) {
    }
    return *a == *b;
}

[[gnu::always_inline]] inline bool starts_with(const char* s, const char* prefix) {
    for (; *prefix; ++s, ++prefix)
        if (*s != *prefix) return false;
    return true;
}

// A verb that execs container programs, and no FORKBOX_EXE_SWAP=off.
[[gnu::always_inline]] inline bool wanted(long argc, char* const* argv, char* const* envp) {
    for (char* const* e = envp; *e; ++e)
        if (starts_with(*e, "FORKBOX_EXE_SWAP=") && same(*e + sizeof "FORKBOX_EXE_SWAP=" - 1, "off")) return false;
    for (long i = 1; i < argc; ++i)
        if (same(argv[i], "create") || same(argv[i], "run") || same(argv[i], "exec")) return true;
    return false;
}

}  // namespace

extern "C" __attribute__((no_stack_protector, used, optimize("no-tree-loop-distribute-patterns"))) void
forkbox_remap_executable_early(uintptr_t initial_stack) {
    using forkbox::sys::raw_syscall;
    using forkbox::sys::raw_syscall6;
    long argc = *reinterpret_cast<const long*>(initial_stack);
    auto* argv = reinterpret_cast<char* const*>(initial_stack + sizeof(long));
    if (!wanted(argc, argv, argv + argc + 1)) return;

    const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<uintptr_t>(&__ehdr_start) + __ehdr_start.e_phoff);
    size_t count = __ehdr_start.e_phnum;
    uintptr_t bias = 0;
    for (size_t i = 0; i < count; ++i)
        if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0)
            bias = reinterpret_cast<uintptr_t>(&__ehdr_start) - phdrs[i].p_vaddr;
    // Segments sharing a page would each map the other's part of it from the wrong offset.
    uintptr_t last_end = 0;
    for (size_t i = 0; i < count; ++i) {
        const ElfW(Phdr)& p = phdrs[i];
        if (p.p_type != PT_LOAD) continue;
        uintptr_t from = (p.p_vaddr + bias) & ~(kPage - 1);
        if (from < last_end || (p.p_offset & (kPage - 1)) != ((p.p_vaddr + bias) & (kPage - 1))) return;
        last_end = (p.p_vaddr + bias + p.p_memsz + kPage - 1) & ~(kPage - 1);
    }

    long tree = raw_syscall(SYS_open_tree, AT_FDCWD, reinterpret_cast<long>("/proc/self/exe"),
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return;
    struct mount_attr attr;
    attr.attr_set = MOUNT_ATTR_RDONLY;
    attr.attr_clr = 0;
    attr.propagation = 0;
    attr.userns_fd = 0;
    long set = raw_syscall6(SYS_mount_setattr, tree, reinterpret_cast<long>(""), AT_EMPTY_PATH, reinterpret_cast<long>(&attr),
                        sizeof attr, 0);
    // The view's file, readable: "/proc/self/fd/N" of the O_PATH fd open_tree gave.
    char path[32];
    size_t at = 0;
    for (const char* c = "/proc/self/fd/"; *c; ++c) path[at++] = *c;
    char digits[12];
    size_t n = 0;
    for (long v = tree; n == 0 || v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
    while (n > 0) path[at++] = digits[--n];
    path[at] = '\0';
    long fd = set == 0 ? raw_syscall(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC) : -1;
    raw_syscall(SYS_close, tree);
    if (fd < 0) return;

    bool all = true;
    for (size_t i = 0; i < count && all; ++i) {
        const ElfW(Phdr)& p = phdrs[i];
        if (p.p_type != PT_LOAD || p.p_filesz == 0) continue;
        uintptr_t vaddr = p.p_vaddr + bias;
        uintptr_t from = vaddr & ~(kPage - 1);
        uintptr_t to = (vaddr + p.p_filesz + kPage - 1) & ~(kPage - 1);
        long prot = (p.p_flags & PF_R ? PROT_READ : 0) | (p.p_flags & PF_W ? PROT_WRITE : 0) | (p.p_flags & PF_X ? PROT_EXEC : 0);
        long mapped = raw_syscall6(SYS_mmap, static_cast<long>(from), static_cast<long>(to - from), prot, MAP_PRIVATE | MAP_FIXED,
                               fd, static_cast<long>(p.p_offset - (vaddr - from)));
        if (mapped != static_cast<long>(from)) {
            all = false;
            break;
        }
        // The kernel zeroed the rest of the page after the file's bytes when .bss starts
        // there; the file has other bytes at those offsets.
        if (p.p_memsz > p.p_filesz && (p.p_flags & PF_W)) {
            uintptr_t end = vaddr + p.p_filesz;
            uintptr_t zero_to = (end + kPage - 1) & ~(kPage - 1);
            for (volatile char* z = reinterpret_cast<volatile char*>(end); z < reinterpret_cast<volatile char*>(zero_to); ++z)
                *z = 0;
        }
    }
    raw_syscall(SYS_close, fd);
    remapped_all = all;
}
#else
extern "C" void forkbox_remap_executable_early(uintptr_t) {}
#endif
