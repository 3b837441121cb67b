#include "libforkbox/process/vfork_helper.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <memory>
#include <utility>

#include "libforkbox/base/prefault.hpp"
#include "libforkbox/base/syscalls.hpp"

namespace forkbox {

enum Stage : int { kCloning = 0, kReleased = 1, kGone = 2, kFailed = 3 };
enum Request : int { kWaiting = 0, kClone = 1, kQuit = 2, kPrepare = 3 };

struct CloneHandoff {
    std::atomic<int> stage{kCloning};     // the caller sleeps on it (futex)
    std::atomic<int> request{kWaiting};   // the helper sleeps on it
    std::atomic<int> prepared{0};         // 1 once the helper's network namespace is made
    pid_t pid = 0;                        // written by the kernel before the child runs
    Result<void> error;                   // kFailed: why
    SharedMemoryChild child = nullptr;
    void* child_arg = nullptr;
    int flags = 0;
    int cgroup_fd = -1;           // a cgroup v2 directory to be born in, or -1
    bool born_in_cgroup = false;  // set before the child runs
    std::function<Result<void>()> in_helper;
    void* stack_map = nullptr;
    char* stack_top = nullptr;
    std::atomic<void*> stack_shown{nullptr};  // stack_map, for child_stack()
    // Making the network namespace: asked, its result, and the CPUs to go back to.
    bool make_network_namespace = false;
    Result<std::optional<unique_fd>> network = std::optional<unique_fd>();
    cpu_set_t caller_cpus{};
    bool pinned = false;
};

namespace {

// Init's deepest frames (rootfs set-up, seccomp) stay well under this; the pages it uses
// first are written in one call, not faulted one by one.
constexpr size_t kStackBytes = 2 << 20;
constexpr size_t kStackPrefault = 128 << 10;
constexpr size_t kGuard = 4096;
constexpr size_t kHelperStack = 64 << 10;  // the helper only clones and waits
constexpr size_t kChildHeapBytes = 96 << 10;  // room for init's copies (Plan, layout, seccomp program)

using Handoff = CloneHandoff;

void futex_wait(std::atomic<int>& word, int while_is) {
    while (word.load(std::memory_order_acquire) == while_is)
        ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, while_is, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<int>& word) {
    ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void set_stage(Handoff* h, Stage s) {
    int expected = kCloning;
    if (h->stage.compare_exchange_strong(expected, s, std::memory_order_acq_rel)) futex_wake(h->stage);
}

int child_entry(void* p) {
    auto* h = static_cast<Handoff*>(p);
    h->child(h->child_arg, ReleaseCaller{h});
    _exit(127);  // a child returns by exec or _exit only
}

#if defined(__x86_64__)
// clone3 onto `stack` (glibc 2.36 has no wrapper for it): the child starts there with the
// caller's registers, so the entry point and its argument travel in registers the system
// call keeps, and nothing of the parent's stack frame is touched after it. Returns the
// child's pid, or -errno.
[[gnu::noinline]] long clone3_onto_stack(clone_args* args, int (*entry)(void*), void* arg) {
    long ret;
    register long r12 asm("r12") = reinterpret_cast<long>(entry);
    register long r13 asm("r13") = reinterpret_cast<long>(arg);
    asm volatile(
        "syscall\n\t"
        "test %%rax, %%rax\n\t"
        "jnz 1f\n\t"
        // The child: a fresh stack (16-byte aligned by the caller), no frame to return to.
        "xor %%ebp, %%ebp\n\t"
        "mov %%r13, %%rdi\n\t"
        "call *%%r12\n\t"
        "mov %%eax, %%edi\n\t"
        "mov %[exit_nr], %%eax\n\t"
        "syscall\n\t"
        "hlt\n"
        "1:"
        : "=a"(ret)
        : "0"(SYS_clone3), "D"(args), "S"(sizeof *args), "r"(r12), "r"(r13), [exit_nr] "i"(SYS_exit)
        : "rcx", "r11", "memory");
    return ret;
}
#endif

// Into the cgroup by clone3's CLONE_INTO_CGROUP where the kernel has it (5.7): the child
// need not move itself, a write that takes the cgroup core's migration lock. Else clone(2),
// and the child joins it itself (born_in_cgroup stays false).
pid_t clone_child(Handoff* h) {
    int flags = CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID | h->flags;
#if defined(__x86_64__)
    if (h->cgroup_fd >= 0) {
        struct clone_args args {};
        args.flags = static_cast<uint64_t>(flags) | CLONE_INTO_CGROUP;
        args.parent_tid = reinterpret_cast<uint64_t>(&h->pid);
        args.exit_signal = SIGCHLD;
        args.stack = reinterpret_cast<uint64_t>(h->stack_top - kStackBytes);
        args.stack_size = kStackBytes;
        args.cgroup = static_cast<uint64_t>(h->cgroup_fd);
        h->born_in_cgroup = true;
        long pid = clone3_onto_stack(&args, child_entry, h);
        if (pid > 0) return static_cast<pid_t>(pid);
        h->born_in_cgroup = false;  // an older kernel, or a cgroup it cannot place us in
    }
#endif
    return ::clone(child_entry, h->stack_top, flags | SIGCHLD, h, &h->pid);
}

// The child's stack, mapped with its first pages written, and the first pages of our arena,
// from which the child allocates (it runs on our thread-local state): written before it runs.
// Not the caller's arena: a caller killed while holding that arena's lock would leave the
// child stuck. Once; a failure leaves nothing mapped.
Result<void> prepare_child_memory(Handoff* h) {
    if (h->stack_map) return {};
    void* map = ::mmap(nullptr, kStackBytes + kGuard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return sys_error("map a stack for the child");
    ::mprotect(map, kGuard, PROT_NONE);
    h->stack_map = map;
    h->stack_top = static_cast<char*>(map) + kGuard + kStackBytes;
    (void)::madvise(h->stack_top - kStackPrefault, kStackPrefault, MADV_POPULATE_WRITE);
    prefault::warm_thread_heap(kChildHeapBytes);
    h->stack_shown.store(map, std::memory_order_release);
    return {};
}

void* helper_main(void* p) {
    std::unique_ptr<std::shared_ptr<Handoff>> ref(static_cast<std::shared_ptr<Handoff>*>(p));
    Handoff* h = ref->get();
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, nullptr);
    if (h->make_network_namespace) {
        h->network = move_thread_to_new_network_namespace();
        h->prepared.store(1, std::memory_order_release);
        futex_wake(h->prepared);
    }
    futex_wait(h->request, kWaiting);
    if (h->request.load(std::memory_order_acquire) == kPrepare) {
        (void)prepare_child_memory(h);  // a failure shows at the clone, which tries again
        futex_wait(h->request, kPrepare);
    }
    if (h->request.load(std::memory_order_acquire) != kClone) {
        if (h->stack_map) ::munmap(h->stack_map, kStackBytes + kGuard);
        return nullptr;
    }
    if (auto r = prepare_child_memory(h); !r) {
        h->error = std::move(r);
        set_stage(h, kFailed);
        return nullptr;
    }
    // The child is born with our CPUs: the caller's, not the one we were kept on.
    if (h->pinned) ::sched_setaffinity(0, sizeof h->caller_cpus, &h->caller_cpus);
    if (h->in_helper) {
        if (auto r = h->in_helper(); !r) {
            h->error = std::move(r);
            set_stage(h, kFailed);
            return nullptr;
        }
    }
    if (clone_child(h) < 0) {
        h->error = sys_error("clone");
        set_stage(h, kFailed);
        return nullptr;
    }
    // The child has exec'd or died: its stack is free, and a child that died before it
    // released the caller does now.
    ::munmap(h->stack_map, kStackBytes + kGuard);
    set_stage(h, kGone);
    return nullptr;
}

}  // namespace

void ReleaseCaller::operator()() const { set_stage(static_cast<Handoff*>(handoff), kReleased); }

bool ReleaseCaller::born_in_cgroup() const { return static_cast<Handoff*>(handoff)->born_in_cgroup; }

CloneHelper::CloneHelper(Options options) : h_(std::make_shared<Handoff>()) {
    h_->make_network_namespace = options.make_network_namespace;

    pthread_attr_t attr;
    ::pthread_attr_init(&attr);
    ::pthread_attr_setstacksize(&attr, kHelperStack);
    // Making a network namespace, on another CPU than ours: a thread woken on this one
    // preempts us and keeps the CPU for the whole unshare (seen: the caller stalled ~0.57
    // ms), while the other CPU idles. With one CPU there is nothing to overlap.
    int here = ::sched_getcpu();
    if (options.make_network_namespace && here >= 0 &&
        ::sched_getaffinity(0, sizeof h_->caller_cpus, &h_->caller_cpus) == 0 && CPU_COUNT(&h_->caller_cpus) >= 2) {
        cpu_set_t elsewhere = h_->caller_cpus;
        CPU_CLR(here, &elsewhere);
        h_->pinned = ::pthread_attr_setaffinity_np(&attr, sizeof elsewhere, &elsewhere) == 0;
    }
    auto* ref = new std::shared_ptr<Handoff>(h_);
    start_error_ = ::pthread_create(&thread_, &attr, helper_main, ref);
    ::pthread_attr_destroy(&attr);
    if (start_error_ != 0) {
        delete ref;
        return;
    }
    joinable_ = true;
}

CloneHelper::~CloneHelper() {
    if (!joinable_) return;
    h_->request.store(kQuit, std::memory_order_release);
    futex_wake(h_->request);
    ::pthread_join(thread_, nullptr);
}

const void* CloneHelper::child_stack() const { return h_->stack_shown.load(std::memory_order_acquire); }

size_t CloneHelper::child_stack_bytes() { return kStackBytes + kGuard; }

void CloneHelper::prepare_child() {
    if (!joinable_) return;
    int waiting = kWaiting;
    if (h_->request.compare_exchange_strong(waiting, kPrepare, std::memory_order_acq_rel)) futex_wake(h_->request);
}

Result<std::optional<OpenNamespace>> CloneHelper::take_network_namespace() {
    // No thread (a pids limit, say): none made, the clone makes it, as without a helper; a
    // clone by this helper reports why it has none.
    if (start_error_ || !h_->make_network_namespace) return std::nullopt;
    futex_wait(h_->prepared, 0);
    if (!h_->network) return std::unexpected(h_->network.error());
    if (!*h_->network) return std::nullopt;
    OpenNamespace ns;
    ns.clone_flag = CLONE_NEWNET;
    ns.path = "network namespace made ahead";
    ns.fd = std::move(**h_->network);
    *h_->network = std::nullopt;  // taken: a second call finds none
    return ns;
}

Result<pid_t> CloneHelper::clone(SharedMemoryChild child, void* arg, int flags,
                                 std::function<Result<void>()> in_helper, int cgroup_fd,
                                 const std::function<void()>& while_cloning) {
    if (start_error_) return fail(start_error_, "start a thread to clone from");
    if (!joinable_) return fail(EINVAL, "the clone helper cloned once already");
    Handoff* h = h_.get();
    h->child = child;
    h->child_arg = arg;
    h->flags = flags;
    h->cgroup_fd = cgroup_fd;
    h->in_helper = std::move(in_helper);
    h->request.store(kClone, std::memory_order_release);
    futex_wake(h->request);
    if (while_cloning) while_cloning();
    futex_wait(h->stage, kCloning);
    joinable_ = false;
    if (h->stage.load(std::memory_order_acquire) == kFailed) {
        ::pthread_join(thread_, nullptr);
        if (h->stack_map) ::munmap(h->stack_map, kStackBytes + kGuard);
        return std::unexpected(h->error.error());
    }
    // The helper lives on until the child has exec'd or died, then unmaps its stack.
    ::pthread_detach(thread_);
    return h->pid;
}

Result<pid_t> clone_child_on_shared_memory(SharedMemoryChild child, void* arg, int flags,
                                           std::function<Result<void>()> in_helper, int cgroup_fd) {
    return CloneHelper(CloneHelper::Options{}).clone(child, arg, flags, std::move(in_helper), cgroup_fd);
}

}  // namespace forkbox
