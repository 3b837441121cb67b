// The container process's own attributes: credentials, rlimits, oom score, the executable.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/plan/plan.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// setgroups, setresgid, setresuid from process.user.
Result<void> set_credentials(const oci::User& user);

// The process's capabilities and credentials, in the order that works: bounding set,
// uid/gid change keeping permitted caps, then effective/permitted/inheritable/ambient;
// then the umask. No process.capabilities means none at all, as in runc.
Result<void> assume_identity(const oci::Process& process);
// chdir to the process's cwd, then checks the result is inside the root: a cwd reached
// through a leaked host fd (/proc/self/fd/N, CVE-2024-21626) is outside it.
Result<void> enter_cwd(const std::string& cwd);
// Hands stdio pipes and sockets to the process's user, so it can reopen /proc/self/fd/N
// (runc does this). Terminals and files are left alone: they may be the caller's.
void give_stdio_to(uid_t uid, gid_t gid);
// Inside a fresh user namespace: become its root (uid/gid 0), once the maps exist.
Result<void> become_namespace_root();

Result<void> apply_rlimits(const std::vector<oci::Rlimit>& rlimits);
Result<void> set_oom_score_adj(int value);
// personality(2): the execution domain (Plan::personality), inherited across execve.
Result<void> set_personality(unsigned long persona);

// sched_setattr(2) with process.scheduler's policy and parameters.
Result<void> set_scheduler(const oci::Scheduler& scheduler);
// ioprio_set(2) of this process with process.ioPriority.
Result<void> set_io_priority(const oci::IoPriority& io);
// sched_setaffinity(2) of this thread to a CPU list ("0-3,7"); `what` names it in errors.
Result<void> set_cpu_affinity(const std::string& cpus, std::string_view what);
// set_mempolicy(2): linux.memoryPolicy, which the process and its children keep.
Result<void> set_memory_policy(const MemoryPolicyPlan& policy);

// Finds args[0] as execve would after PATH lookup in the container's environment.
// Error text matches runc's, which podman maps to exit codes 126/127.
Result<std::string> find_executable(const std::string& name, const std::vector<std::string>& env);

// env plus HOME when it lacks one: the home of uid in the container's /etc/passwd, else "/"
// (runc does the same; shells and many programs need HOME).
std::vector<std::string> with_home(const std::vector<std::string>& env, uint32_t uid);

// Error text in the style Go prints ("no such file or directory"): managers match on it.
std::string go_errno_text(int err);

}  // namespace forkbox
