#include "libforkbox/sandbox/builder.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <vector>

#include "libforkbox/base/log.hpp"
#include "libforkbox/base/prefault.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/process/signals.hpp"
#include "libforkbox/sandbox/embryo.hpp"

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

namespace forkbox::sandbox {

namespace {

// In a new embryo: every fd but `keep` (and stdio, and FORKBOX_TRACE's file, close-on-exec)
// is closed, so a sandbox holds nothing of another's while it waits.
void close_other_fds(std::vector<int> keep) {
    keep.insert(keep.end(), {0, 1, 2, trace::fd()});
    std::sort(keep.begin(), keep.end());
    unsigned next = 0;
    for (int fd : keep) {
        if (fd < 0) continue;
        if (static_cast<unsigned>(fd) > next) sys::close_range(next, static_cast<unsigned>(fd) - 1, 0);
        next = std::max(next, static_cast<unsigned>(fd) + 1);
    }
    sys::close_range(next, ~0U, 0);
}

class Builder {
public:
    Builder(const BuilderConfig& c, int sock) : c_(c), sock_(sock) {}
    [[noreturn]] void serve();

private:
    struct Built {
        pid_t pid = -1;
        unique_fd pidfd, control;
        std::string lower;
        unique_fd held_lower;  // a held embryo's lower layer, for the service to send with "M"
    };
    Result<const Plan*> plan_for(const SandboxKind& kind);
    struct MemberTrees {
        std::vector<unique_fd> binds;
        unique_fd lower;  // its chosen root, if any
    };
    Result<MemberTrees> open_as_member(const Plan& plan, const SandboxKind& kind);
    Result<Built> build(uint64_t id, const SandboxKind& kind, int fork_source, bool hold);
    Result<void> parent_side(pid_t pid, const SandboxKind& kind, const Plan& plan, std::vector<unique_fd>& bind_trees,
                             unique_fd member_lower, int control, int fork_source, Built& built, bool hold);

