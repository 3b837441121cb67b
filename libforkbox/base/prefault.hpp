// Page tables filled in bulk at start-up, where that pays. Every forkbox process (create,
// start, delete, ...) takes a page fault for each 64 KiB of its 4 MB text it runs
// (fault-around) and for each page of .data, .bss and stack it writes: ~60 faults before a
// create is done. On a VM whose faults trap to the hypervisor (PVM) a fault costs ~12 us, and
// one madvise (MADV_POPULATE_*, Linux 5.14) maps the same pages for ~0.1 us each (file) /
// ~0.6 us (anon): there mapping everything first made a process ~0.15 ms faster. Under
// hardware virtualisation or on bare metal a fault with fault-around costs what a madvise of
// its 16 pages costs (~1 us), and mapping all of it made each process ~0.24 ms slower. So each
// process measures both on blocks of its code nothing has run yet (~3 us) and maps in bulk only
// when faults are clearly the dearer; FORKBOX_PREFAULT=on|off skips the measurement.
// The static forkbox's entry point (prefault.cpp, `-e forkbox_entry`) does this before glibc's
// own start-up, which faults ~30 times first: a `forkbox --version` populating takes 12 faults,
// not 40. Linked without it (the unit tests), a preinit_array entry does it before any
// constructor, and then also writes the heap glibc's start-up made: its pages are the first
// malloc hands out. The populate calls are exposed for tests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forkbox::prefault {

// What the probe measured, in the same arbitrary units (0: not measured).
struct Costs {
    uint64_t fault = 0;     // one fault on code (fault-around maps its 64 KiB)
    uint64_t populate = 0;  // one MADV_POPULATE_READ of 64 KiB of code
};
// Whether mapping everything in bulk beats faulting what runs.
bool bulk_mapping_pays(Costs costs);

enum class Setting { measure, on, off };
// FORKBOX_PREFAULT in an environment block (on, off, else measure).
Setting setting(char* const* envp);

// Whether this process decided to map in bulk (at start-up; a forked child inherits it).
bool pays();
// What its probe measured then ({0, 0} when FORKBOX_PREFAULT chose).
Costs measured();

// The executable's own segments: text and read-only data mapped, .data and .bss written.
void populate_executable();
// Text and read-only data only: what a forked child needs mapped again. fork() copies no
// page-table entries of a file mapping without private copies in it (the kernel's
// vma_needs_copy), so a child starts with none for the executable's code and faults on each
// 64 KiB of it that it runs (~30 faults in a sandbox build, ~12 us each on these VMs); one
// madvise maps all 4.8 MB again in ~0.15-0.2 ms.
void populate_text();
// The 64 KiB of stack below the caller's frame.
void populate_stack();
// malloc's heap as far as it reaches now: at start-up, the ~132 KiB glibc's own start-up made
// (a create writes ~23 of its pages before the clone, each a fault).
void populate_heap();
// For a verb that outgrows that heap (create and run: the config's text, the Plan, the
// seccomp program; ~8 faults more): where bulk mapping pays, the heap grows to `bytes` spare
// now, written in one call. Once per process.
void reserve_heap(size_t bytes);
// Where bulk mapping pays: the calling thread's malloc arena (glibc gives each thread its own,
// a 64 MiB mapping faulted page by page) made now, its first `bytes` written in one call.
void warm_thread_heap(size_t bytes);

}  // namespace forkbox::prefault
