// Landlock scopes (kernel 6.12, Landlock ABI 6): a process confined to the abstract Unix
// sockets and the signal targets of its own domain, with no filesystem or network rule.
// A sandbox that shares the host's network namespace would otherwise reach every abstract
// socket on the host (X11's @/tmp/.X11-unix/X0, a D-Bus or containerd listener).
#pragma once

#include "libforkbox/base/error.hpp"

namespace forkbox {

// The kernel's Landlock ABI version; 0 where it has none (not built, or not enabled at boot).
int landlock_abi();

// True when scope_to_own_domain() can confine (ABI 6 or later).
bool landlock_scopes_supported();

// Confines this process and what it starts from now on: connecting to an abstract Unix
// socket, or signalling a process, made outside this domain fails with EPERM. Needs
// no_new_privs (or CAP_SYS_ADMIN in its user namespace). Where the kernel predates scopes
// it does nothing and returns false.
Result<bool> scope_to_own_domain();

}  // namespace forkbox
