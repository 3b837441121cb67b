#include "libforkbox/process/rootless.hpp"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "libforkbox/base/files.hpp"

namespace forkbox {

namespace {

// The initial user namespace maps every id to itself: "0 0 4294967295".
bool uid_map_is_initial(const std::string& map) {
    std::istringstream in(map);
    unsigned long inside = 1, outside = 1, count = 0;
    if (!(in >> inside >> outside >> count)) return false;
    std::string more;
    return inside == 0 && outside == 0 && count == 4294967295UL && !(in >> more);
}

}  // namespace

const RootlessMode& rootless_mode() {
    static const RootlessMode mode = [] {
        RootlessMode m;
        m.unprivileged = ::geteuid() != 0;
        auto map = read_file("/proc/self/uid_map");
        m.in_user_namespace = map && !uid_map_is_initial(*map);
        return m;
    }();
    return mode;
}

std::optional<uid_t> outer_id(std::string_view map, uid_t inside) {
    std::istringstream in{std::string(map)};
    unsigned long first = 0, outside = 0, count = 0;
    while (in >> first >> outside >> count)
        if (inside >= first && inside - first < count) return static_cast<uid_t>(outside + (inside - first));
    return std::nullopt;
}

uid_t host_euid() {
    uid_t euid = ::geteuid();
    if (!rootless_mode().in_user_namespace) return euid;
    auto map = read_file("/proc/self/uid_map");
    if (!map) return euid;
    return outer_id(*map, euid).value_or(euid);
}

std::string default_state_root() {
    const char* xdg = std::getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg) {
        if (::geteuid() != 0) return std::string(xdg) + "/forkbox";
        const char* user = std::getenv("USER");
        bool user_is_root = user && std::string(user) == "root";
        if (!user_is_root && rootless_mode().in_user_namespace) return std::string(xdg) + "/forkbox";
    }
    return "/run/forkbox";
}

}  // namespace forkbox
