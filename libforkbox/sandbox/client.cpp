#include "libforkbox/sandbox/client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/sandbox/request.hpp"

namespace forkbox::sandbox {

namespace {

Result<void> send_message(int fd, std::string_view m) {
    if (::send(fd, m.data(), m.size(), MSG_NOSIGNAL) < 0) return sys_error("send to the sandbox daemon");
    return {};
}

}  // namespace

Result<std::string> call_sandbox(const std::string& socket_path, std::string_view verb, std::string_view body,
                                 const std::optional<std::string>& stdin_data, const ClientOutput& output) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
        return fail(ENAMETOOLONG, "socket path " + socket_path);
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    unique_fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
        return sys_error("no sandbox daemon at " + socket_path + " (start one with: forkbox daemon)");
    std::string first = "sandbox/" + std::to_string(kProtocolVersion) + " " + std::string(verb) + "\n" + std::string(body);
    FB_TRY(send_message(fd.get(), first));
    if (stdin_data) {
        for (const auto& f : frames(kStdinData, *stdin_data)) FB_TRY(send_message(fd.get(), f));
        FB_TRY(send_message(fd.get(), std::string_view(&kStdinEnd, 1)));
    }
    std::string buf(kMaxFrameData + 1, '\0');
    bool reset_seen = false;
    for (;;) {
        ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), MSG_TRUNC);
        if (n < 0 && errno == EINTR) continue;
        // A daemon that closed with our messages unread resets the connection, and the
        // reply it queued first is still there for the next recv.
        if (n < 0 && errno == ECONNRESET && !reset_seen) {
            reset_seen = true;
            continue;
        }
        if (n < 0) return sys_error("receive from the sandbox daemon");
        if (n == 0) return fail(EPIPE, "the sandbox daemon closed the connection without a result");
        if (static_cast<size_t>(n) > buf.size()) return fail(EPROTO, "the sandbox daemon sent an oversized message");
        std::string_view m(buf.data() + 1, static_cast<size_t>(n - 1));
        switch (buf[0]) {
            case kStdoutData:
                if (output.stdout_data) output.stdout_data(m);
                break;
            case kStderrData:
                if (output.stderr_data) output.stderr_data(m);
                break;
            case kResult: return std::string(m);
            case kError: {
                auto doc = json::Document::parse(m);
                if (!doc) return fail(EPROTO, "the sandbox daemon sent a malformed error");
                auto kind = doc->root().get("error");
                auto message = doc->root().get("message");
                std::string k = kind ? kind->as_string().value_or("error") : "error";
                std::string text = message ? message->as_string().value_or("") : "";
                return fail(k == "invalid_request" ? EINVAL : k == "busy" ? EBUSY : EIO, k + ": " + text);
            }
            default: return fail(EPROTO, "the sandbox daemon sent an unknown message");
        }
    }
}

}  // namespace forkbox::sandbox
