// Page tables filled in bulk at start-up. Every forkbox process (create, start, delete, ...)
// would otherwise take a page fault for each 64 KiB of its 4.8 MB text it runs (fault-around)
// and for each page of .data, .bss and stack it writes: ~60 faults before a create is done.
// On a VM whose faults trap to the hypervisor a fault costs ~12 us, and one madvise
// (MADV_POPULATE_*, Linux 5.14) maps the same pages for ~0.1 us each (file) / ~0.6 us (anon).
// The static forkbox's entry point (prefault.cpp, `-e forkbox_entry`) does both before glibc's
// own start-up, which faulted ~30 times here first: a `forkbox --version` takes 12 faults, not
// 40. Linked without it (the unit tests), a preinit_array entry does it before any constructor.
// That entry also writes the heap glibc's start-up made: its pages are the first malloc hands
// out. All three are exposed for tests.
#pragma once

namespace forkbox::prefault {

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

}  // namespace forkbox::prefault
