#include "libforkbox/base/prefault.hpp"

#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <thread>
#include <utility>
#include <vector>

// The static forkbox's entry point calls it before glibc starts (prefault.cpp); here, in the
// dynamically linked PIE test binary, it must find the same segments by its load bias.
#if defined(__x86_64__)
extern "C" void forkbox_populate_early(uintptr_t initial_stack);
#endif

namespace {

constexpr uintptr_t kPage = 4096;

// Bit 63 of a /proc/self/pagemap entry: the page is mapped in our page tables.
bool page_present(const void* address) {
    int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    uint64_t entry = 0;
    off_t offset = static_cast<off_t>(reinterpret_cast<uintptr_t>(address) / kPage * sizeof entry);
    bool ok = ::pread(fd, &entry, sizeof entry, offset) == sizeof entry;
    ::close(fd);
    return ok && (entry >> 63) != 0;
}

void* page_of(const void* address) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(address) & ~(kPage - 1));
}

// In .bss, page-aligned, and touched by nothing but the test below. (Not text: a dropped
// text page comes back with the next fault-around near it, whatever populate does.)
alignas(4096) char untouched_bss[4 * 4096];

TEST(Prefault, MapsTheExecutablesBssAgainAfterItsPagesWereDropped) {
    void* page = untouched_bss + 4096;
    ASSERT_EQ(::madvise(page, 4096, MADV_DONTNEED), 0);
    ASSERT_FALSE(page_present(page));
    forkbox::prefault::populate_executable();
    EXPECT_TRUE(page_present(page));
}

TEST(Prefault, MapsTheStackBelowTheCaller) {
    char here;
    // 32 KiB below this frame: within the 64 KiB populate_stack maps from its own frame.
    void* below = page_of(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(&here) - 32 * 1024));
    ASSERT_EQ(::madvise(below, 4096, MADV_DONTNEED), 0);
    ASSERT_FALSE(page_present(below));
    forkbox::prefault::populate_stack();
    EXPECT_TRUE(page_present(below));
}

TEST(Prefault, WritesTheHeapUpToTheBreak) {
    // Three pages from the brk heap (below the mmap threshold): the middle one holds nothing
    // of malloc's and can be dropped safely.
    auto* block = static_cast<char*>(std::malloc(3 * 4096));
    ASSERT_NE(block, nullptr);
    void* middle = page_of(block + 4096 + 4095);
    ASSERT_LT(reinterpret_cast<uintptr_t>(middle), reinterpret_cast<uintptr_t>(::sbrk(0)));
    ASSERT_EQ(::madvise(middle, 4096, MADV_DONTNEED), 0);
    ASSERT_FALSE(page_present(middle));
    forkbox::prefault::populate_heap();
    EXPECT_TRUE(page_present(middle));
    std::free(block);
}

size_t pages_present(uintptr_t from, uintptr_t to);

// In a child: the reservation is once per process, and its malloc settings stay there.
TEST(Prefault, ReserveHeapWritesThePadWherePopulatingPays) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        constexpr size_t kBytes = 256 << 10;
        forkbox::prefault::reserve_heap(kBytes);
        auto brk = reinterpret_cast<uintptr_t>(::sbrk(0));
        struct mallinfo2 m = ::mallinfo2();
        int failed = 0;
        if (forkbox::prefault::pays()) {
            // The top of the heap is the pad, every page of it written already.
            if (m.keepcost < kBytes - 4 * kPage) failed |= 1;
            if (pages_present((brk - m.keepcost + kPage - 1) & ~(kPage - 1), brk) != (m.keepcost / kPage)) failed |= 2;
        }
        ::_exit(failed);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: pad too small, 2: pad not written";
}

// A new thread's first allocations land on pages written already (its arena made ahead).
TEST(Prefault, WarmThreadHeapWritesTheThreadsFirstPages) {
    if (!forkbox::prefault::pays()) GTEST_SKIP() << "bulk mapping does not pay here: nothing is written ahead";
    bool present = false;
    std::thread([&] {
        forkbox::prefault::warm_thread_heap(64 << 10);
        auto* block = static_cast<char*>(std::malloc(16 << 10));
        present = block && page_present(block + (8 << 10));
        std::free(block);
    }).join();
    EXPECT_TRUE(present);
}

