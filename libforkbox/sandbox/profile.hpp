// What a sandbox is, as an OCI spec built in memory and planned like a bundle's: the
// sandbox executor (embryo.hpp) runs the same Plan steps as `forkbox create` (mounts,
// devices, masks, capabilities, seccomp), over a root it makes itself (an overlay of the
// host's root with its upper layer on a tmpfs). Pure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/credentials.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "oci/spec.hpp"

namespace forkbox::sandbox {

// What embryos of one kind share: fixed when the embryo is made, before any request.
struct SandboxKind {
    bool network = false;  // the host's network instead of a namespace with only lo
    std::vector<BindRequest> mounts;
    // A warm Python: the embryo starts python3 with these modules imported, and a request
    // hands it the code to run (warm_python.cpp).
    bool python = false;
    std::vector<std::string> preload;
    // For a peer that is not the daemon's own user (--allow-group): the host's files in the
    // lower layer keep their owners unmapped (no idmapped lower), so the sandbox's root
    // reads and writes them only as any unprivileged user could, never as the daemon.
    bool unmapped_lower = false;
    std::string rootfs;  // the lower layer's directory (resolve_sandbox_rootfs), "" for the host's /
    // A group member whose request names host paths: its binds and its rootfs are looked
    // up with its rights, and what it owns there is the sandbox root's (idmapped), the rest
    // anyone's. Unset for the daemon's own user and for requests that name no host path.
    std::optional<HostIdentity> member;
    auto operator<=>(const SandboxKind&) const = default;
};

struct ProfileOptions {
    std::string root;  // where the overlay is mounted (the Plan's rootfs), absolute
    // Host paths the sandbox must not see besides /root, /home and /run (the daemon's
    // socket and state when they live elsewhere): each gets an empty read-only tmpfs.
    std::vector<std::string> hidden;
    bool host_is_mapped_root = false;  // a root daemon: the sandbox maps 65536 ids
};

// The most inodes a sandbox's tmpfs of `size_kib` may hold: one per 4 KiB, as many one-page
// files as its size allows. tmpfs's default is half the host's RAM in pages, and an empty
// file costs no block but ~1 KiB of kernel memory, which only a root daemon's cgroup bounds.
constexpr uint64_t tmpfs_inode_cap(uint64_t size_kib) { return std::max<uint64_t>(size_kib / 4, 1024); }

// A member's supplementary groups as its sandbox has them (SandboxKind::member): each gid
// of the member's below 65536 but 0 and its primary group keeps its number inside (mapped
// to uid_base + gid), so that group-owned files in its binds and chosen root keep their
// group's rights; at most 64, sorted.
std::vector<gid_t> member_groups_inside(const HostIdentity& member);

// Docker's default capability set, given inside the sandbox's user namespace.
const std::vector<std::string>& docker_default_capabilities();

// The spec (validated) of a sandbox of `kind`.
oci::Spec sandbox_spec(const SandboxKind& kind, const ProfileOptions& options);

// Spec -> Plan, as a bundle's: validate + make_plan.
Result<Plan> sandbox_plan(const SandboxKind& kind, const ProfileOptions& options);

}  // namespace forkbox::sandbox
