#include "libforkbox/container/init.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <linux/keyctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/container/seccomp_agent.hpp"
#include "libforkbox/container/state.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/exec_guard.hpp"
#include "libforkbox/process/hooks.hpp"
#include "libforkbox/process/process.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/process/sync.hpp"
#include "libforkbox/process/terminal.hpp"
#include "libforkbox/seccomp/evaluate.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox {

namespace {

// New namespaces created by unshare() after the clone (the rest come with clone3 itself).
constexpr int kUnsharedLater = CLONE_NEWCGROUP | CLONE_NEWTIME;

// What init may still do once a filter loaded before the exec fifo is in place: the fifo's
// open, write and close, close_range, and on a failure the error report and exit (malloc
// may map memory for the message). Exec itself is under the filter either way.
bool filter_allows_the_wait(const SeccompProgram& filter) {
    for (int nr : {SYS_openat, SYS_write, SYS_close, SYS_close_range, SYS_exit_group, SYS_brk, SYS_mmap, SYS_munmap})
        if (!seccomp_allows_any_arguments(filter.bpf, nr)) return false;
    return true;
}

// What the exec stub does while it waits, besides the wait itself.
bool stub_can_wait_under(const SeccompProgram& filter) {
    for (int nr : {SYS_prctl, SYS_rt_sigaction, SYS_rt_sigprocmask})
        if (!seccomp_allows_any_arguments(filter.bpf, nr)) return false;
    return true;
}

// Besides the wait: loaded before create has recorded us, the wait for its Recorded (sync_recv).
bool filter_allows_the_wait_for_recorded(const SeccompProgram& filter) {
    return seccomp_allows_any_arguments(filter.bpf, SYS_recvfrom) && seccomp_allows_any_arguments(filter.bpf, SYS_recvmsg);
}

// Until `create` has recorded us in state.json (Recorded), nothing else knows this
// process exists: it must not outlive a create that dies (a SIGKILL). Armed, then checked:
// a create already dead before the prctl is seen as the sync socket's hang-up.
void die_with_create(const InitArgs& a) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (sync_peer_gone(a.sync_fd)) _exit(1);
}

Result<void> map_user_namespace(const InitArgs& a) {
    // An unprivileged parent (or the newuidmap it runs) may open our /proc/PID/uid_map only
    // while we are dumpable. Nothing of the container runs yet, and we are undumpable again
    // before anything does (CVE-2016-9962 is about a process in the container seeing us).
    if (a.unprivileged_parent) ::prctl(PR_SET_DUMPABLE, 1);
    FB_TRY(sync_send(a.sync_fd, SyncType::UsernsReady));
    FB_TRY(sync_expect(a.sync_fd, SyncType::UsernsDone));
    if (a.unprivileged_parent) ::prctl(PR_SET_DUMPABLE, 0);
    return become_namespace_root();
}

// The intermediate process: joins namespaces by path, creates the new ones, and forks init
// with CLONE_PARENT so init is the `create` process's own child. Returns in init only.
Result<void> intermediate_stage(InitArgs& a) {
    const Plan& plan = *a.plan;
    FB_TRY(join_namespaces(*a.namespaces));
    if (a.warm_namespaces & CLONE_NEWUSER) {
        // A zygote template's, mapped as the config says: root in it, as after mapping.
        FB_TRY(become_namespace_root());
    } else if (plan.new_namespaces & CLONE_NEWUSER) {
        if (::unshare(CLONE_NEWUSER) < 0) return sys_error("unshare user namespace");
        FB_TRY(map_user_namespace(a));
    }
    int rest = plan.new_namespaces & ~(CLONE_NEWUSER | CLONE_NEWPID | kUnsharedLater | a.warm_namespaces);
    if (rest && ::unshare(rest) < 0) return sys_error("unshare namespaces");
    // init's first message (Ready, RuntimeHooks) must not reach create before InitPid, or
    // create fails ("init ready before its pid was known") or gives hooks our pid: init
    // waits for the byte we write once InitPid is sent (EOF: we died first, so does init).
    int order[2];
    if (::pipe2(order, O_CLOEXEC) < 0) return sys_error("pipe");
    pid_t pid = sys::clone3_fork(CLONE_PARENT | (plan.new_namespaces & CLONE_NEWPID));
    if (pid < 0) return sys_error("clone init");
    if (pid > 0) {
        trace::mark("intermediate: forked");
        if (sync_send(a.sync_fd, SyncType::InitPid, pid)) (void)!::write(order[1], "1", 1);
        _exit(0);
    }
    ::close(order[1]);
    char sent = 0;
    ssize_t n;
    while ((n = ::read(order[0], &sent, 1)) < 0 && errno == EINTR) {
    }
    ::close(order[0]);
    if (n != 1) _exit(1);
    // A new process has no death signal (the kernel clears it on fork): ours again, for
    // `create`, whose child CLONE_PARENT makes us.
    die_with_create(a);
    trace::mark("init: forked");
    return {};
}

