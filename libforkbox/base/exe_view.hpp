// The executable's segments mapped again from a read-only view of its own file, so that a
// process can name another file as its executable without an exec (exec_guard.hpp: the
// sealed exec stub becomes /proc/self/exe, and container programs are exec'd directly).
//
// The kernel lets a process swap its executable (prctl PR_SET_MM_MAP's exe_fd, which needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE) only while no mapping of the current one's path
// is left, and a static forkbox is nothing but mappings of that path. So the static
// forkbox's entry point, before glibc's start-up has written a byte of .data, maps each of
// its segments again, at the same address, from a detached read-only bind mount of the same
// file (open_tree OPEN_TREE_CLONE): the same page-cache pages under another path. ~10
// system calls; the view's fd is closed at once (the mappings hold the file), so nothing a
// container could inherit points at the host's binary. Done only for the verbs that exec
// container programs (an argument `create`, `run` or `exec`) and only where the kernel lets
// us (root: open_tree needs CAP_SYS_ADMIN), unless FORKBOX_EXE_SWAP=off; a failure before
// the first segment is mapped leaves the process as the kernel made it.
#pragma once

#include <cstdint>

namespace forkbox::exe_view {

// Whether every segment of this process's executable was mapped again from the view.
bool remapped();

}  // namespace forkbox::exe_view

// Called by the static forkbox's entry point (prefault.cpp) with the stack the kernel made
// (argc, argv, NULL, envp, NULL), before anything else: raw system calls only.
extern "C" void forkbox_remap_executable_early(uintptr_t initial_stack);
