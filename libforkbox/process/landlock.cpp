#include "libforkbox/process/landlock.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "libforkbox/base/fd.hpp"

namespace forkbox {

namespace {

// <linux/landlock.h> of Debian 12 (Linux 6.1) predates `scoped`: the ABI 6 layout.
struct RulesetAttr {
    uint64_t handled_access_fs = 0;
    uint64_t handled_access_net = 0;
    uint64_t scoped = 0;
};
constexpr uint64_t kScopeAbstractUnixSocket = 1u << 0;
constexpr uint64_t kScopeSignal = 1u << 1;
constexpr unsigned kCreateRulesetVersion = 1u << 0;
constexpr int kFirstAbiWithScopes = 6;

}  // namespace

int landlock_abi() {
    long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
    return v < 0 ? 0 : static_cast<int>(v);
}

bool landlock_scopes_supported() {
    static const bool supported = landlock_abi() >= kFirstAbiWithScopes;
    return supported;
}

Result<bool> scope_to_own_domain() {
    if (!landlock_scopes_supported()) return false;
    RulesetAttr attr;
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    unique_fd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0)));
    if (!ruleset) return sys_error("landlock_create_ruleset");
    if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) < 0) return sys_error("landlock_restrict_self");
    return true;
}

}  // namespace forkbox
