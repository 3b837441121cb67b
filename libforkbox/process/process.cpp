#include "libforkbox/process/process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdio>
#include <string_view>
#include <cstring>

#include "libforkbox/process/caps.hpp"
#include "oci/linux_names.hpp"

namespace forkbox {

std::string go_errno_text(int err) {
    std::string s = std::strerror(err);
    // Go lowercases the first letter unless the word is an acronym ("RFS specific error").
    if (s.size() > 1 && std::islower(static_cast<unsigned char>(s[1])))
        s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
    return s;
}

std::vector<std::string> with_home(const std::vector<std::string>& env, uint32_t uid) {
    for (const auto& e : env)
        if (e.starts_with("HOME=")) return env;
    std::string home = "/";
    // /etc/passwd of the container (we are past pivot_root): name:pw:uid:gid:gecos:home:shell
    // Non-blocking open and a regular-file check: the image controls this path, and a FIFO
    // there must not hang init.
    int fd = ::open("/etc/passwd", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    FILE* f = nullptr;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) f = ::fdopen(fd, "r");
    if (!f && fd >= 0) ::close(fd);
    if (f) {
        char line[1024];
        while (std::fgets(line, sizeof line, f)) {
            std::string_view l(line);
            size_t field = 0, start = 0;
            std::string_view parts[7];
            for (size_t i = 0; i <= l.size() && field < 7; ++i) {
                if (i == l.size() || l[i] == ':' || l[i] == '\n') {
                    parts[field++] = l.substr(start, i - start);
                    start = i + 1;
                }
            }
            if (field >= 6 && parts[2] == std::to_string(uid) && !parts[5].empty()) {
                home = std::string(parts[5]);
                break;
            }
        }
        std::fclose(f);
    }
    std::vector<std::string> out = env;
    out.push_back("HOME=" + home);
    return out;
}

Result<void> set_credentials(const oci::User& user) {
    std::vector<gid_t> groups(user.additional_gids.begin(), user.additional_gids.end());
    // The raw calls: glibc's would change every thread's credentials, signalling threads a
    // child on shared memory (vfork_helper.hpp) believes it has.
    if (::syscall(SYS_setgroups, groups.size(), groups.data()) < 0) {
        // A user namespace whose setgroups is "deny" cannot change groups at all.
        if (errno != EPERM || !groups.empty()) return sys_error("setgroups");
    }
    if (::syscall(SYS_setresgid, user.gid, user.gid, user.gid) < 0) return sys_error("setgid " + std::to_string(user.gid));
    if (::syscall(SYS_setresuid, user.uid, user.uid, user.uid) < 0) return sys_error("setuid " + std::to_string(user.uid));
    return {};
}

Result<void> assume_identity(const oci::Process& proc) {
    CapabilitySets caps;
    if (proc.capabilities) {
        FB_ASSIGN(caps, capability_sets(*proc.capabilities));
    }
    FB_TRY(drop_bounding_set(caps.bounding));
    // Keep permitted capabilities across the uid change; apply_capabilities sets them.
    if (::prctl(PR_SET_KEEPCAPS, 1) < 0) return sys_error("prctl keepcaps");
    FB_TRY(set_credentials(proc.user));
    if (::prctl(PR_SET_KEEPCAPS, 0) < 0) return sys_error("prctl keepcaps");
    FB_TRY(apply_capabilities(caps));
    ::umask(proc.user.umask.value_or(022));
    return {};
}

Result<void> enter_cwd(const std::string& cwd) {
    if (::chdir(cwd.c_str()) < 0) return sys_error("chdir to cwd " + cwd);
    // getcwd fails with ENOENT when the cwd is not reachable from our root.
    char buf[PATH_MAX];
    const char* got = ::getcwd(buf, sizeof buf);
    if ((!got && errno == ENOENT) || (got && got[0] != '/'))
        return fail(EPERM, "cwd " + cwd + " is outside the container's root");
    return {};
}

void give_stdio_to(uid_t uid, gid_t gid) {
    for (int fd = 0; fd <= 2; ++fd) {
        struct stat st;
        if (::fstat(fd, &st) < 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) continue;
        if (st.st_uid == uid && st.st_gid == gid) continue;
        (void)::fchown(fd, uid, gid);  // best effort: EPERM in a user namespace is fine
    }
}

Result<void> become_namespace_root() {
    if (::syscall(SYS_setresgid, 0, 0, 0) < 0) return sys_error("setgid 0 in user namespace");
    if (::syscall(SYS_setresuid, 0, 0, 0) < 0) return sys_error("setuid 0 in user namespace");
    return {};
}

Result<void> apply_rlimits(const std::vector<oci::Rlimit>& rlimits) {
    for (const auto& r : rlimits) {
        auto res = oci::rlimit_from_name(r.type);
        if (!res) return fail(EINVAL, "unknown rlimit " + r.type);
        struct rlimit lim {static_cast<rlim_t>(r.soft), static_cast<rlim_t>(r.hard)};
        if (::setrlimit(static_cast<__rlimit_resource>(*res), &lim) < 0) return sys_error("setrlimit " + r.type);
    }
    return {};
}

Result<void> set_oom_score_adj(int value) {
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return sys_error("open /proc/self/oom_score_adj");
    std::string text = std::to_string(value);
    ssize_t n = ::write(fd, text.data(), text.size());
    int e = errno;
    ::close(fd);
    if (n < 0) return sys_error(e, "set oom_score_adj to " + text);
    return {};
}

Result<void> set_scheduler(const oci::Scheduler& scheduler) {
    SchedulerAttr a = scheduler_attr(scheduler);
    // struct sched_attr, SCHED_ATTR_SIZE_VER0 (no utilization clamps: the spec has none).
    struct {
        uint32_t size, sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime, sched_deadline, sched_period;
    } attr{48, a.policy, a.flags, a.nice, a.priority, a.runtime, a.deadline, a.period};
    static_assert(sizeof attr == 48);
    if (::syscall(SYS_sched_setattr, 0, &attr, 0) < 0) return sys_error("process.scheduler: sched_setattr " + scheduler.policy);
    return {};
}

Result<void> set_io_priority(const oci::IoPriority& io) {
    constexpr int kWhoProcess = 1;  // IOPRIO_WHO_PROCESS
    if (::syscall(SYS_ioprio_set, kWhoProcess, 0, io_priority_value(io)) < 0)
        return sys_error("process.ioPriority: ioprio_set " + io.klass + " " + std::to_string(io.priority));
    return {};
}

Result<void> set_cpu_affinity(const std::string& cpus, std::string_view what) {
    FB_ASSIGN(std::vector<uint64_t> mask, parse_id_list(cpus, what));
    cpu_set_t set;
    CPU_ZERO(&set);
    for (size_t cpu = 0; cpu < mask.size() * 64 && cpu < CPU_SETSIZE; ++cpu)
        if (mask[cpu / 64] >> (cpu % 64) & 1) CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) < 0) return sys_error(std::string(what) + ": sched_setaffinity " + cpus);
    return {};
}

