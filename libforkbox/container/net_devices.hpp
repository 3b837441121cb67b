// linux.netDevices: host network devices moved into a container's network namespace (named
// as it asks, with their permanent addresses and up state) and back out at delete.
#pragma once

#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/plan/plan.hpp"

namespace forkbox {

// Every device is looked up first (a missing one fails before any moves); a failure midway
// moves those already moved back out. Needs CAP_NET_ADMIN over the host's namespace.
Result<void> move_net_devices_in(const std::vector<NetDeviceMove>& devices, int netns_fd);

// Moves each device still in the namespace (by its name there) back to the caller's, under
// its host name, with its addresses and up state. Tries all; the first error is returned.
Result<void> move_net_devices_out(const std::vector<NetDeviceMove>& devices, int netns_fd);

// Holds the container's network namespace (so it outlives a killed init) and moves the
// devices back out on destruction unless dismissed: a create that fails after moving them
// leaves the host's devices where they were.
class NetDevicesGuard {
public:
    NetDevicesGuard(std::vector<NetDeviceMove> devices, unique_fd netns)
        : devices_(std::move(devices)), netns_(std::move(netns)) {}
    NetDevicesGuard(const NetDevicesGuard&) = delete;
    NetDevicesGuard& operator=(const NetDevicesGuard&) = delete;
    ~NetDevicesGuard() {
        if (netns_) (void)move_net_devices_out(devices_, netns_.get());
    }
    void dismiss() { netns_.reset(); }

private:
    std::vector<NetDeviceMove> devices_;
    unique_fd netns_;
};

}  // namespace forkbox
