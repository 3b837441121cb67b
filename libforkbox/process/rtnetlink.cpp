#include "libforkbox/process/rtnetlink.hpp"

#include <fcntl.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace forkbox {

namespace {

constexpr size_t kAlign = 4;
size_t aligned(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

// A request: header, the fixed message (ifinfomsg, ifaddrmsg), then attributes.
template <typename Fixed>
std::vector<uint8_t> start_message(uint16_t type, uint16_t flags, const Fixed& fixed) {
    std::vector<uint8_t> m(NLMSG_HDRLEN + aligned(sizeof(Fixed)));
    auto* h = reinterpret_cast<nlmsghdr*>(m.data());
    h->nlmsg_type = type;
    h->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    std::memcpy(m.data() + NLMSG_HDRLEN, &fixed, sizeof fixed);
    return m;
}

void add_attribute(std::vector<uint8_t>& m, uint16_t type, const void* data, size_t size) {
    size_t at = aligned(m.size());
    m.resize(at + aligned(RTA_LENGTH(size)));
    rtattr a{static_cast<unsigned short>(RTA_LENGTH(size)), type};
    std::memcpy(m.data() + at, &a, sizeof a);
    std::memcpy(m.data() + at + RTA_LENGTH(0), data, size);
}

void finish(std::vector<uint8_t>& m, uint32_t sequence) {
    auto* h = reinterpret_cast<nlmsghdr*>(m.data());
    h->nlmsg_len = static_cast<uint32_t>(m.size());
    h->nlmsg_seq = sequence;
}

}  // namespace

Result<Rtnetlink> Rtnetlink::open(int netns_fd) {
    unique_fd home;
    if (netns_fd >= 0) {
        home.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
        if (!home) return sys_error("open /proc/thread-self/ns/net");
        if (::setns(netns_fd, CLONE_NEWNET) < 0) return sys_error("enter the container's network namespace");
    }
    Rtnetlink r;
    r.netlink_.reset(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    int netlink_errno = errno;
    r.inet_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    int inet_errno = errno;
    // Never go on in a foreign network namespace.
    if (home && ::setns(home.get(), CLONE_NEWNET) < 0) std::abort();
    if (!r.netlink_) return fail(netlink_errno, "netlink socket");
    if (!r.inet_) return fail(inet_errno, "socket for device flags");
    return r;
}

Result<int> Rtnetlink::index_of(const std::string& name) const {
    ifreq ifr{};
    if (name.size() >= sizeof ifr.ifr_name) return fail(EINVAL, "network device name " + name + " is too long");
    std::memcpy(ifr.ifr_name, name.c_str(), name.size() + 1);
    if (::ioctl(inet_.get(), SIOCGIFINDEX, &ifr) < 0) {
        if (errno == ENODEV) return fail(ENODEV, "no network device " + name);
        return sys_error("network device " + name);
    }
    return ifr.ifr_ifindex;
}

bool Rtnetlink::is_up(const std::string& name) const {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), sizeof ifr.ifr_name - 1);
    return ::ioctl(inet_.get(), SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP);
}

Result<void> Rtnetlink::set_up(const std::string& name) const {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), sizeof ifr.ifr_name - 1);
    if (::ioctl(inet_.get(), SIOCGIFFLAGS, &ifr) < 0) return sys_error("flags of network device " + name);
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (::ioctl(inet_.get(), SIOCSIFFLAGS, &ifr) < 0) return sys_error("set network device " + name + " up");
    return {};
}

Result<void> Rtnetlink::send(std::vector<uint8_t>& message, const std::string& what) const {
    finish(message, ++sequence_);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(netlink_.get(), message.data(), message.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
        return sys_error(what + ": netlink send");
    return {};
}

Result<void> Rtnetlink::request(std::vector<uint8_t>& message, const std::string& what) const {
    FB_TRY(send(message, what));
    alignas(nlmsghdr) char buf[8192];
    for (;;) {
        ssize_t n = ::recv(netlink_.get(), buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error(what + ": netlink receive");
        }
        for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != sequence_ || h->nlmsg_type != NLMSG_ERROR) continue;
            int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
            if (err == 0) return {};
            return fail(err, what);
        }
    }
}

