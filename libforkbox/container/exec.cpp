// `exec`: a new process inside an existing container. The parent joins the container's pid
// (and time) namespace for its children, then clones the process straight into the
// container's v2 cgroup; the child joins the v1 cgroups and every other namespace with one
// setns on init's pidfd, sets itself up like init does, and execs. It is non-dumpable from
// the clone on, so nothing in the container can open this binary through /proc/<pid>/exe.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <linux/keyctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/freezer.hpp"
#include "libforkbox/cgroup/systemd_manager.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/container/seccomp_agent.hpp"
#include "libforkbox/process/exec_guard.hpp"
#include "libforkbox/process/foreground.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/process.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/process/sync.hpp"
#include "libforkbox/process/terminal.hpp"
#include "libforkbox/seccomp/cache.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/config_text.hpp"
#include "oci/linux_names.hpp"
#include "oci/parse.hpp"

namespace forkbox {

namespace {

// Namespaces joined for our children only (the parent stays where it is).
constexpr int kForChildren = CLONE_NEWPID | CLONE_NEWTIME;

Result<uint32_t> parse_id(std::string_view text, const char* what) {
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        return fail(EINVAL, std::string("invalid ") + what + " \"" + std::string(text) + "\"");
    return v;
}

void add_caps(std::vector<std::string>& set, const std::vector<std::string>& caps) {
    for (const auto& c : caps)
        if (std::find(set.begin(), set.end(), c) == set.end()) set.push_back(c);
}

// Closes every fd from `first` up except those in `keep` (negative entries are ignored).
void close_fds_except(int first, std::initializer_list<int> keep) {
    std::vector<int> kept;
    for (int fd : keep)
        if (fd >= first) kept.push_back(fd);
    std::sort(kept.begin(), kept.end());
    unsigned from = static_cast<unsigned>(first);
    for (int fd : kept) {
        if (static_cast<unsigned>(fd) > from) sys::close_range(from, static_cast<unsigned>(fd) - 1, 0);
        from = static_cast<unsigned>(fd) + 1;
    }
    sys::close_range(from, ~0U, 0);
}

struct ExecChild {
    const oci::Process* process = nullptr;
    int pidfd = -1;
    int ns_flags = 0;  // joined by the child itself
    std::vector<int> cgroup_task_fds;
    int root_fd = -1;  // the container's root when it has no mount namespace
    int sync_fd = -1;
    int console_fd = -1;
    int preserve_fds = 0;
    const SeccompProgram* seccomp = nullptr;
    std::optional<MemoryPolicyPlan> memory_policy;  // the container's, as init has it
    std::string keyring;  // empty: keep the caller's
    int exec_stub_fd = -1;   // make_exec_stub(): the final exec goes through it
    int exec_error_fd = -1;  // the stub writes a failed exec's errno here
    // Born outside the container's cgroup (attached by systemd): read "g" here first.
    int attach_gate_fd = -1;
};

Result<void> run_exec_child(ExecChild& a) {
    const oci::Process& proc = *a.process;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    reset_signal_dispositions();
    if (a.attach_gate_fd >= 0) {
        char go = 0;
        ssize_t n;
        do n = ::read(a.attach_gate_fd, &go, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1 || go != 'g') return fail(EACCES, "exec: not moved into the container's cgroup");
        ::close(a.attach_gate_fd);
    }

    FB_TRY(join_v1_cgroups(a.cgroup_task_fds));
    // Through the runtime's /proc, before the container's (see init).
    if (proc.oom_score_adj) FB_TRY(set_oom_score_adj(*proc.oom_score_adj));
    if (a.ns_flags && ::setns(a.pidfd, a.ns_flags) < 0) return sys_error("join the container's namespaces");
    if (a.root_fd >= 0 && (::fchdir(a.root_fd) < 0 || ::chroot(".") < 0)) return sys_error("enter container root");
    // Host fds (the state dir, cgroup files, the pidfd) have done their job: none may be
    // reachable through /proc/self/fd from here on. Keep the preserved range and our sockets.
    close_fds_except(3 + a.preserve_fds, {a.sync_fd, a.console_fd, a.exec_stub_fd, a.exec_error_fd});
    if (::setsid() < 0) return sys_error("setsid");
    if (!a.keyring.empty() && ::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, a.keyring.c_str()) < 0 &&
        errno != ENOSYS && errno != EACCES && errno != EPERM)
        return sys_error("join the container's session keyring");