// InitArgs::v1_cgroups_follow: once `create` says the v1 cgroups exist, we join them (as
// join_v1_cgroups: ourselves, through their `tasks` files, which come with the message when
// create could open them); a no-op after the first call.
Result<void> join_v1_cgroups_when_placed(InitArgs& a) {
    if (!a.v1_cgroups_follow) return {};
    a.v1_cgroups_follow = false;
    auto placed = sync_expect(a.sync_fd, SyncType::CgroupsPlaced);
    if (!placed) return std::unexpected(placed.error().wrap("wait for the cgroups"));
    std::vector<unique_fd> files = std::move(placed->fds);
    if (files.empty()) {
        FB_ASSIGN(files, open_v1_task_files(*a.cgroup_layout, a.cgroup_dirs));
    }
    std::vector<int> fds;
    for (auto& f : files) fds.push_back(f.release());
    FB_TRY(join_v1_cgroups(fds));
    trace::mark("init: v1 cgroups joined");
    return {};
}

// Every fd from `first` on close-on-exec, but `keep`.
void mark_fds_close_on_exec(int first, int keep = -1) {
    auto from = static_cast<unsigned>(first);
    if (keep < first) {
        sys::close_range(from, ~0U, CLOSE_RANGE_CLOEXEC);
        return;
    }
    if (keep > first) sys::close_range(from, static_cast<unsigned>(keep) - 1, CLOSE_RANGE_CLOEXEC);
    sys::close_range(static_cast<unsigned>(keep) + 1, ~0U, CLOSE_RANGE_CLOEXEC);
}

// An O_PATH fd of the exec fifo (not close-on-exec), when the stub will reach the fifo
// through /proc/self/fd/N: procfs there, seen as we see it now (same mounts, same pid and fd
// table after the exec). Else none, and init waits for `start` itself.
unique_fd fifo_the_stub_can_reopen(int state_dir_fd) {
    unique_fd fifo(::openat(state_dir_fd, kExecFifo, O_PATH));
    struct stat direct {}, through_proc {};
    if (!fifo || ::fstat(fifo.get(), &direct) < 0) return {};
    std::string path = "/proc/self/fd/" + std::to_string(fifo.get());
    if (::stat(path.c_str(), &through_proc) < 0 || direct.st_dev != through_proc.st_dev ||
        direct.st_ino != through_proc.st_ino)
        return {};
    return fifo;
}

