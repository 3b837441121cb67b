#include "libforkbox/process/credentials.hpp"

#include <grp.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace forkbox {

namespace {

struct CapData {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
};

Result<CapData> current_caps() {
    CapData c;
    if (::syscall(SYS_capget, &c.header, c.data) < 0) return sys_error("capget");
    return c;
}

bool set_effective(CapData c, const uint32_t effective[2]) {
    c.data[0].effective = effective[0];
    c.data[1].effective = effective[1];
    return ::syscall(SYS_capset, &c.header, c.data) == 0;
}

// The raw call: glibc's setgroups would change every thread's, as POSIX wants.
long set_thread_groups(const std::vector<gid_t>& groups) { return ::syscall(SYS_setgroups, groups.size(), groups.data()); }

// setfs[ug]id report no error: the id took when asking again returns it.
bool fsuid_is(uid_t uid) { return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) == uid; }
bool fsgid_is(gid_t gid) { return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) == gid; }

}  // namespace

Result<HostIdentity> peer_identity(int sock) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return sys_error("SO_PEERCRED");
    HostIdentity id{cred.uid, cred.gid, {}};
    id.groups.resize(16);
    for (;;) {
        len = static_cast<socklen_t>(id.groups.size() * sizeof(gid_t));
        if (::getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, id.groups.data(), &len) == 0) break;
        if (errno != ERANGE || id.groups.size() >= 65536) return sys_error("SO_PEERGROUPS");
        id.groups.resize(len / sizeof(gid_t) + 1);  // len says what is needed
    }
    id.groups.resize(len / sizeof(gid_t));
    return id;
}

Result<BorrowedFsIdentity> BorrowedFsIdentity::borrow(const HostIdentity& who) {
    BorrowedFsIdentity b;
    FB_ASSIGN(CapData caps, current_caps());
    b.effective_[0] = caps.data[0].effective;
    b.effective_[1] = caps.data[1].effective;
    int n = ::getgroups(0, nullptr);
    if (n < 0) return sys_error("getgroups");
    b.groups_.resize(static_cast<size_t>(n));
    if (::getgroups(n, b.groups_.data()) < 0) return sys_error("getgroups");
    b.fsuid_ = static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1)));
    b.fsgid_ = static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1)));
    b.active_ = true;  // from here on the destructor puts back what changed
    if (set_thread_groups(who.groups) < 0) return sys_error("setgroups");
    ::setfsgid(who.gid);
    if (!fsgid_is(who.gid)) return fail(EPERM, "setfsgid " + std::to_string(who.gid));
    ::setfsuid(who.uid);
    if (!fsuid_is(who.uid)) return fail(EPERM, "setfsuid " + std::to_string(who.uid));
    const uint32_t sys_admin_only[2] = {CAP_TO_MASK(CAP_SYS_ADMIN), 0};
    if (!set_effective(caps, sys_admin_only)) return sys_error("capset");
    return b;
}

BorrowedFsIdentity::BorrowedFsIdentity(BorrowedFsIdentity&& o) noexcept
    : active_(o.active_), fsuid_(o.fsuid_), fsgid_(o.fsgid_), groups_(std::move(o.groups_)) {
    std::memcpy(effective_, o.effective_, sizeof effective_);
    o.active_ = false;
}

BorrowedFsIdentity::~BorrowedFsIdentity() { restore(); }

// Capabilities first: setfsuid and setgroups need CAP_SETUID and CAP_SETGID back. A root
// process cannot fail these; if one ever did, it must not go on as the other user.
void BorrowedFsIdentity::restore() {
    if (!active_) return;
    active_ = false;
    auto caps = current_caps();
    if (!caps || !set_effective(*caps, effective_)) ::_exit(125);
    ::setfsuid(fsuid_);
    ::setfsgid(fsgid_);
    if (!fsuid_is(fsuid_) || !fsgid_is(fsgid_) || set_thread_groups(groups_) < 0) ::_exit(125);
}

}  // namespace forkbox