Result<void> set_memory_policy(const MemoryPolicyPlan& policy) {
    // maxnode counts one more than the bits given, as numactl passes it.
    unsigned long maxnode = policy.nodes.empty() ? 0 : policy.nodes.size() * 64 + 1;
    if (::syscall(SYS_set_mempolicy, policy.mode, policy.nodes.empty() ? nullptr : policy.nodes.data(), maxnode) < 0)
        return sys_error("linux.memoryPolicy: set_mempolicy");
    return {};
}

Result<void> set_personality(unsigned long persona) {
    if (::personality(persona) < 0) return sys_error("personality " + std::to_string(persona));
    return {};
}

namespace {
bool is_executable_file(const std::string& path, int* err) {
    struct stat st;
    if (::stat(path.c_str(), &st) < 0) {
        *err = errno;
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        *err = EACCES;
        return false;
    }
    if (::access(path.c_str(), X_OK) < 0) {
        *err = errno;
        return false;
    }
    return true;
}
}  // namespace

Result<std::string> find_executable(const std::string& name, const std::vector<std::string>& env) {
    int err = 0;
    if (name.empty()) return fail(EINVAL, "exec: empty command");
    if (name.find('/') != std::string::npos) {
        if (is_executable_file(name, &err)) return name;
        return fail(0, "exec: \"" + name + "\": stat " + name + ": " + go_errno_text(err));
    }
    std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (const auto& e : env)
        if (e.starts_with("PATH=")) path = e.substr(5);
    size_t i = 0;
    bool denied = false;
    while (i <= path.size()) {
        size_t j = path.find(':', i);
        if (j == std::string::npos) j = path.size();
        std::string dir = path.substr(i, j - i);
        if (dir.empty()) dir = ".";
        std::string candidate = dir + "/" + name;
        if (is_executable_file(candidate, &err)) return candidate;
        if (err == EACCES) denied = true;
        i = j + 1;
    }
    if (denied) return fail(0, "exec: \"" + name + "\": permission denied");
    return fail(0, "exec: \"" + name + "\": executable file not found in $PATH");
}

}  // namespace forkbox