    if (proc.terminal) FB_TRY(setup_console(a.console_fd, proc.console_size, proc.user.uid));
    FB_TRY(apply_rlimits(proc.rlimits));
    if (proc.scheduler) FB_TRY(set_scheduler(*proc.scheduler));
    if (proc.io_priority) FB_TRY(set_io_priority(*proc.io_priority));
    if (a.memory_policy) FB_TRY(set_memory_policy(*a.memory_policy));
    // In the container's cgroups now (execCPUAffinity.initial was ours before the clone).
    if (proc.exec_cpu_affinity && !proc.exec_cpu_affinity->final.empty())
        FB_TRY(set_cpu_affinity(proc.exec_cpu_affinity->final, "process.execCPUAffinity.final"));
    FB_TRY(enter_cwd(proc.cwd));
    // As in init: early without no_new_privs, or when the parent must pass on a listener.
    bool seccomp_early = a.seccomp && (!proc.no_new_privileges || a.seccomp->wants_listener());
    if (seccomp_early) FB_TRY(load_seccomp_via_parent(*a.seccomp, a.sync_fd));
    give_stdio_to(proc.user.uid, proc.user.gid);
    FB_TRY(assume_identity(proc));

    std::vector<std::string> env = with_home(proc.env, proc.user.uid);
    FB_ASSIGN(std::string exe, find_executable(proc.args[0], env));
    if (proc.no_new_privileges && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sys_error("prctl no_new_privs");
    std::vector<char*> argv, envp;
    for (const auto& s : proc.args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    for (const auto& s : env) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);
    ::prctl(PR_SET_PDEATHSIG, 0);
    sys::close_range(static_cast<unsigned>(3 + a.preserve_fds), ~0U, CLOSE_RANGE_CLOEXEC);
    if (a.seccomp && !seccomp_early) FB_TRY(load_seccomp(*a.seccomp));
    auto exec = exec_through_stub(a.exec_stub_fd, exe, argv.data(), envp.data(), a.seccomp, a.exec_error_fd);
    return fail(0, "exec: \"" + proc.args[0] + "\": " + go_errno_text(exec.error().errnum()));
}

[[noreturn]] void exec_child(ExecChild& a) {
    auto r = run_exec_child(a);
    (void)sync_send(a.sync_fd, SyncType::Error, r.error().errnum(), r.error().what());
    _exit(r.error().errnum() == 0 ? 127 : 1);
}

// The host's AppArmor / SELinux: forkbox applies neither, so asking for one is an error.
Result<void> refuse_security_labels(const oci::Process& p) {
    if (!p.apparmor_profile.empty())
        return fail(EOPNOTSUPP, "apparmor profile " + p.apparmor_profile + ": AppArmor is not supported by forkbox");
    if (!p.selinux_label.empty())
        return fail(EOPNOTSUPP, "process label " + p.selinux_label + ": SELinux is not supported by forkbox");
    return {};
}

}  // namespace

Result<oci::Process> exec_process(const oci::Process& base, const ExecOptions& o, std::string_view process_json) {
    oci::Process p;
    if (!o.process_file.empty()) {
        auto parsed = oci::parse_process_json(process_json);
        if (!parsed) return std::unexpected(parsed.error().wrap("process " + o.process_file));
        p = std::move(*parsed);
    } else {
        p = base;
        p.args = o.args;
        if (o.cwd) p.cwd = *o.cwd;
        p.env.insert(p.env.end(), o.env.begin(), o.env.end());
        p.terminal = o.tty.value_or(false);
        if (o.no_new_privs) p.no_new_privileges = true;
        if (o.user) {
            std::string_view u = *o.user;
            auto colon = u.find(':');
            FB_ASSIGN(p.user.uid, parse_id(u.substr(0, colon), "user"));
            if (colon != std::string_view::npos) {
                FB_ASSIGN(p.user.gid, parse_id(u.substr(colon + 1), "group"));
            }
        }
        if (!o.additional_gids.empty()) p.user.additional_gids = o.additional_gids;
        if (!o.caps.empty()) {
            if (!p.capabilities) p.capabilities.emplace();
            for (const auto& c : o.caps)
                if (!oci::capability_from_name(c)) return fail(EINVAL, "unknown capability " + c);
            add_caps(p.capabilities->bounding, o.caps);
            add_caps(p.capabilities->effective, o.caps);
            add_caps(p.capabilities->permitted, o.caps);
            add_caps(p.capabilities->ambient, o.caps);
        }
    }
    if (!o.apparmor.empty()) p.apparmor_profile = o.apparmor;
    if (!o.process_label.empty()) p.selinux_label = o.process_label;
    if (p.args.empty()) return fail(EINVAL, "exec: process args must not be empty");
    if (p.cwd.empty()) p.cwd = "/";
    if (p.cwd[0] != '/') return fail(EINVAL, "exec: cwd " + p.cwd + " is not an absolute path");
    return p;
}

namespace {
Result<int> exec_into(const StateStore& store, const ExecOptions& opt);
}  // namespace

Result<int> exec_container(const StateStore& store, const ExecOptions& opt) {
    auto r = exec_into(store, opt);
    int err = r ? 0 : r.error().errnum();
    if (r || (err != ESRCH && err != ENOENT && err != ENOMEM)) return r;
    // A kill or delete that raced the exec ("join the container's pid namespace: ESRCH",
    // "open cgroup .../tasks: ENOENT", "clone exec process: ENOMEM": the kernel's answer to
    // a clone into a pid namespace whose init has died after we joined it): said as runc
    // says it, when that is what happened; a real ENOMEM stays what it is.
    // An init in do_exit has lost its namespaces (ESRCH) before it is a zombie, for as long
    // as it waits for the rest of its pid namespace (an exec's child is reaped by its parent
    // outside): seen as exiting, it is a stopped container already. A state that can no
    // longer be read is a delete removing the directory.
    for (int i = 0; i < 50; ++i) {
        auto dir = store.open(opt.id, StateStore::Lock::None);
        if (!dir) return fail(ENOENT, "container " + opt.id + " does not exist");
        auto state = dir->read_state();
        if (!state) return fail(ENOENT, "container " + opt.id + " does not exist");
        if (derive_status(*state, dir->fifo_exists()) == Status::Stopped)
            return fail(ESRCH, "cannot exec in a stopped container");
        auto init = read_proc_stat(state->pid);
        if (init && init->start_time == state->pid_start_time && init->exiting())
            return fail(ESRCH, "cannot exec in a stopped container (its init is exiting)");
        ::usleep(2000);
    }
    return r;
}

namespace {
Result<int> exec_into(const StateStore& store, const ExecOptions& opt) {
    // No lock: an exec may run for as long as the container does, and must not block
    // kill, pause or delete meanwhile.
    FB_ASSIGN(ContainerDir dir, store.open(opt.id, StateStore::Lock::None));
    FB_ASSIGN(ContainerState state, dir.read_state());
    Status status = derive_status(state, dir.fifo_exists());
    if (status == Status::Stopped) return fail(EINVAL, "cannot exec in a stopped container");
    // With --ignore-paused the new process joins the frozen cgroups and starts once the
    // container is resumed; exec waits for it meanwhile, as runc does.
    if (status == Status::Paused && !opt.ignore_paused)
        return fail(EINVAL, "cannot exec in a paused container (use --ignore-paused)");
    trace::mark("exec: checked");
    FB_ASSIGN(std::string config_text, read_file_at(dir.fd(), kConfigFile));
    auto spec = oci::parse_config(config_text);
    if (!spec) return std::unexpected(spec.error().wrap("container config.json"));
    std::string process_json;
    if (opt.process_file == "-") {
        FB_ASSIGN(process_json, read_all(0, "stdin"));
    } else if (!opt.process_file.empty()) {
        FB_ASSIGN(process_json, read_file(opt.process_file));
    }
    FB_ASSIGN(oci::Process proc, exec_process(spec->process.value_or(oci::Process{}), opt, process_json));
    FB_TRY(refuse_security_labels(proc));
    FB_TRY(check_console_options(proc.terminal, opt.detach, opt.console_socket));

    std::optional<SeccompProgram> seccomp;
    if (spec->linux && spec->linux->seccomp) {
        auto member = oci::split_seccomp_member(config_text);
        auto program = compile_seccomp_cached(*spec->linux->seccomp, store.root(),
                                              member ? member->profile : std::string_view{});
        if (!program) return std::unexpected(program.error().wrap("seccomp"));
        seccomp = std::move(*program);
    }
    FB_ASSIGN(unique_fd pidfd, open_pidfd(state.pid, state.pid_start_time));
    int ns_flags = 0;
    if (spec->linux)
        for (const auto& ns : spec->linux->namespaces)
            if (auto kind = oci::namespace_kind(ns.type)) ns_flags |= kind->clone_flag;

    // The container's cgroups, one directory per hierarchy, in layout order.
    FB_ASSIGN(CgroupLayout layout, detect_cgroup_layout());
    unique_fd unified_dir;
    std::vector<unique_fd> task_files;
    std::string unified_sub_cgroup;  // under the container's, for systemd's attach below
    if (!opt.sub_cgroups.empty() && state.cgroup_dirs.empty())
        return fail(EINVAL, "--cgroup: the container has no cgroups of its own");
    if (state.cgroup_dirs.size() == layout.hierarchies.size()) {
        FB_ASSIGN(std::vector<std::string> dirs, exec_cgroup_dirs(layout, state.cgroup_dirs, opt.sub_cgroups));
        // A sub-cgroup must exist, as under runc: say so rather than "open ...: ENOENT".
        auto open_error = [&](const std::string& d, const std::string& path) {
            if (errno == ENOENT && !opt.sub_cgroups.empty()) return fail(ENOENT, "--cgroup: no cgroup " + d);
            return sys_error("open cgroup " + path);
        };
        for (size_t i = 0; i < layout.hierarchies.size(); ++i) {
            const std::string& d = dirs[i];
            if (d.empty()) continue;  // a hierarchy the container has no cgroup in (rootless)
            if (layout.hierarchies[i].unified) {
                unified_dir.reset(::open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
                if (!unified_dir) return open_error(d, d);
                unified_sub_cgroup = d.substr(state.cgroup_dirs[i].size());
            } else {
                unique_fd f(::open((d + "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
                if (!f) return open_error(d, d + "/tasks");
                task_files.push_back(std::move(f));
            }
        }
    } else if (!state.cgroup_dirs.empty()) {
        return fail(EINVAL, "the host's cgroup layout changed since the container was created");
    }
    unique_fd root_fd;
    if (!(ns_flags & CLONE_NEWNS)) {
        root_fd.reset(::open(("/proc/" + std::to_string(state.pid) + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!root_fd) return sys_error("open the container's root");
    }

    unique_fd pidfd_socket;
    if (!opt.pidfd_socket.empty()) {
        FB_ASSIGN(pidfd_socket, connect_unix_socket(opt.pidfd_socket, "pidfd socket"));
    }
    unique_fd console_fd, console_peer;
    if (proc.terminal && opt.detach) {
        FB_ASSIGN(console_fd, connect_console_socket(opt.console_socket));
    } else if (proc.terminal) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("console socketpair");
        console_fd.reset(sv[0]);
        console_peer.reset(sv[1]);
    }
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) return sys_error("socketpair");
    unique_fd parent_end(sp[0]), child_end(sp[1]);
    std::optional<ForwardedSignals> signals;
    if (!opt.detach) {
        auto blocked = ForwardedSignals::block();
        if (!blocked) return std::unexpected(blocked.error());
        signals.emplace(std::move(*blocked));
    }

    ExecChild child_args;
    child_args.process = &proc;
    child_args.pidfd = pidfd.get();
    // The pid (and time) namespace is joined here, for the child to be born in it. An
    // unprivileged caller may join it only from inside the container's user namespace,
    // which owns it: both at once through the pidfd, and the child joins the rest from
    // there. Non-dumpable, we stay out of reach of the container's root meanwhile.
    int parent_joins = ns_flags & kForChildren;
    if (parent_joins && ::geteuid() != 0 && (ns_flags & CLONE_NEWUSER)) parent_joins |= CLONE_NEWUSER;
    child_args.ns_flags = ns_flags & ~parent_joins;
    for (const auto& f : task_files) child_args.cgroup_task_fds.push_back(f.get());
    child_args.root_fd = root_fd.get();
    child_args.sync_fd = child_end.get();
    child_args.console_fd = console_fd.get();
    child_args.preserve_fds = opt.preserve_fds;
    if (seccomp) child_args.seccomp = &*seccomp;
    if (spec->linux && spec->linux->memory_policy) {
        FB_ASSIGN(child_args.memory_policy, memory_policy_plan(*spec->linux->memory_policy));
    }
    // Like init, never the caller's session keyring.
    child_args.keyring = "_ses." + opt.id;
    FB_ASSIGN(unique_fd exec_stub, make_exec_stub());
    child_args.exec_stub_fd = exec_stub.get();
    int ep[2];
    if (::pipe2(ep, O_CLOEXEC) < 0) return sys_error("exec error pipe");
    unique_fd exec_error(ep[0]), exec_error_child(ep[1]);
    child_args.exec_error_fd = exec_error_child.get();

    // Non-dumpable before anything of ours is visible inside: the child inherits it and
    // keeps it until execve.
    if (::prctl(PR_SET_DUMPABLE, 0) < 0) return sys_error("prctl dumpable");
    if (parent_joins && ::setns(pidfd.get(), parent_joins) < 0) return sys_error("join the container's pid namespace");
    // execCPUAffinity.initial: the CPUs the process runs on as it enters the container's
    // cgroups, which clone3 puts it in at birth; so ours, inherited (this thread only
    // waits from here on). `final` follows in the child, once in the cgroups.
    if (proc.exec_cpu_affinity && !proc.exec_cpu_affinity->initial.empty())
        FB_TRY(set_cpu_affinity(proc.exec_cpu_affinity->initial, "process.execCPUAffinity.initial"));
    std::fflush(nullptr);
    pid_t child = sys::clone3_fork(0, unified_dir.get());
    // A user's process outside the user's delegated subtree (a login shell's session scope is
    // root's) may not put a child into the container's cgroup; the user's systemd manager,
    // whose unit the container is, can: the child waits at a gate until it has.
    unique_fd gate_read, gate_write;
    if (child < 0 && errno == EACCES && unified_dir && !state.systemd_unit.empty() && rootless_mode().any()) {
        int gp[2];
        if (::pipe2(gp, O_CLOEXEC) < 0) return sys_error("exec attach pipe");
        gate_read.reset(gp[0]);
        gate_write.reset(gp[1]);
        child_args.attach_gate_fd = gate_read.get();
        child = sys::clone3_fork(0);
    }
    if (child < 0) return sys_error("clone exec process");
    if (child == 0) {
        parent_end.reset();
        gate_write.reset();
        exec_child(child_args);
    }
    ChildGuard guard(child);
    if (gate_write) {
        gate_read.reset();
        auto manager = systemd::Manager::connect();
        if (!manager) return std::unexpected(manager.error());
        FB_TRY(manager->attach_processes(state.systemd_unit, {static_cast<uint32_t>(child)}, unified_sub_cgroup));
        if (::write(gate_write.get(), "g", 1) != 1) return sys_error("exec attach gate");
        gate_write.reset();
    }
    child_end.reset();
    exec_error_child.reset();
    console_fd.reset();
    task_files.clear();

    // EOF: the child exec'd (its end was close-on-exec); a message: it failed. Two things
    // end the wait early: a signal that cancels (foreground), and, without --ignore-paused,
    // a pause that landed after our check, for the child then joined frozen cgroups and
    // would wait for the resume. The child acts on SIGKILL only once thawed, so it is killed
    // and left to its adopter.
    Freezer freezer;
    if (!opt.ignore_paused && !state.cgroup_dirs.empty())
        if (auto f = container_freezer(state.cgroup_dirs)) freezer = *f;
    auto give_up = [&](Error why) -> Result<SyncMessage> {
        ::kill(child, SIGKILL);
        guard.dismiss();
        return std::unexpected(std::move(why));
    };
    auto next_message = [&]() -> Result<SyncMessage> {
        for (;;) {
            int timeout_ms = freezer.kind == Freezer::Kind::None ? -1 : 50;
            Result<bool> ready = true;
            if (signals) {
                ready = signals->wait_readable(parent_end.get(), timeout_ms);
            } else {
                pollfd p{parent_end.get(), POLLIN, 0};
                int n = ::poll(&p, 1, timeout_ms);
                ready = n != 0;
            }
            if (!ready) return give_up(ready.error().wrap("exec before the process started"));
            if (*ready) return sync_recv(parent_end.get());
            if (auto thawed = cgroup_thawed(freezer); thawed && !*thawed)
                return give_up(Error(EINVAL, "cannot exec in a paused container (paused as the exec began)"));
        }
    };
    auto msg = next_message();
    // Notify rules: the child hands us its listener for the agent, then goes on.
    while (msg && msg->type == SyncType::SeccompListener && msg->fds.size() == 1 && spec->linux && spec->linux->seccomp) {
        const oci::Seccomp& sc = *spec->linux->seccomp;
        FB_TRY(hand_listener_to_agent(sc.listener_path, msg->fds[0].get(),
                                      container_process_state(state, "running", child, sc.listener_metadata)));
        FB_TRY(sync_send(parent_end.get(), SyncType::SeccompListenerDone));
        msg = next_message();
    }
    if (msg) {
        if (msg->type == SyncType::Error) return fail(msg->value, msg->payload);
        return fail(EPROTO, std::string("sync: unexpected message ") + sync_type_name(msg->type));
    }
    if (msg.error().errnum() != EPIPE) return std::unexpected(msg.error());
    // EOF on the sync socket: the stub runs. EOF here: it exec'd the program; else its errno.
    if (int err = 0; ::read(exec_error.get(), &err, sizeof err) == sizeof err)
        return fail(0, "exec: \"" + proc.args[0] + "\": " + go_errno_text(err));
    if (signals) signals->forward_held(child);
    if (!opt.pid_file.empty()) FB_TRY(write_pid_file(opt.pid_file, child));
    if (pidfd_socket) {
        FB_TRY(send_pidfd(pidfd_socket.get(), child, "setns"));
        pidfd_socket.reset();
    }
    if (opt.detach) {
        guard.dismiss();
        return 0;
    }
    unique_fd pty_master;
    if (console_peer) {
        FB_ASSIGN(pty_master, receive_console_master(console_peer.get()));
    }
    guard.dismiss();
    return supervise_foreground(child, *signals, pty_master.get());
}
}  // namespace

}  // namespace forkbox
