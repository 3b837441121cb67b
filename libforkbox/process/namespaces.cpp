#include "libforkbox/process/namespaces.hpp"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/signals.hpp"
#include "oci/linux_names.hpp"

namespace forkbox {


Result<std::vector<OpenNamespace>> open_namespaces(const std::vector<NamespaceJoin>& joins) {
    std::vector<OpenNamespace> out;
    for (const auto& j : joins) {
        OpenNamespace ns;
        ns.clone_flag = j.clone_flag;
        ns.path = j.path;
        ns.fd.reset(::open(j.path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!ns.fd) return sys_error("open " + j.type + " namespace " + j.path);
        int type = ::ioctl(ns.fd.get(), NS_GET_NSTYPE);
        if (type < 0) return sys_error(j.path + " is not a namespace");
        if (type != j.clone_flag)
            return fail(EINVAL, "namespace path " + j.path + " is not a " + j.type + " namespace");
        out.push_back(std::move(ns));
    }
    return out;
}

Result<void> join_namespaces(std::vector<OpenNamespace>& namespaces) {
    std::vector<OpenNamespace*> retry;
    OpenNamespace* user = nullptr;
    for (auto& ns : namespaces) {
        if (ns.clone_flag == CLONE_NEWUSER) {
            user = &ns;
            continue;
        }
        if (::setns(ns.fd.get(), ns.clone_flag) < 0) {
            if (errno != EPERM) return sys_error("join namespace " + ns.path);
            retry.push_back(&ns);
        }
    }
    if (user && ::setns(user->fd.get(), CLONE_NEWUSER) < 0) return sys_error("join user namespace " + user->path);
    for (auto* ns : retry)
        if (::setns(ns->fd.get(), ns->clone_flag) < 0) return sys_error("join namespace " + ns->path);
    for (auto& ns : namespaces) ns.fd.reset();
    return {};
}

std::string format_id_mappings(const std::vector<oci::IdMapping>& maps) {
    std::string out;
    char line[80];
    for (const auto& m : maps) {
        std::snprintf(line, sizeof line, "%u %u %u\n", m.container_id, m.host_id, m.size);
        out += line;
    }
    return out;
}

namespace {

// A single mapping of exactly this id: what an unprivileged user may write itself.
bool maps_only(const std::vector<oci::IdMapping>& maps, unsigned id) {
    return maps.size() == 1 && maps[0].host_id == id && maps[0].size == 1;
}

Result<std::string> find_in_path(const char* tool) {
    const char* path = std::getenv("PATH");
    std::string dirs = path && *path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    size_t start = 0;
    while (start <= dirs.size()) {
        size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        std::string candidate = dirs.substr(start, end - start) + "/" + tool;
        if (end > start && candidate[0] == '/' && ::access(candidate.c_str(), X_OK) == 0) return candidate;
        start = end + 1;
    }
    return fail(ENOENT, std::string(tool) + " not found (Debian package uidmap)");
}

// Runs `tool PID cid hid size...` with an empty environment (it is setuid root) and waits.
Result<void> run_id_map_tool(const std::string& tool, pid_t pid, const std::vector<oci::IdMapping>& maps) {
    std::vector<std::string> words{tool, std::to_string(pid)};
    for (const auto& m : maps) {
        words.push_back(std::to_string(m.container_id));
        words.push_back(std::to_string(m.host_id));
        words.push_back(std::to_string(m.size));
    }
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    pid_t child;
    if (int e = ::posix_spawn(&child, tool.c_str(), nullptr, nullptr, argv.data(), envp); e != 0)
        return sys_error(e, "run " + tool);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return sys_error("wait for " + tool);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string command;
        for (size_t i = 0; i < words.size() && command.size() < 200; ++i) command += (i ? " " : "") + words[i];
        return fail(EPERM, command + " failed: does /etc/sub" + (tool.ends_with("newuidmap") ? "uid" : "gid") +
                               " give this user that range?");
    }
    return {};
}

}  // namespace

Result<IdMapWriter> plan_id_map_writer(const std::vector<oci::IdMapping>& uids,
                                       const std::vector<oci::IdMapping>& gids, uid_t euid, gid_t egid) {
    IdMapWriter w;
    if (euid == 0) return w;
    if (!uids.empty() && !maps_only(uids, euid)) {
        auto tool = find_in_path("newuidmap");
        if (!tool) return std::unexpected(tool.error().wrap("mapping uids other than " + std::to_string(euid)));
        w.newuidmap = *tool;
    }
    if (!gids.empty() && !maps_only(gids, egid)) {
        auto tool = find_in_path("newgidmap");
        if (!tool) return std::unexpected(tool.error().wrap("mapping gids other than " + std::to_string(egid)));
        w.newgidmap = *tool;
    }
    w.deny_setgroups = !gids.empty() && w.newgidmap.empty();
    return w;
}

Result<void> write_id_mappings(pid_t pid, const std::vector<oci::IdMapping>& uids,
                               const std::vector<oci::IdMapping>& gids, const IdMapWriter& writer) {
    std::string base = "/proc/" + std::to_string(pid);
    if (!uids.empty()) {
        if (!writer.newuidmap.empty()) FB_TRY(run_id_map_tool(writer.newuidmap, pid, uids));
        else FB_TRY(write_file(base + "/uid_map", format_id_mappings(uids)));
    }
    if (!gids.empty()) {
        if (!writer.newgidmap.empty()) {
            FB_TRY(run_id_map_tool(writer.newgidmap, pid, gids));
        } else {
            if (writer.deny_setgroups) FB_TRY(write_file(base + "/setgroups", "deny"));
            FB_TRY(write_file(base + "/gid_map", format_id_mappings(gids)));
        }
    }
    return {};
}

namespace {
struct NamespaceOwnerArgs {
    int hold_read, hold_write;
};

// The owner of a user namespace made for its maps: it waits until the parent closes its end
// of the pipe (or dies), then goes. It shares the parent's memory (CLONE_VM) on a stack of
// its own, so only raw system calls: no errno, nothing of the parent's it could race with.
__attribute__((no_stack_protector)) int own_namespace(void* p) {
    const auto& a = *static_cast<const NamespaceOwnerArgs*>(p);
    sys::raw_syscall(SYS_close, a.hold_write);
    char c;
    long n;
    do n = sys::raw_syscall(SYS_read, a.hold_read, reinterpret_cast<long>(&c), 1);
    while (n == -EINTR);
    sys::raw_syscall(SYS_exit, 0);
    return 0;
}
}  // namespace

Result<unique_fd> new_user_namespace(const std::vector<oci::IdMapping>& uids, const std::vector<oci::IdMapping>& gids) {
    int hold[2];
    if (::pipe2(hold, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd hold_read(hold[0]), hold_write(hold[1]);
    // CLONE_VM: a fork would copy our page tables and tear them down again for a process
    // that only waits (~1 ms here). The stack outlives the owner: the guard below reaps it
    // first, on every path.
    constexpr size_t kStack = 16384;
    std::unique_ptr<char[]> stack(new char[kStack]);
    NamespaceOwnerArgs args{hold[0], hold[1]};
    auto* top = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(stack.get() + kStack) & ~uintptr_t{15});
    pid_t pid = clone_vm_signals_blocked(own_namespace, top, CLONE_NEWUSER | SIGCHLD, &args);
    if (pid < 0) return sys_error("clone a process into a new user namespace");
    ChildGuard owner(pid);
    hold_read.reset();
    FB_TRY(write_id_mappings(pid, uids, gids));
    unique_fd ns(::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) return sys_error("open the new user namespace");
    hold_write.reset();
    owner.dismiss();
    FB_TRY(wait_child(pid));
    return ns;
}

Result<void> enter_new_time_namespace(const std::vector<std::pair<std::string, oci::TimeOffset>>& offsets) {
    if (::unshare(CLONE_NEWTIME) < 0) return sys_error("unshare time namespace");
    // Offsets can only be written while no process lives in the namespace: write them
    // first, then enter it ourselves.
    std::string text;
    char line[96];
    for (const auto& [clock, off] : offsets) {
        std::snprintf(line, sizeof line, "%s %lld %u\n", clock.c_str(), static_cast<long long>(off.secs),
                      off.nanosecs);
        text += line;
    }
    if (!text.empty()) FB_TRY(write_file("/proc/self/timens_offsets", text));
    unique_fd ns(::open("/proc/self/ns/time_for_children", O_RDONLY | O_CLOEXEC));
    if (!ns) return sys_error("open time_for_children");
    if (::setns(ns.get(), CLONE_NEWTIME) < 0) return sys_error("enter time namespace");
    return {};
}

Result<NamespaceVisit> NamespaceVisit::enter(const std::vector<OpenNamespace>& namespaces) {
    NamespaceVisit v;
    for (const auto& ns : namespaces) {
        const auto* kind = oci::namespace_kind_by_flag(ns.clone_flag);
        if (!kind) return fail(EINVAL, "unknown namespace flag");
        OpenNamespace home;
        home.clone_flag = ns.clone_flag;
        home.path = "/proc/self/ns/" + std::string(kind->proc_name);
        home.fd.reset(::open(home.path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!home.fd) return sys_error("open " + home.path);
        v.home_.push_back(std::move(home));
    }
    for (const auto& ns : namespaces)
        if (::setns(ns.fd.get(), ns.clone_flag) < 0) return sys_error("enter " + ns.path);  // ~v restores
    return v;
}

NamespaceVisit::~NamespaceVisit() {
    for (const auto& ns : home_)
        if (ns.fd && ::setns(ns.fd.get(), ns.clone_flag) < 0) std::abort();  // never run on in a foreign namespace
}

Result<void> bring_up_loopback() {
    unique_fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) return sys_error("socket for loopback setup");
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, "lo", 3);
    if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) < 0) return sys_error("get lo flags");
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) < 0) return sys_error("set lo up");
    return {};
}