Result<void> run_init(InitArgs& a, std::string& state_json) {
    const Plan& plan = *a.plan;
    // flock belongs to the open file, which the clone shares: keeping it would block every
    // later verb on this container.
    ::close(a.lock_fd);
    // Until create finishes, die with it rather than linger half-made.
    die_with_create(a);
    // Nothing in the container may open this process's /proc files (and through them the
    // forkbox binary) before execve resets dumpability.
    ::prctl(PR_SET_DUMPABLE, 0);
    trace::mark("init: first");
    // SIG_IGN survives execve: what the caller ignored (conmon ignores SIGPIPE) must not
    // reach the container. And until our execve, `kill` of the container ends us, though we
    // are pid 1 (waiting_init_signals.h). Before unblocking: born on create's memory, we
    // must not run create's handlers.
    reset_signal_dispositions(UntilExec::ExitOnTermination);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    trace::mark("init: signals reset");

    // Into the v1 cgroups before anything else can fork (v2: clone3 put us there).
    FB_TRY(join_v1_cgroups(a.cgroup_task_fds));
    trace::mark("init: cloned");
    FB_ASSIGN(auto go, sync_expect(a.sync_fd, SyncType::Go));
    trace::mark("init: go");
    state_json = std::move(go.payload);

    if (a.intermediate) {
        FB_TRY(intermediate_stage(a));
    } else if (plan.new_namespaces & CLONE_NEWUSER) {
        FB_TRY(map_user_namespace(a));
    }
    // A session of its own, as runc gives every container process (and a terminal needs).
    if (::setsid() < 0) return sys_error("setsid");
    bool in_userns = (plan.new_namespaces & CLONE_NEWUSER) != 0;
    for (const auto& j : plan.joins) in_userns |= j.clone_flag == CLONE_NEWUSER;
    in_userns |= a.in_user_namespace;

    // The caller's session keyring (and the keys in it) must not be shared with the container.
    // Kernels or seccomp profiles without keyctl: carry on, as runc does.
    std::string keyring = "_ses." + plan.id;  // runc's name
    if (a.new_keyring && ::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, keyring.c_str()) < 0 &&
        errno != ENOSYS && errno != EACCES && errno != EPERM)
        return sys_error("join a new session keyring");

    // After cgroup placement, so the namespace's root is the container's cgroup.
    if ((plan.new_namespaces & CLONE_NEWCGROUP) && ::unshare(CLONE_NEWCGROUP) < 0)
        return sys_error("unshare cgroup namespace");
    if (plan.new_namespaces & CLONE_NEWTIME) FB_TRY(enter_new_time_namespace(plan.time_offsets));
    // A template's network namespace has lo up already.
    if ((plan.new_namespaces & CLONE_NEWNET) && !(a.warm_namespaces & CLONE_NEWNET)) FB_TRY(bring_up_loopback());
    if (plan.set_hostname) FB_TRY(set_hostname(plan.hostname));
    if (plan.set_domainname) FB_TRY(set_domainname(plan.domainname));
    // Through the runtime's /proc, before the container's is entered: nothing mounted there
    // can redirect the write (the CVE-2025-52881 class). Hooks inherit it, as under runc,
    // which writes it from outside.
    if (plan.process.oom_score_adj) FB_TRY(set_oom_score_adj(*plan.process.oom_score_adj));

    trace::mark("init: namespaces set");
    RootfsContext ctx{plan, *a.cgroup_layout, a.cgroup_dirs, in_userns,
                      (plan.new_namespaces & CLONE_NEWCGROUP) != 0};
    if (!a.bind_source_trees.empty()) ctx.bind_source_trees = &a.bind_source_trees;
    if (a.template_mount_ns >= 0) {
        // A zygote rootfs template: built, pivoted and finalized ahead (hooks of these phases,
        // sysctls and the hostname included, see zygote::rootfs_template_fits). Only the
        // container's cgroups, unknown ahead, are attached here: taken from the host first.
        ctx.v1_cgroups_premounted = a.template_v1_cgroups_bound && a.template_v1_cgroups_ours;
        ctx.replace_premounted_v1 = a.template_v1_cgroups_bound && !a.template_v1_cgroups_ours;
        FB_ASSIGN(auto cgroup_trees, clone_cgroup_trees(ctx));
        if (::setns(a.template_mount_ns, CLONE_NEWNS) < 0) return sys_error("join the template's mount namespace");
        ::close(a.template_mount_ns);
        a.template_mount_ns = -1;
        if (::chdir("/") < 0) return sys_error("chdir /");
        FB_TRY(attach_cgroup_trees(ctx, cgroup_trees));
        trace::mark("init: rootfs joined");
    } else {
        ctx.before_cgroup_mount = [&a] { return join_v1_cgroups_when_placed(a); };
        FB_TRY(prepare_rootfs(ctx));
        // Attached now: the host's copies of the bind sources must not outlive their use.
        for (int fd : a.bind_source_trees) ::close(fd);
        trace::mark("init: mounts done");
        // Without a cgroup mount: now, before any hook or process of the container runs.
        FB_TRY(join_v1_cgroups_when_placed(a));

        if (!plan.hooks.prestart.empty() || !plan.hooks.create_runtime.empty()) {
            FB_TRY(sync_send(a.sync_fd, SyncType::RuntimeHooks));
            FB_TRY(sync_expect(a.sync_fd, SyncType::RuntimeHooksDone));
        }
        FB_TRY(run_hooks(plan.hooks.create_container, state_json, "createContainer", plan.bundle));

        // Without a mount namespace a pivot would move the host's root: chroot instead.
        FB_TRY(enter_rootfs(plan.rootfs, a.no_pivot || !plan.has_mount_namespace));
        // Before finalize_rootfs: /proc/sys is usually one of the read-only paths.
        FB_TRY(apply_sysctls(plan.sysctl));
        FB_TRY(finalize_rootfs(ctx));
        trace::mark("init: rootfs final");
    }

    const oci::Process& proc = plan.process;
    if (proc.terminal) {
        FB_TRY(setup_console(a.console_fd, proc.console_size, proc.user.uid));
        ::close(a.console_fd);
        a.console_fd = -1;
        if (plan.has_mount_namespace) FB_TRY(mount_dev_console(STDIN_FILENO));
    }
    FB_TRY(apply_rlimits(proc.rlimits));
    // While init still has its capabilities (a real-time policy or a negative nice needs
    // CAP_SYS_NICE); the process keeps them across execve, and its children inherit them.
    if (proc.scheduler) FB_TRY(set_scheduler(*proc.scheduler));
    if (proc.io_priority) FB_TRY(set_io_priority(*proc.io_priority));
    if (plan.memory_policy) FB_TRY(set_memory_policy(*plan.memory_policy));
    if (plan.personality) FB_TRY(set_personality(*plan.personality));
    FB_TRY(enter_cwd(proc.cwd));

    // Without no_new_privs, installing a filter needs CAP_SYS_ADMIN: load it while init still
    // has every capability, as runc does. With it, wait until just before execve, so that the
    // filter sees as few of the runtime's own syscalls as possible. A filter with notify rules
    // loads here either way: its listener fd goes to the parent while the sync socket is open.
    bool seccomp_early = a.seccomp && (!proc.no_new_privileges || a.seccomp->wants_listener());
    if (seccomp_early) FB_TRY(load_seccomp_via_parent(*a.seccomp, a.sync_fd));

    give_stdio_to(proc.user.uid, proc.user.gid);
    FB_TRY(assume_identity(proc));

    if (proc.args.empty()) return fail(EINVAL, "process.args must not be empty");
    std::vector<std::string> env = with_home(proc.env, proc.user.uid);
    FB_ASSIGN(std::string exe, find_executable(proc.args[0], env));
    if (proc.no_new_privileges && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sys_error("prctl no_new_privs");

    // Built before a filter that may come before the exec fifo: no allocation under it.
    std::vector<char*> argv, envp;
    for (const auto& s : proc.args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    for (const auto& s : env) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);
    bool seccomp_while_waiting = a.seccomp && !seccomp_early && plan.hooks.start_container.empty() &&
                                 filter_allows_the_wait(*a.seccomp);
    bool seccomp_while_recorded = seccomp_while_waiting && filter_allows_the_wait_for_recorded(*a.seccomp);
    // The exec stub waits for `start` itself when nothing of forkbox's is left to do here after
    // it (startContainer hooks, a filter loaded at the exec): exec'd once create has recorded
    // us, its ~0.5 ms exec runs while create exits and `start` comes, not after `start`.
    // The filter, loaded before the stub runs, must let it make itself undumpable (prctl) and
    // catch and unblock the signals that end it (rt_sigaction, rt_sigprocmask); loaded
    // already, also let the check below through (stat).
    bool stub_may_wait = !a.seccomp || ((seccomp_while_waiting || (seccomp_early &&
                                         seccomp_allows_any_arguments(a.seccomp->bpf, SYS_newfstatat))) &&
                                        stub_can_wait_under(*a.seccomp));
    unique_fd start_fifo;
    if (a.exec_stub_fd >= 0 && plan.hooks.start_container.empty() && stub_may_wait)
        start_fifo = fifo_the_stub_can_reopen(a.state_dir_fd);

    // Off before Ready: create may exit as soon as it has read it and recorded us. From
    // here a dead create shows as the socket's EOF instead of Recorded, and we exit.
    ::prctl(PR_SET_PDEATHSIG, 0);
    trace::mark("init: ready");
    FB_TRY(sync_send(a.sync_fd, SyncType::Ready));
    trace::mark("init: ready sent");
    // The kernel takes ~0.25-0.5 ms to translate and JIT a Docker-sized filter. Loaded here,
    // that runs while create records us (state.json, --pid-file: ~0.15-0.3 ms), exits, and
    // `start` starts (on another CPU), not between `start` and the container's first
    // instruction: `run` starts at once, and then waited for it. Only when the filter lets
    // everything init still does through whatever the arguments, so it sees nothing that
    // could act differently; else after Recorded, when it need not allow the wait for it.
    if (seccomp_while_recorded) {
        FB_TRY(load_seccomp(*a.seccomp));
        trace::mark("init: seccomp loaded");
    }
    FB_TRY_CTX(sync_expect(a.sync_fd, SyncType::Recorded), "wait for create to record the container");
    trace::mark("init: recorded");
    ::close(a.sync_fd);
    a.sync_fd = -1;
    if (seccomp_while_waiting && !seccomp_while_recorded) {
        FB_TRY(load_seccomp(*a.seccomp));
        trace::mark("init: seccomp loaded");
    }

    if (start_fifo) {
        // No host fd may survive into the container (CVE-2024-21626 class) but the fifo's
        // O_PATH fd, which the stub closes before its exec: it names one file, no directory.
        mark_fds_close_on_exec(3 + a.preserve_fds, start_fifo.get());
        sys::close_range(static_cast<unsigned>(a.state_dir_fd), static_cast<unsigned>(a.state_dir_fd), CLOSE_RANGE_CLOEXEC);
        trace::mark("init: exec");
        // The stub catches these again before it unblocks them: none is lost in between.
        block_termination_signals(true);
        (void)exec_through_stub(a.exec_stub_fd, exe, argv.data(), envp.data(), a.seccomp, -1, start_fifo.get());
        block_termination_signals(false);
        // The stub could not be exec'd: wait here, as without it, where the failure to exec
        // it (and its fallbacks) is met and reported again after `start`.
        start_fifo.reset();
    }

    // Blocks until `start` opens the other end.
    int fifo = ::openat(a.state_dir_fd, kExecFifo, O_WRONLY | O_CLOEXEC);
    if (fifo < 0) return sys_error("open exec fifo");
    if (::write(fifo, "0", 1) != 1) return sys_error("write exec fifo");
    // The write end stays open, close-on-exec, until our execve: `start` waits for its EOF
    // before poststart hooks, which the spec runs after the user's process is executed.
    ::close(a.state_dir_fd);
    trace::mark("init: started");

    FB_TRY(run_hooks(plan.hooks.start_container, state_json, "startContainer"));

    // No host fd may survive into the container (CVE-2024-21626 class).
    mark_fds_close_on_exec(3 + a.preserve_fds);
    trace::mark("init: fds closed");
    if (a.seccomp && !seccomp_early && !seccomp_while_waiting) FB_TRY(load_seccomp(*a.seccomp));
    trace::mark("init: exec");
    auto exec = exec_through_stub(a.exec_stub_fd, exe, argv.data(), envp.data(), a.seccomp);
    return fail(0, "exec: \"" + proc.args[0] + "\": " + go_errno_text(exec.error().errnum()));
}

}  // namespace

void container_init(InitArgs& a) {
    std::string state_json;
    auto r = run_init(a, state_json);
    std::string msg = r.error().what();
    if (a.sync_fd >= 0) {
        (void)sync_send(a.sync_fd, SyncType::Error, r.error().errnum(), msg);
    } else {
        // After create returned there is no parent to tell: say it on stderr like runc.
        dprintf(2, "forkbox: %s\n", msg.c_str());
    }
    _exit(r.error().errnum() == 0 ? 127 : 1);
}

}  // namespace forkbox
