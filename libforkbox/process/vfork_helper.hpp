// A child cloned onto our own memory (CLONE_VM | CLONE_VFORK) by a helper thread.
//
// A forked child starts with no page-table entries for our code (fork copies none for a file
// mapping) and a copy-on-write view of our heap and stack: on these VMs each first touch is a
// fault (~12 us), ~45 of them in container init before its exec, and the exec then tears the
// copied address space down. A child sharing our memory touches pages mapped already, and its
// exec leaves our address space alone. CLONE_VFORK keeps the cloning thread (whose
// thread-local state, malloc's cache included, the child runs with) asleep until the child has
// exec'd or died; a helper thread takes that sleep, so the caller goes on.
//
// The caller waits until the child has taken its own copies of what it reads (and calls
// `release`), or has died. From then on the child must not touch what the caller owns: the
// caller may change or free it, and may exit before the child's exec. The child leaves by
// execve or _exit. glibc's set*id() wrappers would signal our other threads: the child uses
// the raw system calls (process.cpp does).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "libforkbox/base/error.hpp"
#include "libforkbox/process/namespaces.hpp"

namespace forkbox {

// What the child calls once it needs nothing of the caller's any more.
struct ReleaseCaller {
    void* handoff = nullptr;
    void operator()() const;
    // Whether the kernel put the child into `cgroup_fd` (else the child joins it itself).
    bool born_in_cgroup() const;
};

using SharedMemoryChild = void (*)(void* arg, ReleaseCaller release);

// The thread that clones, started before the clone is asked for and, when asked, moved first
// into a new network namespace of its own on another CPU (the kernel takes ~0.7-0.9 ms to
// make one on these VMs) while the caller goes on: a child it clones is born there. One
// thread for both: on these VMs a thread's start costs its creator ~0.1-0.2 ms. The child's
// stack and heap are written when the caller asks (prepare_child), else at the clone: asked
// while the caller still faults much (parsing, say), the page-table work of one process on
// two CPUs at once slowed the caller as much as it saved.
struct CloneHandoff;

class CloneHelper {
public:
    struct Options {
        bool make_network_namespace = false;
    };
    // Starts the thread; a failure to start shows in the calls below.
    explicit CloneHelper(Options options);
    CloneHelper(const CloneHelper&) = delete;
    CloneHelper& operator=(const CloneHelper&) = delete;
    // A helper that cloned nothing ends, with its network namespace unless it was taken.
    ~CloneHelper();

    // The network namespace the helper made, once made, for a child it does not clone (a
    // fork, which is entered into it): nullopt when none was asked for, when the helper's
    // thread could not start, or when the caller's own is owned by an outer user namespace
    // (see namespaces.hpp); the clone must make it then. The helper stays in it: a child it
    // clones later is born in it all the same.
    Result<std::optional<OpenNamespace>> take_network_namespace();

    // Asks the helper to map the child's stack and write its first pages (and its heap's)
    // now, ahead of clone(): best once what the caller has left to do faults little (see
    // above). Unmapped again if the helper ends without cloning.
    void prepare_child();
    // Where the child's stack (with its guard page below it) is mapped, once it is, for
    // tests: nullptr before. Unmapped once the child has exec'd or died, or with a helper
    // that cloned nothing.
    const void* child_stack() const;
    static size_t child_stack_bytes();

    // Starts child(arg, release) with the CLONE_NEW* `flags` and returns its pid once it has
    // released us (or died). `in_helper` runs first on the helper thread (setns of the
    // namespaces the child is to be born in: setns changes the calling thread only); its
    // error is returned and nothing is cloned. The child is born with every signal blocked,
    // with the CPUs the caller had, in the helper's network namespace (with CLONE_NEWNET in
    // `flags`: a new one), and in the cgroup v2 directory `cgroup_fd` where the kernel can
    // (clone3's CLONE_INTO_CGROUP; x86_64). `while_cloning` runs on the caller meanwhile, on
    // the caller's CPU while the child starts on the helper's: it must leave alone what the
    // child reads until it is released. Once only.
    Result<pid_t> clone(SharedMemoryChild child, void* arg, int flags, std::function<Result<void>()> in_helper,
                        int cgroup_fd = -1, const std::function<void()>& while_cloning = {});

private:
    std::shared_ptr<CloneHandoff> h_;
    pthread_t thread_{};
    int start_error_ = 0;
    bool joinable_ = false;
};

// CloneHelper({}).clone(...): a helper started for this one clone.
Result<pid_t> clone_child_on_shared_memory(SharedMemoryChild child, void* arg, int flags,
                                           std::function<Result<void>()> in_helper, int cgroup_fd = -1);

}  // namespace forkbox
