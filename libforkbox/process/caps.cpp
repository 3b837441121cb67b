#include "libforkbox/process/caps.hpp"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <vector>

#include "oci/linux_names.hpp"

namespace forkbox {

namespace {
Result<uint64_t> mask_of(const std::vector<std::string>& names, const char* set) {
    uint64_t m = 0;
    for (const auto& n : names) {
        auto c = oci::capability_from_name(n);
        if (!c) return fail(EINVAL, std::string("process.capabilities.") + set + ": unknown capability \"" + n + "\"");
        m |= uint64_t{1} << *c;
    }
    return m;
}

int kernel_last_cap() {
    static int last = [] {
        int bits = static_cast<int>(cap_max_bits());
        return bits > 0 ? bits - 1 : 40;
    }();
    return last;
}
}  // namespace

bool holds_capabilities(uint64_t mask) {
    cap_t caps = cap_get_proc();
    if (!caps) return false;
    bool all = true;
    for (int c = 0; c <= 63 && all; ++c) {
        if (!(mask & (uint64_t{1} << c))) continue;
        cap_flag_value_t v = CAP_CLEAR;
        all = cap_get_flag(caps, static_cast<cap_value_t>(c), CAP_EFFECTIVE, &v) == 0 && v == CAP_SET;
    }
    cap_free(caps);
    return all;
}

Result<CapabilitySets> capability_sets(const oci::Capabilities& caps) {
    CapabilitySets s;
    FB_ASSIGN(s.bounding, mask_of(caps.bounding, "bounding"));
    FB_ASSIGN(s.effective, mask_of(caps.effective, "effective"));
    FB_ASSIGN(s.permitted, mask_of(caps.permitted, "permitted"));
    FB_ASSIGN(s.inheritable, mask_of(caps.inheritable, "inheritable"));
    FB_ASSIGN(s.ambient, mask_of(caps.ambient, "ambient"));
    return s;
}

Result<void> drop_bounding_set(uint64_t keep) {
    for (int c = 0; c <= kernel_last_cap(); ++c) {
        if (keep & (uint64_t{1} << c)) continue;
        if (::prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            return sys_error("drop capability " + std::to_string(c) + " from the bounding set");
    }
    return {};
}

Result<void> apply_capabilities(const CapabilitySets& sets) {
    cap_t caps = cap_init();
    if (!caps) return sys_error("cap_init");
    auto set_flag = [&](cap_flag_t flag, uint64_t mask) {
        std::vector<cap_value_t> values;
        for (int c = 0; c <= kernel_last_cap(); ++c)
            if (mask & (uint64_t{1} << c)) values.push_back(c);
        if (values.empty()) return 0;
        return cap_set_flag(caps, flag, static_cast<int>(values.size()), values.data(), CAP_SET);
    };
    if (set_flag(CAP_EFFECTIVE, sets.effective) < 0 || set_flag(CAP_PERMITTED, sets.permitted) < 0 ||
        set_flag(CAP_INHERITABLE, sets.inheritable) < 0) {
        int e = errno;
        cap_free(caps);
        return sys_error(e, "cap_set_flag");
    }
    int r = cap_set_proc(caps);
    int e = errno;
    cap_free(caps);
    if (r < 0) return sys_error(e, "set capabilities");

    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) return sys_error("clear ambient capabilities");
    for (int c = 0; c <= kernel_last_cap(); ++c) {
        if (!(sets.ambient & (uint64_t{1} << c))) continue;
        // Raising needs the capability in both permitted and inheritable; runc ignores
        // the failure in that case, and so do we.
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0);
    }
    return {};
}

}  // namespace forkbox