    const BuilderConfig& c_;
    int sock_;
    std::map<SandboxKind, Plan> plans_;
    bool idmapped_lower_ = true;  // until it fails once
};

// A group member's binds and chosen root: looked up and cloned with the member's own
// rights, then idmapped so that what the member owns is the sandbox root's (uid and gid 0
// inside), its groups' files keep their groups (member_groups_inside: the sandbox's
// processes hold them), and everything else belongs to no one the sandbox knows: its root
// reaches those files only as others may, never with a capability.
Result<Builder::MemberTrees> Builder::open_as_member(const Plan& plan, const SandboxKind& kind) {
    const HostIdentity& member = *kind.member;
    MemberTrees trees;
    {
        FB_ASSIGN(auto as_member, BorrowedFsIdentity::borrow(member));
        FB_ASSIGN(trees.binds, open_bind_sources_no_magic_links(plan));
        if (!kind.rootfs.empty()) {
            unique_fd root(sys::openat2(AT_FDCWD, kind.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                                        RESOLVE_NO_MAGICLINKS));
            if (!root) return sys_error("open the sandbox root " + kind.rootfs);
            trees.lower.reset(static_cast<int>(
                ::syscall(SYS_open_tree, root.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
            if (!trees.lower) return sys_error("open_tree " + kind.rootfs);
        }
    }
    std::vector<oci::IdMapping> gids = {oci::IdMapping{member.gid, c_.options.uid_base, 1}};
    for (gid_t g : member_groups_inside(member)) gids.push_back(oci::IdMapping{g, c_.options.uid_base + g, 1});
    FB_ASSIGN(unique_fd userns, new_user_namespace({oci::IdMapping{member.uid, c_.options.uid_base, 1}}, gids));
    for (size_t i = 0; i < trees.binds.size(); ++i)
        if (trees.binds[i]) FB_TRY(idmap_tree(trees.binds[i].get(), userns.get(), true, plan.mounts[i].source));
    if (trees.lower) FB_TRY(idmap_tree(trees.lower.get(), userns.get(), false, kind.rootfs));
    return trees;
}

Result<const Plan*> Builder::plan_for(const SandboxKind& kind) {
    if (auto it = plans_.find(kind); it != plans_.end()) return &it->second;
    if (plans_.size() > 64) plans_.clear();  // kinds with binds come and go: a bound
    FB_ASSIGN(Plan plan, sandbox_plan(kind, profile_options(c_.options, c_.mapped_range)));
    return &plans_.emplace(kind, std::move(plan)).first->second;
}

Result<Builder::Built> Builder::build(uint64_t id, const SandboxKind& kind, int fork_source, bool hold) {
    FB_ASSIGN(const Plan* plan, plan_for(kind));
    std::vector<unique_fd> task_fds;
    int cgroup_fd = -1;
    CgroupPlacement cgroups;
    if (c_.limits.cgroups) {
        FB_ASSIGN(cgroups, create_cgroups(c_.layout, embryo_cgroup_path(c_.cgroup_parent, ::getppid(), id)));
        FB_ASSIGN(auto writes, plan_cgroup_writes(cgroup_limits(c_.limits, c_.options.defaults.memory_mb, c_.options.defaults.pids, 0), c_.layout));
        FB_TRY_CTX(apply_cgroup_writes(writes, c_.layout, cgroups.dirs()), "sandbox cgroup limits");
        FB_ASSIGN(task_fds, cgroups.open_v1_task_files(c_.layout));
        cgroup_fd = cgroups.unified_fd();
    }
    std::vector<unique_fd> bind_trees;
    unique_fd member_lower;
    if (kind.member) {
        FB_ASSIGN(MemberTrees trees, open_as_member(*plan, kind));
        bind_trees = std::move(trees.binds);
        member_lower = std::move(trees.lower);
    } else if (!kind.mounts.empty()) {
        FB_ASSIGN(bind_trees, open_bind_sources(*plan));
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
    unique_fd ours(sv[0]), theirs(sv[1]);
    int pidfd = -1;
    // CLONE_PARENT: the service's child, not ours.
    pid_t pid = sys::clone3_fork(CLONE_PARENT | CLONE_NEWUSER | CLONE_NEWPID, cgroup_fd, &pidfd);
    if (pid < 0 && (errno == ENOSYS || errno == EPERM))
        // Docker's default seccomp profile answers clone3 with ENOSYS and refuses new user
        // namespaces without CAP_SYS_ADMIN (README, "Inside a container").
        return sys_error("clone the sandbox's user and pid namespaces (a seccomp filter, as a container engine's "
                         "default profile, may refuse clone3 or user namespaces: run the container with a profile "
                         "that allows them, e.g. --security-opt seccomp=unconfined)");
    if (pid < 0) return sys_error("clone the sandbox");
    if (pid == 0) {
        if (prefault::pays()) prefault::populate_text();
        EmbryoSetup s;
        s.plan = plan;
        s.cgroup_layout = &c_.layout;
        s.seccomp = &c_.seccomp;
        s.control_fd = theirs.get();
        s.stage = c_.options.stage_dir;
        s.upper_size_mb = c_.options.upper_size_mb;
        s.warm_shell = c_.options.warm_shell;
        s.mapped_range = c_.mapped_range;
        s.kind = &kind;
        for (auto& fd : task_fds) s.cgroup_task_fds.push_back(fd.get());
        for (auto& fd : bind_trees) s.bind_source_trees.push_back(fd.valid() ? fd.get() : -1);
        std::vector<int> keep = s.cgroup_task_fds;
        keep.push_back(s.control_fd);
        for (int fd : s.bind_source_trees) keep.push_back(fd);
        close_other_fds(keep);
        embryo_main(s);
    }
    cgroups.commit();  // the service removes them ("D") once the sandbox is gone
    Built b;
    b.pid = pid;
    b.pidfd.reset(pidfd);
    theirs.reset();
    task_fds.clear();
    if (auto r = parent_side(pid, kind, *plan, bind_trees, std::move(member_lower), ours.get(), fork_source, b, hold);
        !r) {
        sys::pidfd_send_signal(pidfd, SIGKILL);
        return std::unexpected(r.error());
    }
    b.control = std::move(ours);
    return b;
}

// Once the child exists: its id maps ("P": it makes its namespaces meanwhile), an idmapped
// lower layer (root), then "M", unless it is held.
Result<void> Builder::parent_side(pid_t pid, const SandboxKind& kind, const Plan& plan,
                                  std::vector<unique_fd>& bind_trees, unique_fd member_lower, int control,
                                  int fork_source, Built& built, bool hold) {
    std::string& lower_kind = built.lower;
    std::string proc = "/proc/" + std::to_string(pid);
    // A root daemon's private range, or a user's own ids (setgroups denied first).
    std::vector<oci::IdMapping> uids = {c_.mapped_range ? oci::IdMapping{0, c_.options.uid_base, 65536}
                                                        : oci::IdMapping{0, static_cast<uint32_t>(::geteuid()), 1}};
    std::vector<oci::IdMapping> gids = {c_.mapped_range ? oci::IdMapping{0, c_.options.uid_base, 65536}
                                                        : oci::IdMapping{0, static_cast<uint32_t>(::getegid()), 1}};
    FB_ASSIGN(IdMapWriter writer, plan_id_map_writer(uids, gids, ::geteuid(), ::getegid()));
    FB_TRY(write_id_mappings(pid, uids, gids, writer));
    if (::send(control, "P", 1, MSG_NOSIGNAL) < 0) return sys_error("sandbox embryo: say its id maps are written");
    // A root daemon's lower layer: a copy of "/" alone (not its submounts), made here where
    // nothing is locked, idmapped so that the host's root-owned files are the sandbox root's
    // (not for a peer other than the daemon's user: SandboxKind::unmapped_lower). A user's
    // embryo builds its root itself (embryo_root.cpp).
    unique_fd lower;
    lower_kind = "none";
    if (c_.daemon_lower && member_lower) {  // open_as_member's, idmapped already
        lower = std::move(member_lower);
        mount_attr attr{};
        attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        if (::syscall(SYS_mount_setattr, lower.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
            return sys_error("make the sandbox root " + kind.rootfs + " read-only");
        lower_kind = "member's";
    } else if (c_.daemon_lower) {
        unique_fd userns(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
        std::string root = kind.rootfs.empty() ? "/" : kind.rootfs;
        lower.reset(static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, root.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
        if (!lower) return sys_error("open_tree " + root);
        mount_attr attr{};
        attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        bool idmap = idmapped_lower_ && !kind.unmapped_lower;
        if (idmap && userns) {
            attr.attr_set |= MOUNT_ATTR_IDMAP;
            attr.userns_fd = static_cast<uint64_t>(userns.get());
            if (::syscall(SYS_mount_setattr, lower.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
                log::warn("sandbox: no idmapped lower layer (mount_setattr: " + std::string(std::strerror(errno)) +
                          "): the sandbox's root cannot write the host's system files");
                idmapped_lower_ = idmap = false;
                attr.attr_set &= ~static_cast<uint64_t>(MOUNT_ATTR_IDMAP);
            }
        }
        if (!idmap) ::syscall(SYS_mount_setattr, lower.get(), "", AT_EMPTY_PATH, &attr, sizeof attr);
        lower_kind = idmap ? "idmapped" : kind.unmapped_lower ? "unmapped" : "plain";
        // Binds too: host root's files are the sandbox root's there.
        for (size_t i = 0; i < bind_trees.size() && i < plan.mounts.size() && userns && idmap; ++i)
            if (bind_trees[i]) (void)idmap_tree(bind_trees[i].get(), userns.get(), true, plan.mounts[i].source);
    }
    if (hold) {
        built.held_lower = std::move(lower);
        return {};
    }
    std::string m = "M";
    std::vector<int> fds;
    if (lower) {
        m += "L";
        fds.push_back(lower.get());
    }
    if (fork_source >= 0) {
        m += "F";
        fds.push_back(fork_source);
    }
    return send_with_fds(control, m, fds, "sandbox embryo");
}

void Builder::serve() {
    std::string buf = receive_buffer(kReleaseBufferBytes);
    for (;;) {
        // "D": a finished sandbox's mount namespace, dropped here; "B": a fork's parent stage.
        std::vector<unique_fd> fds;
        auto n = receive_message(sock_, buf, fds, "sandbox builder");
        if (!n || *n == 0) ::_exit(0);  // the service is gone
        std::string_view m(buf.data(), *n);
        if (m.front() == 'D') {
            std::vector<std::string> dirs;
            m.remove_prefix(1);
            while (!m.empty()) {
                size_t end = m.find('\0');
                dirs.emplace_back(m.substr(0, end));
                m.remove_prefix(end == std::string_view::npos ? m.size() : end + 1);
            }
            (void)remove_cgroups(dirs);
            continue;
        }
        if (m.front() != 'B' && m.front() != 'H') continue;
        bool hold = m.front() == 'H';
        size_t nl = m.find('\n');
        uint64_t id = std::strtoull(std::string(m.substr(1, nl - 1)).c_str(), nullptr, 10);
        auto kind = nl == std::string_view::npos ? Result<SandboxKind>(std::unexpected(Error(EPROTO, "no kind")))
                                                 : decode_kind(m.substr(nl + 1));
        int fork_source = fds.empty() ? -1 : fds[0].get();
        auto built = kind ? build(id, *kind, hold ? -1 : fork_source, hold) : Result<Built>(std::unexpected(kind.error()));
        if (!built) {
            std::string reply = "F" + std::to_string(id) + " " + built.error().what();
            ::send(sock_, reply.data(), reply.size(), MSG_NOSIGNAL);
            continue;
        }
        std::string reply = "E" + std::to_string(id) + " " + std::to_string(built->pid) + " " + built->lower;
        std::vector<int> reply_fds = {built->pidfd.get(), built->control.get()};
        if (built->held_lower) reply_fds.push_back(built->held_lower.get());
        if (!send_with_fds(sock_, reply, reply_fds, "sandbox builder")) ::_exit(0);
    }
}

}  // namespace

std::string embryo_cgroup_path(const std::string& parent, pid_t service_pid, uint64_t id) {
    return parent + "/" + std::to_string(service_pid) + "-" + std::to_string(id);
}

// "<network 0|1><python 0|1><unmapped lower 0|1>", the rootfs and a NUL, member ("" or
// "uid gid group...") and a NUL, then the mounts' source, destination, mode, NUL-separated,
// then "\n" and the preloaded modules, NUL-separated.
std::string encode_kind(const SandboxKind& kind) {
    std::string out;
    out.push_back(kind.network ? '1' : '0');
    out.push_back(kind.python ? '1' : '0');
    out.push_back(kind.unmapped_lower ? '1' : '0');
    out.append(kind.rootfs);
    out.push_back('\0');
    if (kind.member) {
        out.append(std::to_string(kind.member->uid) + " " + std::to_string(kind.member->gid));
        for (gid_t g : kind.member->groups) out.append(" " + std::to_string(g));
    }
    out.push_back('\0');
    for (const auto& m : kind.mounts) {
        for (std::string_view s : {std::string_view(m.source), std::string_view(m.destination),
                                   std::string_view(m.writable ? "rw" : "ro")}) {
            out.append(s);
            out.push_back('\0');
        }
    }
    out.push_back('\n');
    for (const auto& p : kind.preload) {
        out.append(p);
        out.push_back('\0');
    }
    return out;
}

Result<SandboxKind> decode_kind(std::string_view data) {
    if (data.size() < 4 || std::any_of(data.begin(), data.begin() + 3, [](char c) { return c != '0' && c != '1'; }))
        return fail(EPROTO, "sandbox kind: bad flags");
    SandboxKind k;
    k.network = data[0] == '1';
    k.python = data[1] == '1';
    k.unmapped_lower = data[2] == '1';
    data.remove_prefix(3);
    size_t rootfs_end = data.find('\0');
    if (rootfs_end == std::string_view::npos) return fail(EPROTO, "sandbox kind: truncated rootfs");
    k.rootfs = data.substr(0, rootfs_end);
    data.remove_prefix(rootfs_end + 1);
    size_t ids_end = data.find('\0');
    if (ids_end == std::string_view::npos) return fail(EPROTO, "sandbox kind: truncated member");
    if (ids_end > 0) {
        std::vector<unsigned long> ids;
        std::string text(data.substr(0, ids_end));
        for (const char* p = text.c_str();; ++p) {
            char* end;
            errno = 0;
            unsigned long id = std::isdigit(static_cast<unsigned char>(*p)) ? std::strtoul(p, &end, 10) : ~0UL;
            if (id > 0xfffffffeUL || errno || (*end && *end != ' ')) return fail(EPROTO, "sandbox kind: bad member");
            ids.push_back(id);
            if (!*end) break;
            p = end;
        }
        if (ids.size() < 2) return fail(EPROTO, "sandbox kind: bad member");
        k.member = HostIdentity{static_cast<uid_t>(ids[0]), static_cast<gid_t>(ids[1]), {}};
        for (size_t i = 2; i < ids.size(); ++i) k.member->groups.push_back(static_cast<gid_t>(ids[i]));
    }
    data.remove_prefix(ids_end + 1);
    // Paths hold no NUL, and a module name no newline: the mounts end at the first "\n"
    // that starts a field.
    std::vector<std::string> fields;
    while (!data.empty() && data.front() != '\n') {
        size_t end = data.find('\0');
        if (end == std::string_view::npos) return fail(EPROTO, "sandbox kind: truncated");
        fields.emplace_back(data.substr(0, end));
        data.remove_prefix(end + 1);
    }
    if (data.empty()) return fail(EPROTO, "sandbox kind: truncated");
    data.remove_prefix(1);
    if (fields.size() % 3 != 0) return fail(EPROTO, "sandbox kind: mounts come in threes");
    for (size_t i = 0; i < fields.size(); i += 3)
        k.mounts.push_back(BindRequest{fields[i], fields[i + 1], fields[i + 2] == "rw"});
    while (!data.empty()) {
        size_t end = data.find('\0');
        if (end == std::string_view::npos) return fail(EPROTO, "sandbox kind: truncated preload");
        k.preload.emplace_back(data.substr(0, end));
        data.remove_prefix(end + 1);
    }
    return k;
}

ProfileOptions profile_options(const ServerOptions& opt, bool mapped_range) {
    ProfileOptions o;
    o.root = opt.stage_dir + "/root";
    o.host_is_mapped_root = mapped_range;
    // The daemon's socket directory, when it is not under a path hidden anyway.
    std::string dir = opt.socket_path.substr(0, opt.socket_path.find_last_of('/'));
    bool hidden = false;
    for (const char* h : {"/run/", "/root/", "/home/", "/tmp/", "/proc/", "/sys/", "/dev/"})
        hidden |= (dir + "/").starts_with(h);
    if (!hidden && !dir.empty()) o.hidden.push_back(dir);
    return o;
}

Result<unique_fd> start_builder(const BuilderConfig& config, unique_fd& pidfd) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("socketpair");
    unique_fd ours(sv[0]), theirs(sv[1]);
    pid_t pid = ::fork();
    if (pid < 0) return sys_error("fork the sandbox builder");
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        // A session of its own, which every sandbox inherits: none may reach the terminal the
        // daemon was started from (/dev/tty, then TIOCSTI types into the user's shell:
        // bubblewrap's CVE-2017-5226).
        if (::setsid() < 0) ::_exit(127);
        close_other_fds({theirs.get()});
        // Once for every sandbox, which inherits them: what the daemon's caller ignored
        // (nohup's SIGHUP, a runner's SIGPIPE) must not reach a command, and 64 sigactions
        // in each embryo cost ~0.1 ms of its build here. Nothing in the builder sets one.
        reset_signal_dispositions();
        Builder b(config, theirs.get());
        b.serve();
    }
    pidfd.reset(sys::pidfd_open(pid));
    if (!pidfd) return sys_error("pidfd of the sandbox builder");
    return ours;
}

}  // namespace forkbox::sandbox