namespace {

// Whether the calling thread's network namespace belongs to its own user namespace, so
// that setns() back into it after a visit elsewhere is allowed.
Result<bool> network_namespace_is_owned_here() {
    unique_fd net(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!net) return sys_error("open /proc/thread-self/ns/net");
    unique_fd owner(::ioctl(net.get(), NS_GET_USERNS));
    if (!owner) {
        // EPERM: the owner is outside our user namespace altogether.
        if (errno == EPERM) return false;
        return sys_error("owner of the network namespace");
    }
    struct stat owner_st {}, ours {};
    if (::fstat(owner.get(), &owner_st) < 0) return sys_error("stat the network namespace's owner");
    if (::stat("/proc/thread-self/ns/user", &ours) < 0) return sys_error("stat /proc/thread-self/ns/user");
    return owner_st.st_dev == ours.st_dev && owner_st.st_ino == ours.st_ino;
}

}  // namespace

Result<std::optional<unique_fd>> move_thread_to_new_network_namespace() {
    FB_ASSIGN(bool home_is_ours, network_namespace_is_owned_here());
    if (!home_is_ours) return std::nullopt;
    if (::unshare(CLONE_NEWNET) < 0) return sys_error("unshare the container's network namespace");
    unique_fd fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open the new network namespace");
    FB_TRY(bring_up_loopback());
    return std::optional<unique_fd>(std::move(fd));
}