#if defined(__x86_64__)
TEST(Prefault, EarlyEntryMapsTheExecutableAndTheStackWithoutLibc) {
    void* bss_page = untouched_bss + 2 * 4096;
    char here;
    void* below = page_of(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(&here) - 32 * 1024));
    ASSERT_EQ(::madvise(bss_page, 4096, MADV_DONTNEED), 0);
    ASSERT_EQ(::madvise(below, 4096, MADV_DONTNEED), 0);
    ASSERT_FALSE(page_present(bss_page));
    ASSERT_FALSE(page_present(below));
    forkbox_populate_early(reinterpret_cast<uintptr_t>(&here));
    EXPECT_TRUE(page_present(bss_page));
    EXPECT_TRUE(page_present(below));
}
#endif

TEST(Prefault, BulkMappingPaysOnlyWhenAFaultIsClearlyDearerThanAMadvise) {
    using forkbox::prefault::bulk_mapping_pays;
    // A PVM guest: a fault ~12 us, a 64 KiB madvise ~2.6 us.
    EXPECT_TRUE(bulk_mapping_pays({.fault = 12000, .populate = 2600}));
    // Hardware virtualisation: fault-around as cheap as the madvise, or cheaper.
    EXPECT_FALSE(bulk_mapping_pays({.fault = 9400, .populate = 8800}));
    EXPECT_FALSE(bulk_mapping_pays({.fault = 2800, .populate = 17000}));
    // Not measured (a probe that found no untouched code): as before, populate.
    EXPECT_TRUE(bulk_mapping_pays({}));
}

TEST(Prefault, SettingComesFromForkboxPrefaultAlone) {
    using forkbox::prefault::Setting;
    using forkbox::prefault::setting;
    auto of = [](std::initializer_list<const char*> env) {
        std::vector<char*> block;
        for (const char* e : env) block.push_back(const_cast<char*>(e));
        block.push_back(nullptr);
        return setting(block.data());
    };
    EXPECT_EQ(of({}), Setting::measure);
    EXPECT_EQ(setting(nullptr), Setting::measure);
    EXPECT_EQ(of({"PATH=/bin", "FORKBOX_PREFAULT=on"}), Setting::on);
    EXPECT_EQ(of({"FORKBOX_PREFAULT=off", "HOME=/"}), Setting::off);
    EXPECT_EQ(of({"FORKBOX_PREFAULT=onn"}), Setting::measure);
    EXPECT_EQ(of({"FORKBOX_PREFAULT="}), Setting::measure);
    EXPECT_EQ(of({"FORKBOX_PREFAULTX=on"}), Setting::measure);
    EXPECT_EQ(of({"FORKBOX_PREFAUL=on"}), Setting::measure);
}

// The executable's code, as the program headers say: [from, to).
std::pair<uintptr_t, uintptr_t> text_segment() {
    std::pair<uintptr_t, uintptr_t> range{0, 0};
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& p = info->dlpi_phdr[i];
                if (p.p_type != PT_LOAD || !(p.p_flags & PF_X)) continue;
                auto* r = static_cast<std::pair<uintptr_t, uintptr_t>*>(out);
                r->first = (info->dlpi_addr + p.p_vaddr) & ~(kPage - 1);
                r->second = (info->dlpi_addr + p.p_vaddr + p.p_memsz + kPage - 1) & ~(kPage - 1);
                return 1;  // the first object is the executable
            }
            return 1;
        },
        &range);
    return range;
}

size_t pages_present(uintptr_t from, uintptr_t to) {
    size_t n = 0;
    for (uintptr_t a = from; a < to; a += kPage) n += page_present(reinterpret_cast<const void*>(a));
    return n;
}

// A forked child has no page-table entries for the code (the kernel copies none for a file
// mapping without private pages): populate_text maps all of it again.
TEST(Prefault, PopulateTextMapsAllOfTheCodeInAForkedChild) {
    auto [from, to] = text_segment();
    ASSERT_LT(from, to);
    size_t pages = (to - from) / kPage;
    forkbox::prefault::populate_text();
    ASSERT_EQ(pages_present(from, to), pages) << "in the parent";
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        size_t before = pages_present(from, to);
        forkbox::prefault::populate_text();
        size_t after = pages_present(from, to);
        ::_exit(before < pages && after == pages ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
