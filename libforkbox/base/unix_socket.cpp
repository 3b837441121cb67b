#include "libforkbox/base/unix_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace forkbox {

Result<void> send_with_fds(int sock, std::string_view data, std::span<const int> fds, std::string_view what) {
    constexpr size_t kMaxFds = 8;
    if (fds.size() > kMaxFds) return fail(EINVAL, std::string(what) + ": too many fds");
    iovec iov{const_cast<char*>(data.data()), data.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n;
    do n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) return sys_error(std::string(what));
    return {};
}

ssize_t recvmsg_past_reset(int sock, msghdr* msg, int flags, bool& reset_seen) {
    for (;;) {
        ssize_t n = ::recvmsg(sock, msg, flags);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == ECONNRESET && !reset_seen) {
            reset_seen = true;
            continue;
        }
        return n;
    }
}

Result<size_t> receive_message(int sock, std::string& buf, std::vector<unique_fd>& fds, std::string_view what) {
    constexpr size_t kMaxFds = 8;
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    bool reset_seen = false;
    ssize_t n = recvmsg_past_reset(sock, &msg, MSG_CMSG_CLOEXEC, reset_seen);
    if (n < 0) return sys_error(std::string(what));
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int f;
            std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
            fds.emplace_back(f);
        }
    }
    if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
        fds.clear();
        return fail(EPROTO, std::string(what) + ": truncated message");
    }
    return static_cast<size_t>(n);
}

Result<std::string> receive_with_fds(int sock, std::vector<unique_fd>& fds, std::string_view what) {
    std::string buf(4096, '\0');
    FB_ASSIGN(size_t n, receive_message(sock, buf, fds, what));
    buf.resize(n);
    return buf;
}

std::string receive_buffer(size_t bytes) {
    std::string buf;
    buf.resize_and_overwrite(bytes, [](char*, size_t n) { return n; });
    return buf;
}

Acceptor::Acceptor(int listener) : listener_(listener), reserve_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

int Acceptor::accept(const std::function<void(int conn)>& shed) {
    for (;;) {
        int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0 || (errno != EMFILE && errno != ENFILE)) return fd;
        int exhausted = errno;
        if (!reserve_) reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!reserve_) {
            errno = exhausted;
            return -1;  // no room at all: the caller stops for now
        }
        reserve_.reset();
        int conn = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        int accept_errno = errno;
        if (conn >= 0) {
            if (shed) shed(conn);
            ::close(conn);
        }
        reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (conn < 0) {
            errno = accept_errno;
            return -1;
        }
    }
}

}  // namespace forkbox
