#include "libforkbox/container/net_devices.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/process/rtnetlink.hpp"

namespace forkbox {

namespace {

// A device as it is before a move: a move drops its addresses and takes it down.
struct DeviceState {
    int index = 0;
    bool up = false;
    std::vector<LinkAddress> addresses;
};

Result<DeviceState> state_of(const Rtnetlink& ns, const std::string& name) {
    DeviceState d;
    FB_ASSIGN(d.index, ns.index_of(name));
    d.up = ns.is_up(name);
    FB_ASSIGN(d.addresses, ns.permanent_addresses(d.index));
    return d;
}

// Once moved to the namespace of `to`, named `new_name`: its addresses and up state back.
Result<void> restore(const DeviceState& d, const Rtnetlink& to, const std::string& new_name) {
    FB_ASSIGN(int index, to.index_of(new_name));
    for (const auto& a : d.addresses) {
        auto added = to.add_address(index, a);
        if (!added && added.error().errnum() != EEXIST) return added;
    }
    if (d.up) FB_TRY(to.set_up(new_name));
    return {};
}

Result<unique_fd> own_network_namespace() {
    unique_fd ns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!ns) return sys_error("open /proc/thread-self/ns/net");
    return ns;
}

}  // namespace

Result<void> move_net_devices_in(const std::vector<NetDeviceMove>& devices, int netns_fd) {
    if (devices.empty()) return {};
    FB_ASSIGN(unique_fd host_fd, own_network_namespace());
    struct stat host_ns {}, container_ns {};
    if (::fstat(host_fd.get(), &host_ns) < 0 || ::fstat(netns_fd, &container_ns) < 0)
        return sys_error("linux.netDevices: stat the network namespaces");
    if (host_ns.st_ino == container_ns.st_ino && host_ns.st_dev == container_ns.st_dev)
        return fail(EINVAL, "linux.netDevices: the container's network namespace is the host's");
    FB_ASSIGN(Rtnetlink host, Rtnetlink::open());
    FB_ASSIGN(Rtnetlink inside, Rtnetlink::open(netns_fd));
    std::vector<DeviceState> states;
    for (const auto& d : devices) {
        auto state = state_of(host, d.host_name);
        if (!state) return std::unexpected(state.error().wrap("linux.netDevices"));
        states.push_back(std::move(*state));
        // The kernel moves a device first and renames it after: a name taken in the
        // container would leave it there under its host name. So none may be taken.
        for (const auto& name : {d.container_name, d.host_name})
            if (inside.index_of(name))
                return fail(EEXIST, "linux.netDevices: the container's network namespace has a device " + name);
    }
    for (size_t i = 0; i < devices.size(); ++i) {
        const NetDeviceMove& d = devices[i];
        auto moved = host.move(states[i].index, netns_fd, d.container_name);
        if (moved) moved = restore(states[i], inside, d.container_name);
        if (moved) continue;
        // Back out what moved: the host keeps its devices. This one may be there, renamed
        // or not (the names were free, so a device of either name is this one).
        std::vector<NetDeviceMove> done(devices.begin(), devices.begin() + static_cast<long>(i));
        done.push_back(d);
        done.push_back(NetDeviceMove{d.host_name, d.host_name});
        (void)move_net_devices_out(done, netns_fd);
        return std::unexpected(moved.error().wrap("linux.netDevices: " + d.host_name + " as " + d.container_name));
    }
    return {};
}

Result<void> move_net_devices_out(const std::vector<NetDeviceMove>& devices, int netns_fd) {
    if (devices.empty()) return {};
    FB_ASSIGN(unique_fd host_fd, own_network_namespace());
    FB_ASSIGN(Rtnetlink host, Rtnetlink::open());
    FB_ASSIGN(Rtnetlink inside, Rtnetlink::open(netns_fd));
    Result<void> first = {};
    for (const auto& d : devices) {
        auto state = state_of(inside, d.container_name);
        if (!state) {
            if (state.error().errnum() != ENODEV && first) first = std::unexpected(state.error());
            continue;  // not there (any more): nothing to move
        }
        auto moved = inside.move(state->index, host_fd.get(), d.host_name);
        if (moved) moved = restore(*state, host, d.host_name);
        if (!moved && first)
            first = std::unexpected(moved.error().wrap("move " + d.container_name + " back to the host as " + d.host_name));
    }
    return first;
}

}  // namespace forkbox
