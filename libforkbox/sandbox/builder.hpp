// The sandbox service's builder: a process of its own that makes embryos (embryo.hpp), so
// the service's event loop never waits on a clone, id maps, an idmapped mount or a cgroup
// mkdir/rmdir while a command runs. It clones with CLONE_PARENT: every embryo is the
// service's child, which reaps it and watches its pidfd.
//
// Protocol (SOCK_SEQPACKET, service <-> builder, one message each way per embryo):
//   service: "B<id>\n" + encode_kind() [+ fd]     make an embryo of this kind [a fork of the
//                                                  sandbox whose stage the fd is]
//            "H<id>\n" + encode_kind()            make a held one: its namespaces, not its
//                                                  root, which a fork asks for later
//   builder: "E<id> <pid> <lower>" + fds pidfd, control socket [, a held one's lower layer]
//            (lower: idmapped, plain, none)
//            "F<id> <message>"                     it could not
//   service: "D" + cgroup dirs, NUL-separated [+ fd]  remove these, drop the mount namespace
//                                                     of the sandbox they were (no reply)
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/sandbox/limits.hpp"
#include "libforkbox/sandbox/profile.hpp"
#include "libforkbox/sandbox/server.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox::sandbox {

struct BuilderConfig {
    ServerOptions options;
    CgroupLayout layout;  // the hierarchies sandboxes get cgroups in
    LimitMechanisms limits;
    // Where sandboxes' cgroups go, relative to each hierarchy's root: /forkbox-sandbox
    // for a root daemon, under its own (delegated) cgroup for a user's.
    std::string cgroup_parent;
    bool mapped_range = false;  // a root daemon: sandboxes of a private range of 65536 ids
    // A root daemon with CAP_SYS_ADMIN opens (and idmaps) each sandbox's lower layer; one
    // without it (root in a container) leaves its embryos to build their roots, as a
    // user's daemon does.
    bool daemon_lower = false;
    SeccompProgram seccomp;
};

// The cgroup (relative to each hierarchy's root) of embryo `id` of the service `service_pid`.
std::string embryo_cgroup_path(const std::string& parent, pid_t service_pid, uint64_t id);

// A kind on the wire (pure; unit-tested).
std::string encode_kind(const SandboxKind& kind);
Result<SandboxKind> decode_kind(std::string_view data);

// Profile options of the service's sandboxes (the Plan's root, hidden paths, sizes).
ProfileOptions profile_options(const ServerOptions& options, bool mapped_range);

// Forks the builder (a child of the calling service, which closes every other fd); returns
// the service's end of its socket, and a pidfd of the builder in `pidfd`.
Result<unique_fd> start_builder(const BuilderConfig& config, unique_fd& pidfd);

}  // namespace forkbox::sandbox
