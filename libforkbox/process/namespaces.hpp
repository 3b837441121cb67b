// Linux namespaces: joining by path (type-checked), id mappings, time offsets, hostname.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/plan/plan.hpp"

namespace forkbox {

struct OpenNamespace {
    int clone_flag = 0;
    std::string path;
    unique_fd fd;
};

// Opens each namespace path and checks it names a namespace of the declared type
// (a net namespace path given as "pid" is refused before anything is created).
Result<std::vector<OpenNamespace>> open_namespaces(const std::vector<NamespaceJoin>& joins);

// setns into each; user namespace first. Joins refused with EPERM before the user namespace
// is entered are retried after it (their owner may be that user namespace).
Result<void> join_namespaces(std::vector<OpenNamespace>& namespaces);

// While it lives, this (single-threaded) process is in the given namespaces; its own are
// restored on destruction. Used around a clone so the child inherits them.
class NamespaceVisit {
public:
    static Result<NamespaceVisit> enter(const std::vector<OpenNamespace>& namespaces);
    NamespaceVisit(NamespaceVisit&&) = default;
    NamespaceVisit& operator=(NamespaceVisit&&) = default;
    ~NamespaceVisit();

private:
    NamespaceVisit() = default;
    std::vector<OpenNamespace> home_;
};

// How a user namespace's maps get written. Directly by root, and by an unprivileged user
// for a single mapping of its own id (gid_map after setgroups=deny, which the kernel
// requires then); any other map of an unprivileged user goes through Debian's setuid
// newuidmap/newgidmap (package uidmap), which check it against /etc/subuid and /etc/subgid.
struct IdMapWriter {
    std::string newuidmap, newgidmap;  // absolute paths; empty: that map is written directly
    bool deny_setgroups = false;       // before a directly written gid_map
};

// Decided before the clone (paths resolved in PATH, as runc does), so a missing tool is a
// clear error naming it and nothing has been made yet. euid/egid are the caller's.
Result<IdMapWriter> plan_id_map_writer(const std::vector<oci::IdMapping>& uids,
                                       const std::vector<oci::IdMapping>& gids, uid_t euid, gid_t egid);

// Writes /proc/<pid>/uid_map and gid_map (parent side).
Result<void> write_id_mappings(pid_t pid, const std::vector<oci::IdMapping>& uids,
                               const std::vector<oci::IdMapping>& gids, const IdMapWriter& writer = {});

// A user namespace with these maps and no process in it (an fd of it: the idmap of an
// idmapped mount). Its owner, a child that lives until the maps are written, is reaped
// before this returns. Needs root in the initial user namespace for arbitrary maps.
Result<unique_fd> new_user_namespace(const std::vector<oci::IdMapping>& uids, const std::vector<oci::IdMapping>& gids);

// Moves the calling thread (nsproxy is per task: the process's other threads stay where they
// are) into a new network namespace with its loopback up, and returns an fd of it. The
// namespace belongs to the caller's user namespace, as one made by a clone would. nullopt,
// with nothing changed, when the thread's own network namespace belongs to an outer user
// namespace (the runtime run as root of a user namespace, as by rootless podman): a visit
// to the new one could not come back, so a clone must make it.
Result<std::optional<unique_fd>> move_thread_to_new_network_namespace();

// Text of an id map file: "0 100000 65536\n" per mapping (pure).
std::string format_id_mappings(const std::vector<oci::IdMapping>& maps);

// unshare(CLONE_NEWTIME), write the offsets, and move this process into the new namespace.
Result<void> enter_new_time_namespace(const std::vector<std::pair<std::string, oci::TimeOffset>>& offsets);

// Sets lo up in the current (new) network namespace, as runc does for a namespace it creates.
Result<void> bring_up_loopback();

Result<void> set_hostname(const std::string& name);
Result<void> set_domainname(const std::string& name);

// Writes each sysctl under /proc/sys (dots become slashes).
Result<void> apply_sysctls(const std::vector<std::pair<std::string, std::string>>& sysctls);

}  // namespace forkbox
