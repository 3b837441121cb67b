// A sandbox's first process, on the child side of the builder's clone: pid 1 of a fresh pid
// namespace inside a fresh user namespace. It makes the rest of the sandbox ahead of any
// request (mount, ipc, uts, cgroup and network namespaces; an overlay of the host's root
// whose upper layer lives on a tmpfs; the Plan's mounts, devices and masks; capabilities,
// no_new_privs and seccomp), says it is ready, and waits. A request releases it either for
// one command or for a session:
// - one command: it takes the command's stdio, cwd and limits, vforks the command (pid 2),
//   reaps what gets orphaned to it, reports the command's end, and exits: the kernel then
//   kills whatever else runs in the sandbox, and every mount goes with the mount namespace.
// - a session: it stays, and starts each run or file verb (tree.hpp) the daemon sends as a
//   process group of its own, reporting each one's end by id, until the daemon kills it.
//
// The control socket (SOCK_SEQPACKET), daemon <-> embryo:
//   daemon: "P"                                    its id maps are written: make the
//                                                  namespaces (mount, ipc, uts, cgroup, net)
//   daemon: "M" ["L"] ["F"] + fds [the lower layer, an idmapped copy of "/"] [a fork's
//           parent's stage, whose state it copies]                build the root
//           The builder sends "M" right after "P", except to a held embryo: one kept for
//           forks, which the service sends "M" itself when a fork takes it.
//   embryo: "C" (a fork: the parent's state is copied), then
//           "R" + fd its stage (ready: a copy of its writable layer's tmpfs mount) or "F<message>"
//           (failed; it then exits); a warm Python's embryo starts python3 (pid 2) first
//           and says "R <its CPU time so far, ns>"
//   daemon: "N" ["E" ["U"]] ["S" [" <nproc limit> <address limit>"]] + fds stdout, stderr
//           [E: a socket's end] [S: the script pipe's read and write ends]: made while it
//           waits in a pool (off the request's path); the embryo then starts its warm shell
//           (takes_warm_shell) with them, and the "E" socket as its fd 4: the shell says its
//           line's status there before its exit ("S<status>\n", warm_shell.cpp) and waits
//           there, and the daemon then ends the run and kills the sandbox without waiting for
//           "W" (or shuts its end, and the shell goes on to its exit). With "S" (the daemon
//           keeps a write end) the shell reads its script from that pipe, under the rlimits
//           given (the default limits' where they are rlimits), and the daemon may write the
//           line there.
//   embryo: "S" + fd a pidfd of its warm shell, after "U" (no cgroup counts a run's usage:
//           the daemon reads the shell's at its line's end, process/usage.hpp)
//   daemon: "G" + Release::encode() + fds stdin, stdout, stderr     run the command
//           (after "N": fd stdin alone), in the warm shell when it takes the command;
//           Release::line_given: the daemon wrote it to the shell's script pipe already
//   embryo: "X<errno> <message>" when the command could not be started (its status is then
//           126 or 127), and "W<wait status> <user us> <system us> <max rss KiB> <bytes>"
//           when it ended (wait4 of the command alone; the growth of its writable layer).
// A session instead:
//   daemon: "L<nproc limit> <address limit> <drop caps 0|1>"
//   embryo: "l" (made; the daemon keeps the stage it had with "R", for forks)
//   daemon: "NEU" + fds stdout, stderr, a socket's end  the next warm shell's (its fd 4 as
//                                                    a one-shot's): sent when the session is
//                                                    made and after a run took it
//   embryo: "S" + fd a pidfd of that shell
//   daemon: "G<id>\n" + Release::encode() + 3 fds    a run (warm_python: by a warm Python
//                                                    of the session's, one per preload);
//           or + fd stdin alone: a line for the warm shell (with the "N" pipes)
//           "O<id>\n" + FileRequest::encode() + 3 fds a file verb
//           "K<id> <signal>"                         signal that run's process group
//           "S" / "T"                                stop / continue every process (a fork's
//                                                    copy, pause); answered "s" / "t"
//   embryo: "x<id> <errno> <message>"  the run could not start
//           "w<id> <wait status> <user us> <system us> <max rss KiB> <bytes>"  it ended
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox::sandbox {

// Whether a command is a line an embryo's warm shell runs as a `/bin/sh -c LINE` started for
// it would: the line without stdin, in an environment warm_shell_environment takes (pure,
// unit-tested). The warm shell is a dash (`/bin/sh -c '. /dev/fd/3'`) started, in the
// default environment, while the embryo waits.
bool takes_warm_shell(const std::vector<std::string>& argv, const std::vector<std::string>& env, bool has_stdin);

// What the warm shell reads for a line: `environment` (warm_shell_environment's), a cd to
// `cwd` unless it is "/", the line, and with `says_line_end` the status to its fd 4.
std::string warm_shell_script(std::string_view line, const std::string& environment, const std::string& cwd,
                              bool says_line_end);

// What turns the warm shell's environment (kDefaultEnv) into `env` as a dash started with
// `env` has it: "" for the default, else `unset` of every default variable and PWD, then
// `export` of `env`'s in its order (dash lists its children's environment by its own hash
// chains, in which a variable's place follows when it was set), ending in "; ". Nothing
// for an environment a shell cannot make: a name that is not an identifier, one given
// twice, or one dash sets itself when it starts (IFS, PPID, OPTIND, PWD, ...).
std::optional<std::string> warm_shell_environment(const std::vector<std::string>& env);

// A release carries the request's argv, env and cwd: at most about a request's size.
inline constexpr size_t kReleaseBufferBytes = 2 * kMaxRequestBytes;

// What a request hands an embryo besides its stdio (pure encoding, unit-tested).
struct Release {
    std::vector<std::string> argv, env;
    std::string cwd = "/";
    uint64_t nproc_limit = 0;    // RLIMIT_NPROC; 0: unchanged
    uint64_t address_limit = 0;  // RLIMIT_AS in bytes; 0: unchanged
    bool drop_all_caps = false;
    bool warm_python = false;  // argv is python3 -c CODE: the embryo's warm Python runs CODE
    std::vector<std::string> preload;  // a session's warm Python: the modules it imports first
    // The service wrote the line to the warm shell's script pipe (warm_shell_script) as it
    // sent this: only a one-shot's line that needs nothing of the init first (the rlimits
    // the shell started under, cwd "/", the shell's own caps); without the warm shell, the
    // init runs it itself.
    bool line_given = false;

    std::string encode() const;
    static Result<Release> decode(std::string_view data);
    bool operator==(const Release&) const = default;
};

struct EmbryoSetup {
    const Plan* plan = nullptr;
    const CgroupLayout* cgroup_layout = nullptr;
    const SeccompProgram* seccomp = nullptr;
    int control_fd = -1;
    std::string stage;            // an empty host directory: the stage tmpfs goes on it
    uint64_t upper_size_mb = 512;
    bool warm_shell = true;       // a shell started before the line comes ("N")
    bool mapped_range = false;    // a root daemon's map of 65536 ids: setgroups allowed
    std::vector<int> cgroup_task_fds;  // v1 `tasks` files of its cgroups, opened by the daemon
    std::vector<int> bind_source_trees;  // per plan.mounts index, -1 for none
    const SandboxKind* kind = nullptr;   // its python and preload
};

// Never returns. Every fd but those in `setup` must be closed by the caller first.
[[noreturn]] void embryo_main(const EmbryoSetup& setup);

}  // namespace forkbox::sandbox