Result<std::vector<LinkAddress>> Rtnetlink::permanent_addresses(int index) const {
    ifaddrmsg all{};
    auto m = start_message(RTM_GETADDR, NLM_F_DUMP, all);
    FB_TRY(send(m, "list addresses"));
    std::vector<LinkAddress> out;
    alignas(nlmsghdr) char buf[16384];
    for (;;) {
        ssize_t n = ::recv(netlink_.get(), buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("list addresses: netlink receive");
        }
        for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != sequence_) continue;
            if (h->nlmsg_type == NLMSG_DONE) return out;
            if (h->nlmsg_type == NLMSG_ERROR) return fail(-reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error, "list addresses");
            if (h->nlmsg_type != RTM_NEWADDR) continue;
            auto* ifa = reinterpret_cast<ifaddrmsg*>(NLMSG_DATA(h));
            if (static_cast<int>(ifa->ifa_index) != index) continue;
            LinkAddress a;
            a.family = ifa->ifa_family;
            a.prefix_length = ifa->ifa_prefixlen;
            a.scope = ifa->ifa_scope;
            a.flags = ifa->ifa_flags;
            int left = static_cast<int>(IFA_PAYLOAD(h));
            for (auto* rta = IFA_RTA(ifa); RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
                auto* data = static_cast<uint8_t*>(RTA_DATA(rta));
                size_t size = RTA_PAYLOAD(rta);
                if (rta->rta_type == IFA_LOCAL) a.local.assign(data, data + size);
                if (rta->rta_type == IFA_ADDRESS) a.address.assign(data, data + size);
                if (rta->rta_type == IFA_FLAGS && size == sizeof(uint32_t)) std::memcpy(&a.flags, data, size);
            }
            // Link-local IPv6 addresses come back by themselves when the device is up.
            bool link_local = a.family == AF_INET6 && a.address.size() == 16 && a.address[0] == 0xfe &&
                              (a.address[1] & 0xc0) == 0x80;
            if ((a.flags & IFA_F_PERMANENT) && !link_local) out.push_back(std::move(a));
        }
    }
}

Result<void> Rtnetlink::move(int index, int netns_fd, const std::string& new_name) const {
    ifinfomsg link{};
    link.ifi_family = AF_UNSPEC;
    link.ifi_index = index;
    auto m = start_message(RTM_NEWLINK, NLM_F_ACK, link);
    uint32_t fd = static_cast<uint32_t>(netns_fd);
    add_attribute(m, IFLA_NET_NS_FD, &fd, sizeof fd);
    add_attribute(m, IFLA_IFNAME, new_name.c_str(), new_name.size() + 1);
    return request(m, "move network device " + std::to_string(index) + " as " + new_name);
}

Result<void> Rtnetlink::add_address(int index, const LinkAddress& a) const {
    ifaddrmsg msg{};
    msg.ifa_family = a.family;
    msg.ifa_prefixlen = a.prefix_length;
    msg.ifa_scope = a.scope;
    msg.ifa_index = static_cast<uint32_t>(index);
    auto m = start_message(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, msg);
    if (!a.local.empty()) add_attribute(m, IFA_LOCAL, a.local.data(), a.local.size());
    if (!a.address.empty()) add_attribute(m, IFA_ADDRESS, a.address.data(), a.address.size());
    uint32_t flags = a.flags & ~static_cast<uint32_t>(IFA_F_TENTATIVE | IFA_F_DADFAILED | IFA_F_DEPRECATED);
    add_attribute(m, IFA_FLAGS, &flags, sizeof flags);
    return request(m, "add an address to network device " + std::to_string(index));
}

}  // namespace forkbox
