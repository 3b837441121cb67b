// Container lifecycle: create, start, run, kill, delete, state, list. Each verb of the CLI
// calls exactly one of these.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/container/state.hpp"
#include "oci/spec.hpp"

namespace forkbox {

struct CreateOptions {
    std::string id;
    std::string bundle = ".";
    std::string pid_file;
    std::string console_socket;
    std::string pidfd_socket;  // runc's --pidfd-socket: init's pidfd goes there
    bool no_pivot = false;
    bool no_new_keyring = false;
    int preserve_fds = 0;
    // Zygote mode: the daemon's socket, or empty (then only the container's
    // run.forkbox.zygote=true annotation turns it on, with the default socket).
    std::string zygote_socket;
    // --systemd-cgroup: the container's cgroup is a transient systemd unit (cgroup/systemd.hpp).
    bool systemd_cgroup = false;
};

enum class Status { Creating, Created, Running, Paused, Stopped };
const char* status_name(Status s);

// A container as `state` and `list` report it.
struct ContainerInfo {
    ContainerState state;
    Status status = Status::Stopped;
};

// What a finished create still holds: the parsed config, the Plan, the seccomp program and
// the like, with nothing left to undo (the container's lock is released). init shares those
// pages copy-on-write until it execs, so freeing them before then copies each page it
// touches (~15 us a page on PVM guests, ~150 us a create): `run` drops them once `start` has
// released init, the `create` verb leaves them to its exit.
class CreationRemains {
public:
    virtual ~CreationRemains() = default;
    // Whether the config has poststop hooks: `run`'s delete then need not read config.json.
    virtual bool has_poststop_hooks() const = 0;
};

// Creates the container and leaves init waiting on the exec fifo. Returns init's pid.
// With process.terminal and no console socket, a foreground caller passes pty_master and
// gets the pty's master side there. With `remains`, a successful create hands over what it
// holds instead of freeing it.
Result<pid_t> create_container(const StateStore& store, const CreateOptions& options,
                               unique_fd* pty_master = nullptr,
                               std::unique_ptr<CreationRemains>* remains = nullptr);
Result<void> start_container(const StateStore& store, const std::string& id);
Result<void> kill_container(const StateStore& store, const std::string& id, int signal, bool all);
// Freezes every process of a running container (its cgroup's freezer); "container not
// running" otherwise. resume_container thaws a paused one; "container not paused" otherwise.
Result<void> pause_container(const StateStore& store, const std::string& id);
Result<void> resume_container(const StateStore& store, const std::string& id);
// Pids in the container's cgroup (`ps`); none once it has stopped, as runc.
Result<std::vector<pid_t>> container_pids(const StateStore& store, const std::string& id);
// What `run` knows of its own container when it deletes it, which delete would otherwise
// find out on the critical path.
struct KnownToRun {
    bool staging_swept = false;     // StateStore::remove_stale_staging ran during the run
    bool poststop_hooks = true;     // false: config.json has none, and is not read for them
};
Result<void> delete_container(const StateStore& store, const std::string& id, bool force,
                              const KnownToRun& known = {});
// Writes new limits into a running (or paused, or created) container's cgroup.
Result<void> update_container(const StateStore& store, const std::string& id, const oci::Resources& resources);
Result<ContainerInfo> container_info(const StateStore& store, const std::string& id);
Result<std::vector<ContainerInfo>> list_containers(const StateStore& store);

// The OCI state document (runtime.md) plus runc's extra fields, indented like runc.
std::string state_document(const ContainerInfo& info, bool pretty);

struct RunOptions {
    CreateOptions create;
    bool detach = false;
    bool keep = false;
    // A foreground run is the child subreaper of what the container orphans (runc's default,
    // --no-subreaper turns it off): without a pid namespace, they are reaped by the run
    // instead of the host's init.
    bool subreaper = true;
    // --timeout: every process of the container is killed at the deadline; run exits 124.
    std::optional<std::chrono::nanoseconds> timeout;
    // The container lives only as long as this run (`forkbox run BUNDLE/`, the CI use):
    // SIGINT, SIGTERM and SIGHUP kill it (run exits 128 + N) instead of being forwarded,
    // and a guardian process removes it even when forkbox itself is SIGKILLed, by exec'ing
    // cleanup_command (argv; argv[0] the program's path: `forkbox delete --force ID`).
    bool ephemeral = false;
    std::vector<std::string> cleanup_command;
};

// create + start + wait, forwarding signals; returns the container's exit code
// (128 + N when killed by signal N; 124 at the --timeout deadline), or 0 with detach.
Result<int> run_container(const StateStore& store, const RunOptions& options);

// `exec`: a new process in a running container. Either a whole process.json (--process)
// or the container's own process with runc's per-field overrides.
struct ExecOptions {
    std::string id;
    std::string process_file;  // "-" is stdin
    std::vector<std::string> args;
    std::vector<std::string> env;  // appended to the container's
    std::optional<std::string> cwd;
    std::optional<std::string> user;  // "uid[:gid]"
    std::vector<uint32_t> additional_gids;
    std::vector<std::string> caps;  // added to the bounding, effective, permitted and ambient sets
    bool no_new_privs = false;
    std::optional<bool> tty;
    bool detach = false;
    bool ignore_paused = false;  // runc's --ignore-paused: the process waits for resume
    // runc's --cgroup: "[CONTROLLER[,...]:]PATH", existing sub-cgroups of the container's
    // the process is put in (cgroups.hpp, exec_cgroup_dirs).
    std::vector<std::string> sub_cgroups;
    std::string pid_file;
    std::string console_socket;
    std::string pidfd_socket;  // the process's pidfd goes there (runc's --pidfd-socket)
    int preserve_fds = 0;
    std::string process_label;  // SELinux
    std::string apparmor;
};

// The process exec runs (pure): --process parsed, or `base` with the overrides applied.
Result<oci::Process> exec_process(const oci::Process& base, const ExecOptions& options,
                                  std::string_view process_json = {});

// Runs the process in the container's namespaces, cgroups and seccomp filter. Returns its
// exit code (128 + N when killed by signal N), or 0 with detach once it is running.
Result<int> exec_container(const StateStore& store, const ExecOptions& options);

// The state document hooks get on stdin (runtime.md "State"), with the given status.
std::string hook_state_json(const ContainerState& s, const char* status);

// Runs the poststop hooks of a container that has stopped: a failing one is a warning and
// the others still run (runtime-spec).
void run_poststop_hooks(const std::vector<oci::Hook>& hooks, const ContainerState& s);

// Status from a saved state: liveness of pid+start time and whether the exec fifo remains.
// A live container whose freezer is frozen is Paused (one read of its freezer state).
Status derive_status(const ContainerState& s, bool fifo_exists);

}  // namespace forkbox
