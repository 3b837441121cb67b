// Acting on the file system as another user: a unix socket peer's identity, and a scoped
// borrowing of it (fsuid, fsgid, supplementary groups) by a root process that must open
// paths with that user's rights and no more.
#pragma once

#include <sys/types.h>

#include <compare>
#include <vector>

#include "libforkbox/base/error.hpp"

namespace forkbox {

struct HostIdentity {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary
    auto operator<=>(const HostIdentity&) const = default;
};

// The identity a unix socket's peer had when it connected (SO_PEERCRED, SO_PEERGROUPS):
// taken by the kernel then, so no later exit or pid reuse can change it.
Result<HostIdentity> peer_identity(int sock);

// While it lives, this thread's path lookups and opens are checked as
// `who`'s: fsuid, fsgid and groups are theirs, and no effective capability is left but
// CAP_SYS_ADMIN (so open_tree still clones what the lookup reached, while CAP_DAC_*,
// CAP_FOWNER and CAP_SYS_PTRACE no longer widen the lookup). Destroying it restores all.
class BorrowedFsIdentity {
public:
    static Result<BorrowedFsIdentity> borrow(const HostIdentity& who);
    BorrowedFsIdentity(BorrowedFsIdentity&& o) noexcept;
    BorrowedFsIdentity& operator=(BorrowedFsIdentity&&) = delete;
    ~BorrowedFsIdentity();

private:
    BorrowedFsIdentity() = default;
    void restore();
    bool active_ = false;
    uid_t fsuid_ = 0;
    gid_t fsgid_ = 0;
    std::vector<gid_t> groups_;
    uint32_t effective_[2] = {0, 0};
};

}  // namespace forkbox
