#include "libforkbox/zygote.hpp"

#include <linux/nsfs.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "libforkbox/log.hpp"
#include "oci/linux_names.hpp"

namespace forkbox::zygote {

namespace {

// A slow or wedged daemon must not cost a create more than this before the cold path.
constexpr int kReplyTimeoutMs = 200;

Result<unique_fd> connect_daemon(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path) return fail(ENAMETOOLONG, "socket path " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unique_fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
        return sys_error("connect to " + path);
    return fd;
}

// One message with up to max_fds fds attached.
Result<std::string> receive(int fd, std::vector<unique_fd>& fds, size_t max_fds) {
    pollfd p{fd, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, kReplyTimeoutMs);
    while (r < 0 && errno == EINTR);
    if (r == 0) return fail(ETIMEDOUT, "no reply from the zygote daemon");
    char buf[256];
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * std::min<size_t>(max_fds, 8));
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) return sys_error("receive from the zygote daemon");
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int f;
            std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
            fds.emplace_back(f);
        }
    }
    if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) return fail(EPROTO, "truncated reply from the zygote daemon");
    return std::string(buf, static_cast<size_t>(n));
}

Result<int> parse_int(std::string_view s) {
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return fail(EPROTO, "bad number " + std::string(s));
    return v;
}

}  // namespace

std::string default_socket_path() {
    if (const char* s = std::getenv("FORKBOX_SOCKET"); s && *s) return s;
    return "/run/forkbox/forkbox.sock";
}

int template_key(const Plan& plan) {
    if (plan.new_namespaces & CLONE_NEWUSER) return 0;
    for (const auto& j : plan.joins)
        if (j.clone_flag == CLONE_NEWUSER) return 0;
    return plan.new_namespaces & kTemplateNamespaces;
}

int namespace_count(int key) {
    int n = 0;
    for (int flag : kTemplateOrder) n += (key & flag) ? 1 : 0;
    return n;
}

std::string encode_request(const Request& r) {
    if (r.op == Request::Op::Stats) return "stats";
    return "take " + std::to_string(r.key);
}

Result<Request> decode_request(std::string_view text) {
    Request r;
    if (text == "stats") {
        r.op = Request::Op::Stats;
        return r;
    }
    if (!text.starts_with("take ")) return fail(EPROTO, "unknown request");
    FB_ASSIGN(r.key, parse_int(text.substr(5)));
    if (r.key == 0 || (r.key & ~kTemplateNamespaces)) return fail(EPROTO, "bad template key");
    return r;
}

std::optional<std::vector<OpenNamespace>> take_template(const std::string& socket_path, int key) {
    auto attempt = [&]() -> Result<std::vector<OpenNamespace>> {
        FB_ASSIGN(unique_fd sock, connect_daemon(socket_path));
        std::string req = encode_request({Request::Op::Take, key});
        if (::send(sock.get(), req.data(), req.size(), MSG_NOSIGNAL) < 0) return sys_error("send to the zygote daemon");
        std::vector<unique_fd> fds;
        FB_ASSIGN(std::string reply, receive(sock.get(), fds, static_cast<size_t>(namespace_count(key))));
        if (reply == "none") return fail(ENOENT, "no warm template for this container");
        if (reply != "ok " + std::to_string(key) || fds.size() != static_cast<size_t>(namespace_count(key)))
            return fail(EPROTO, "unexpected reply from the zygote daemon: " + reply);
        std::vector<OpenNamespace> out;
        size_t next = 0;
        for (int flag : kTemplateOrder) {
            if (!(key & flag)) continue;
            // Trust, but check: each fd must be a namespace of the type it stands for.
            if (::ioctl(fds[next].get(), NS_GET_NSTYPE) != flag)
                return fail(EPROTO, "the zygote daemon sent a wrong namespace fd");
            OpenNamespace ns;
            ns.clone_flag = flag;
            ns.path = "zygote template";
            ns.fd = std::move(fds[next++]);
            out.push_back(std::move(ns));
        }
        return out;
    };
    auto r = attempt();
    if (!r) {
        log::debug("zygote: cold path: " + std::string(r.error().what()));
        return std::nullopt;
    }
    return std::move(*r);
}

Result<std::string> daemon_stats(const std::string& socket_path) {
    FB_ASSIGN(unique_fd sock, connect_daemon(socket_path));
    std::string req = encode_request({Request::Op::Stats, 0});
    if (::send(sock.get(), req.data(), req.size(), MSG_NOSIGNAL) < 0) return sys_error("send to the zygote daemon");
    std::vector<unique_fd> fds;
    return receive(sock.get(), fds, 0);
}

}  // namespace forkbox::zygote
