#include "libforkbox/process/sync.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "libforkbox/base/unix_socket.hpp"

namespace forkbox {

namespace {
struct Header {
    uint32_t type;
    int32_t value;
};
constexpr size_t kMaxPayload = 200 * 1024;
}  // namespace

const char* sync_type_name(SyncType t) {
    switch (t) {
    case SyncType::Go: return "go";
    case SyncType::UsernsReady: return "userns-ready";
    case SyncType::UsernsDone: return "userns-done";
    case SyncType::InitPid: return "init-pid";
    case SyncType::RuntimeHooks: return "runtime-hooks";
    case SyncType::RuntimeHooksDone: return "runtime-hooks-done";
    case SyncType::Ready: return "ready";
    case SyncType::Error: return "error";
    case SyncType::SeccompListener: return "seccomp-listener";
    case SyncType::SeccompListenerDone: return "seccomp-listener-done";
    case SyncType::Recorded: return "recorded";
    case SyncType::CgroupsPlaced: return "cgroups-placed";
    }
    return "unknown";
}

Result<void> sync_send(int fd, SyncType type, int32_t value, std::string_view payload, std::span<const int> pass_fds) {
    if (payload.size() > kMaxPayload) payload = payload.substr(0, kMaxPayload);
    if (pass_fds.size() > kSyncMaxFds) return fail(E2BIG, std::string("sync: too many fds for ") + sync_type_name(type));
    Header h{static_cast<uint32_t>(type), value};
    struct iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(payload.data()), payload.size()}};
    struct msghdr msg {};
    msg.msg_iov = iov;
    msg.msg_iovlen = payload.empty() ? 1 : 2;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kSyncMaxFds)] = {};
    if (!pass_fds.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * pass_fds.size());
        cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * pass_fds.size());
        std::memcpy(CMSG_DATA(cm), pass_fds.data(), sizeof(int) * pass_fds.size());
    }
    for (;;) {
        ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n >= 0) return {};
        if (errno != EINTR) return sys_error(std::string("sync: send ") + sync_type_name(type));
    }
}

Result<SyncMessage> sync_recv(int fd) {
    // The message's own size first (a SEQPACKET peek with MSG_TRUNC reports it): a buffer
    // of the largest size, zeroed, would fault in 200 KB on every message.
    // Past a reset: init may have exited with our last message unread, its error sent.
    char probe;
    struct iovec probe_iov {&probe, 1};
    struct msghdr peek {};
    peek.msg_iov = &probe_iov;
    peek.msg_iovlen = 1;
    bool reset_seen = false;
    ssize_t size = recvmsg_past_reset(fd, &peek, MSG_PEEK | MSG_TRUNC, reset_seen);
    if (size < 0) return sys_error("sync: receive");
    if (size == 0) return fail(EPIPE, "sync: peer exited");
    std::vector<char> buf(std::min(static_cast<size_t>(size), sizeof(Header) + kMaxPayload));
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kSyncMaxFds)] = {};
    struct iovec iov {buf.data(), buf.size()};
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg_past_reset(fd, &msg, MSG_CMSG_CLOEXEC, reset_seen);
    if (n < 0) return sys_error("sync: receive");
    if (n == 0) return fail(EPIPE, "sync: peer exited");
    if (static_cast<size_t>(n) < sizeof(Header)) return fail(EPROTO, "sync: short message");
    Header h;
    std::memcpy(&h, buf.data(), sizeof h);
    SyncMessage m;
    m.type = static_cast<SyncType>(h.type);
    m.value = h.value;
    m.payload.assign(buf.data() + sizeof h, static_cast<size_t>(n) - sizeof h);
    if (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int passed;
            std::memcpy(&passed, CMSG_DATA(cm) + i * sizeof(int), sizeof passed);
            m.fds.emplace_back(passed);
        }
    }
    return m;
}

Result<SyncMessage> sync_expect(int fd, SyncType type) {
    FB_ASSIGN(auto m, sync_recv(fd));
    if (m.type == SyncType::Error) return fail(m.value, m.payload);
    if (m.type != type)
        return fail(EPROTO, std::string("sync: expected ") + sync_type_name(type) + ", got " +
                                sync_type_name(m.type));
    return m;
}

bool sync_peer_gone(int fd) {
    // A SEQPACKET socket whose peer closed polls POLLHUP, queued messages or not.
    struct pollfd p {fd, 0, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

}  // namespace forkbox
