// The state directory (--root): one directory per container holding state.json (written
// atomically), a copy of config.json, the exec fifo, and a lock file every verb flocks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/files.hpp"

namespace forkbox {

inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kExecFifo = "exec.fifo";
inline constexpr const char* kLockFile = "lock";

// What forkbox remembers about a container between invocations.
struct ContainerState {
    std::string oci_version;
    std::string id;
    pid_t pid = 0;
    uint64_t pid_start_time = 0;  // /proc/<pid>/stat field 22, so a reused pid is never signalled
    std::string bundle;
    std::string rootfs;
    std::string created;  // RFC 3339 with nanoseconds, UTC
    std::string owner;
    std::map<std::string, std::string> annotations;
    bool own_pid_namespace = false;
    std::vector<std::string> cgroup_dirs;          // host dirs holding the container
    std::vector<std::string> cgroup_dirs_created;  // the subset forkbox made, parents first
    // The systemd driver's unit ("" with cgroupfs): later verbs (podman's kill, delete and
    // state, conmon's exec) come without --systemd-cgroup and find the driver here.
    std::string systemd_unit;
    // linux.netDevices moved in by create: host name -> name in the container. delete
    // moves them back while the container's network namespace lives.
    std::map<std::string, std::string> net_devices;
};

std::string serialize_state(const ContainerState& s);
Result<ContainerState> parse_state(std::string_view json);

// Ids: non-empty, at most 1024 bytes of [A-Za-z0-9_+-.], not "." or "..".
Result<void> validate_container_id(const std::string& id);

// The id of a container run straight from a bundle (`forkbox run BUNDLE/`): the bundle
// directory's name with anything an id cannot hold replaced by '-' (at most 64 bytes of it;
// "bundle" when nothing is left), a '-', and `suffix` that makes it unique: "app-3f9c2a71".
std::string container_id_for_bundle(std::string_view bundle_name, std::string_view suffix);
// Eight random hex digits (getrandom) for container_id_for_bundle.
std::string random_id_suffix();

// An open, locked container directory. The lock is released when this is destroyed.
class ContainerDir {
public:
    const std::string& path() const { return path_; }
    int fd() const { return dirfd_.get(); }
    int lock_fd() const { return lock_.get(); }
    std::string file(const char* name) const { return path_ + "/" + name; }

    Result<void> write_state(const ContainerState& s) const;
    Result<ContainerState> read_state() const;
    bool fifo_exists() const;
    // True when another process holds the container's lock (a create still in progress).
    bool locked_elsewhere() const;
    // True when the lock file is gone: only a delete removes it (the first of the files).
    bool being_removed() const;
    // Removes the directory and everything in it.
    Result<void> remove();

private:
    friend class StateStore;
    std::string path_;
    unique_fd dirfd_;
    unique_fd lock_;
};

class StateStore {
public:
    explicit StateStore(std::string root) : root_(std::move(root)) {}
    const std::string& root() const { return root_; }

    // Makes the root (and its parents) unless it exists.
    Result<void> ensure_root() const;
    // Makes the container's directory (EEXIST if the id is taken) and locks it.
    Result<ContainerDir> create(const std::string& id) const;
    // Opens an existing container's directory (ENOENT: no such container). Verbs that change
    // the container lock it; readers (state, list) do not, since state.json is replaced
    // atomically, and a hook calling `state` during `create` must not deadlock.
    // Force (delete --force): exclusive, and a forkbox verb stuck holding the lock for 10 s
    // (a hook that never returns) is killed rather than waited for forever.
    enum class Lock { Exclusive, Force, None };
    Result<ContainerDir> open(const std::string& id, Lock lock = Lock::Exclusive) const;
    // Ids of every container under the root, sorted.
    Result<std::vector<std::string>> list() const;
    // Removes the staging directories (see create) that creates killed before they named
    // them left, once older than this and unlocked.
    void remove_stale_staging(int older_than_seconds = 60) const;

private:
    Result<ContainerDir> create_in_place(const std::string& id) const;
    std::string root_;
};

// --pid-file: the pid as text, replaced atomically (a relative path is from the cwd).
Result<void> write_pid_file(const std::string& path, pid_t pid);

}  // namespace forkbox