Result<void> set_hostname(const std::string& name) {
    if (::sethostname(name.data(), name.size()) < 0) return sys_error("sethostname " + name);
    return {};
}

Result<void> set_domainname(const std::string& name) {
    if (::setdomainname(name.data(), name.size()) < 0) return sys_error("setdomainname " + name);
    return {};
}

namespace {
bool on_procfs(int fd) {
    struct statfs fs;
    return ::fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

// /proc/sys of a procfs instance of our own (a detached mount: nothing in the container's
// mount table, a shared volume another container can change included, can redirect a write
// through it), else the container's, checked to be procfs.
Result<unique_fd> open_proc_sys() {
    unique_fd proc;
    unique_fd fs(::fsopen("proc", FSOPEN_CLOEXEC));
    if (fs && ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0)
        proc.reset(::fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
    unique_fd sys(proc ? ::openat(proc.get(), "sys", O_PATH | O_DIRECTORY | O_CLOEXEC)
                       : ::open("/proc/sys", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!sys) return sys_error("open /proc/sys");
    if (!on_procfs(sys.get())) return fail(EPERM, "/proc/sys is not on procfs: refusing to write sysctls there");
    return sys;
}
}  // namespace

// Each file is reached from /proc/sys without a symlink or a mount crossed: the
// CVE-2025-52881 class, where a write meant for a harmless file (a sysctl, an LSM label) was
// redirected to another (core_pattern) by what a container had put in its /proc.
Result<void> apply_sysctls(const std::vector<std::pair<std::string, std::string>>& sysctls) {
    if (sysctls.empty()) return {};
    FB_ASSIGN(unique_fd sys, open_proc_sys());
    for (const auto& [key, value] : sysctls) {
        std::string rel;
        for (char c : key) rel += (c == '.') ? '/' : c;
        int fd;
        do {
            fd = sys::openat2(sys.get(), rel.c_str(), O_WRONLY | O_CLOEXEC, 0,
                              RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
        } while (fd < 0 && errno == EAGAIN);
        if (fd < 0) return sys_error("sysctl " + key + ": open /proc/sys/" + rel);
        unique_fd file(fd);
        if (!on_procfs(file.get())) return fail(EPERM, "sysctl " + key + ": /proc/sys/" + rel + " is not on procfs");
        ssize_t n;
        do {
            n = ::write(file.get(), value.data(), value.size());
        } while (n < 0 && errno == EINTR);
        if (n < 0) return sys_error("sysctl " + key + ": write " + value);
        if (static_cast<size_t>(n) != value.size()) return fail(EIO, "sysctl " + key + ": short write");
    }
    return {};
}

}  // namespace forkbox
