// What the parts of an embryo (embryo.hpp: a sandbox's first process) share. It is one
// process, pid 1 of its sandbox, so its state is process-wide: the tree it built, the warm
// shell and the warm Python it keeps. The parts:
//   embryo.cpp          the release protocol and the one-shot run (embryo_main)
//   embryo_root.cpp     the namespaces, the root's layers and mounts, the hardening
//   embryo_command.cpp  starting a command (vfork + execve) and reporting its end
//   warm_shell.cpp      a dash started before its line comes
//   warm_python.cpp     a python3 started before its code comes
//   embryo_session.cpp  a session's init: runs, file verbs, kills, stops
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/tree.hpp"

namespace forkbox::sandbox::embryo {

// --- embryo_root.cpp ---

// What a session needs of the sandbox's tree, kept from the build (tree.hpp).
struct Tree {
    unique_fd stage;  // a non-recursive copy of the stage tmpfs mount
    unique_fd lower;  // the lower layer: the idmapped copy of "/", or the host's "/" as seen here
    TreeContext context;
    Manifest base;
};
extern Tree tree;

// Bytes in use on the stage tmpfs (the sandbox's writable layer), -1 when unknown.
int64_t stage_used();
Result<void> set_batch_scheduling(bool batch);
// Everything that does not depend on the root's layers: done once the id maps are written
// ("P"), so that a held embryo (embryo.hpp) has it done before its fork asks for it.
Result<void> enter_namespaces(const EmbryoSetup& s);
// The root ("M"): its layers (`lower_tree`: the daemon's idmapped copy of "/"; `fork_source`:
// a fork's parent's stage, whose state it copies), the Plan's mounts, then the hardening.
Result<void> build(const EmbryoSetup& s, int lower_tree, int fork_source);

// --- embryo_command.cpp ---

void send_text(int control, const std::string& m);
// "X<errno> <what>: <strerror>" to the daemon, and the exit a shell's would be (127, 126).
[[noreturn]] void exec_failed(int control, int err, std::string_view what);
// A process started before its request (a warm shell, a warm Python) gets the release's
// rlimits as a command started for it would.
void limit_started(int control, pid_t pid, const Release& r);

// Set by the vfork child (which shares our memory) when its execve failed.
extern volatile int exec_errno;

// A command, ready to exec: everything the vfork child needs is made before it, because
// between vfork and execve it only makes syscalls.
struct Command {
    std::vector<char*> argv, envp;
    std::vector<std::string> candidates;  // where argv[0] may be, in PATH order
    rlimit address{};
    bool limit_address = false;
    rlimit nproc{};
    bool limit_nproc = false;
    const char* cwd = nullptr;  // a session's run changes directory in the child
    bool own_group = false;     // a session's run leads a process group of its own
    bool batch = false;         // starts SCHED_BATCH: a warm shell, made while others run
    int script_fd = -1;         // a warm shell's script pipe, its fd 3 (above 2 already)
    int line_end_fd = -1;       // a sandbox's warm shell's socket to the service, its fd 4
    sigset_t mask{};
};
Command prepare(const Release& r);
// vforks and execs `c` with `stdio`; the child's exec failure is in exec_errno (0: it ran).
pid_t spawn(const Command& c, const int* stdio);

// Now on the service's steady clock, in ns (a sandbox has no time namespace): when a command
// ended, as its end report says, so duration_ms does not count the report's trip.
std::string monotonic_ns_text();
// "<wait status> <user us> <system us> <max rss KiB>" of an end report.
std::string usage_text(int status, const rusage& usage);
Result<void> drop_every_capability();
// Waits for the command (reaping what gets orphaned meanwhile), reports its status and
// usage ("W"), and exits: the kernel then kills whatever else runs in the sandbox.
[[noreturn]] void report_end(int control, pid_t command, int64_t used_before);

// --- warm_shell.cpp ---

struct WarmShell {
    pid_t pid = -1;
    unique_fd script;     // the write end of its fd 3
    bool says_line_end = false;  // writes its line's status to its fd 4 (a socket to the service)
    unique_fd output[2];  // a session's: our copies of its stdout and stderr, for a run it
                          // does not take (or that finds it dead) in its place
};
extern WarmShell warm_shell;

enum class WarmShellRole {
    sandbox,  // the sandbox's own: runs one line
    session,  // a session's: leads a process group of its own, as the session's runs do
};
// Started when the embryo gets its output pipes ("N"), with stdin /dev/null; a session's
// has the session's address-space limit, as its runs. With `line_end` (a socket's end,
// the service's "N" gave it), the shell writes its line's status there once the line is
// done, before its exit (warm_shell.cpp). With `script` (a pipe's read and write ends from
// "N", the service keeping a write end too) it reads its script there, else from a pipe of
// our own.
void start_warm_shell(WarmShellRole role, int out, int err, uint64_t address_limit, int line_end,
                      unique_fd script[2] = nullptr, uint64_t nproc_limit = 0);
// The pipes of an "N" ("N" ["E"] ["S"] ["U"] [" <nproc limit> <address limit>"] + fds
// stdout, stderr [, the line's end] [, the script's read and write ends]), or none when the
// message is not one. The limits are the rlimits a sandbox's shell starts with: the daemon's
// default ones, which a line given by the service runs under. "U": the service reads the
// shell's usage itself at its line's end (no cgroup counts it), so wants its pidfd ("S").
struct WarmShellPipes {
    unique_fd output[2];
    unique_fd line_end;
    unique_fd script[2];
    uint64_t nproc_limit = 0, address_limit = 0;
    bool wants_shell = false;
};
std::optional<WarmShellPipes> warm_shell_pipes(std::string_view message, std::vector<unique_fd>& fds);
// "S" + a pidfd of the warm shell just started, to the service ("U": it reads the shell's
// usage at its line's end). Not awaited: without it, a run ends at the shell's exit.
void say_warm_shell(int control);
// Killed, and reaped by the caller's wait for its command, or now (`reap`).
void drop_warm_shell(bool reap);
// For a release the warm shell runs exactly as `/bin/sh -c LINE` would (with every
// capability the embryo has), what makes its environment (warm_shell_environment).
std::optional<std::string> fits_warm_shell(const Release& r, int stdin_fd);
// The line to the warm shell, which is then the command's: its pid, or -1 (errno) when it
// died before it could read it. `environment` is fits_warm_shell's; the caller has checked
// that `cwd` can be entered.
pid_t give_line(const std::string& line, const std::string& environment, const std::string& cwd);
// The warm shell, once the service wrote it the line itself (Release::line_given): then the
// command's, as give_line's.
pid_t line_was_given();
// The release's line to the warm shell, under the release's limits; reports its end.
[[noreturn]] void run_in_warm_shell(int control, const Release& r, const std::string& environment, const int* stdio);

// --- warm_python.cpp ---

struct WarmPython {
    pid_t pid = -1;
    unique_fd socket;
    uint64_t cpu_ns = 0;  // its CPU time when ready: not a request's
};
extern WarmPython warm_python;  // a sandbox's own (pid 2)

enum class WarmPythonRole {
    sandbox,  // the sandbox's own: runs one request itself
    session,  // a session's: forks a process group per request, and reports each one's end
};
// Starts a warm Python and waits until it has imported `preload`.
Result<WarmPython> start_python(WarmPythonRole role, const std::vector<std::string>& preload);
// "cwd\0code\0env..." of a python3 -c release.
std::string python_request(const Release& r);
// A request for the sandbox's warm Python: its limits, then the code and stdio are its.
[[noreturn]] void run_warm_python(int control, const Release& r, const int* stdio);

// --- embryo_session.cpp ---

// A session's init, until the daemon kills it or goes.
[[noreturn]] void session_loop(int control, const Release& limits);

}  // namespace forkbox::sandbox::embryo
