// Network devices through rtnetlink (NETLINK_ROUTE): what linux.netDevices needs to move a
// host device into a container's network namespace and back, keeping its addresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// An address of a device as RTM_GETADDR gives it, enough to add it again elsewhere.
struct LinkAddress {
    uint8_t family = 0, prefix_length = 0, scope = 0;
    uint32_t flags = 0;
    std::vector<uint8_t> local, address;  // IFA_LOCAL, IFA_ADDRESS (raw bytes)
};

// A NETLINK_ROUTE socket and the network namespace it was made in: its requests act there.
class Rtnetlink {
public:
    // In the calling thread's network namespace, or with `netns_fd` in that one (the thread
    // visits it for the socket() calls only).
    static Result<Rtnetlink> open(int netns_fd = -1);

    // The device's index here; an error naming the device when there is none.
    Result<int> index_of(const std::string& name) const;
    bool is_up(const std::string& name) const;
    // Its addresses that have no lifetime (IFA_F_PERMANENT): those a move would drop.
    Result<std::vector<LinkAddress>> permanent_addresses(int index) const;
    // Moves the device to the network namespace `netns_fd`, named `new_name` there, in one
    // request: a name taken there fails it with the device left where it was.
    Result<void> move(int index, int netns_fd, const std::string& new_name) const;
    Result<void> add_address(int index, const LinkAddress& a) const;
    Result<void> set_up(const std::string& name) const;

private:
    // send: numbers and sends a message; request: that, then waits for the kernel's ack.
    Result<void> send(std::vector<uint8_t>& message, const std::string& what) const;
    Result<void> request(std::vector<uint8_t>& message, const std::string& what) const;
    unique_fd netlink_, inet_;  // inet: the ioctl socket for flags, same namespace
    mutable uint32_t sequence_ = 0;
};

}  // namespace forkbox
