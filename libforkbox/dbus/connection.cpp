#include "libforkbox/dbus/connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>

namespace forkbox::dbus {

std::string sasl_external_preamble(uid_t uid) {
    static const char* hex = "0123456789abcdef";
    std::string digits = std::to_string(uid), encoded;
    for (char c : digits) {
        encoded += hex[static_cast<unsigned char>(c) >> 4];
        encoded += hex[static_cast<unsigned char>(c) & 0xf];
    }
    return std::string(1, '\0') + "AUTH EXTERNAL " + encoded + "\r\nBEGIN\r\n";
}

Error reply_error(const Message& reply) {
    struct Known {
        const char* name;
        int err;
    };
    static const Known known[] = {
        {"org.freedesktop.systemd1.UnitExists", EEXIST},
        {"org.freedesktop.systemd1.NoSuchUnit", ENOENT},
        {"org.freedesktop.systemd1.NoSuchJob", ENOENT},
        {"org.freedesktop.DBus.Error.AccessDenied", EACCES},
        {"org.freedesktop.DBus.Error.InteractiveAuthorizationRequired", EACCES},
        {"org.freedesktop.DBus.Error.InvalidArgs", EINVAL},
        {"org.freedesktop.DBus.Error.PropertyReadOnly", EROFS},
        {"org.freedesktop.DBus.Error.UnknownProperty", EROFS},
        {"org.freedesktop.DBus.Error.ServiceUnknown", EHOSTDOWN},
        {"org.freedesktop.DBus.Error.NameHasNoOwner", EHOSTDOWN},
        {"org.freedesktop.DBus.Error.NoMemory", ENOMEM},
        {"org.freedesktop.DBus.Error.NoReply", ETIMEDOUT},
        {"org.freedesktop.DBus.Error.Timeout", ETIMEDOUT},
    };
    int err = EIO;
    for (const auto& k : known)
        if (reply.error_name == k.name) err = k.err;
    std::string text;
    if (!reply.body.empty() && reply.body[0].code() == 's') text = reply.body[0].as_string();
    if (text.empty()) text = "error";
    return Error(err, text + " (" + reply.error_name + ")");
}

namespace {

// The first unix:path= of a D-Bus address list ("transport:key=value,...;..."), %-unescaped.
std::optional<std::string> unix_path_in(std::string_view all) {
    while (!all.empty()) {
        size_t semi = all.find(';');
        std::string_view address = all.substr(0, semi);
        all = semi == std::string_view::npos ? std::string_view() : all.substr(semi + 1);
        if (!address.starts_with("unix:")) continue;
        std::string_view keys = address.substr(5);
        while (!keys.empty()) {
            size_t comma = keys.find(',');
            std::string_view kv = keys.substr(0, comma);
            keys = comma == std::string_view::npos ? std::string_view() : keys.substr(comma + 1);
            if (!kv.starts_with("path=")) continue;
            std::string path;
            std::string_view v = kv.substr(5);
            for (size_t i = 0; i < v.size(); ++i) {
                if (v[i] == '%' && i + 2 < v.size()) {
                    path += static_cast<char>(std::strtol(std::string(v.substr(i + 1, 2)).c_str(), nullptr, 16));
                    i += 2;
                } else {
                    path += v[i];
                }
            }
            return path;
        }
    }
    return std::nullopt;
}

Result<std::string> bus_path_from(const char* variable, const std::string& fallback) {
    const char* env = std::getenv(variable);
    if (!env || !*env) return fallback;
    if (auto path = unix_path_in(env)) return *path;
    return fail(EINVAL, std::string(variable) + " has no unix:path= address: " + env);
}

}  // namespace

Result<std::string> system_bus_path() { return bus_path_from("DBUS_SYSTEM_BUS_ADDRESS", "/run/dbus/system_bus_socket"); }

Result<std::string> session_bus_path(const std::string& runtime_dir) {
    return bus_path_from("DBUS_SESSION_BUS_ADDRESS", runtime_dir + "/bus");
}

Result<Connection> Connection::open(const std::string& path, bool bus, uid_t auth_uid) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) return fail(ENAMETOOLONG, "D-Bus socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) return sys_error("connect " + path);
    return adopt(std::move(fd), bus, auth_uid);
}

Connection Connection::adopt(unique_fd fd, bool bus, uid_t auth_uid) {
    Connection c(std::move(fd), bus);
    c.preamble_ = sasl_external_preamble(auth_uid);
    if (bus)
        c.hello_serial_ = c.queue(Message::method_call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                       "org.freedesktop.DBus", "Hello"));
    return c;
}

uint32_t Connection::queue(Message m) {
    m.serial = next_serial_++;
    if (next_serial_ == 0) next_serial_ = 1;
    out_ += encode_message(m);
    return m.serial;
}

namespace {
// Milliseconds left until the deadline, rounded up; 0 once it has passed.
int remaining_ms(Clock::time_point deadline) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

Result<void> wait_fd(int fd, short events, Clock::time_point deadline, const char* what) {
    for (;;) {
        struct pollfd p{fd, events, 0};
        int r = ::poll(&p, 1, remaining_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return sys_error("poll D-Bus socket");
        if (r == 0) return fail(ETIMEDOUT, std::string("timed out ") + what);
        return {};
    }
}
}  // namespace

Result<void> Connection::send_all(const std::string& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::send(fd_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            FB_TRY(wait_fd(fd_.get(), POLLOUT, deadline, "writing to D-Bus"));
            continue;
        }
        if (n < 0) return sys_error("write to D-Bus");
        done += static_cast<size_t>(n);
    }
    return {};
}

Result<void> Connection::authenticate(Clock::time_point deadline) {
    if (!preamble_.empty()) {
        FB_TRY(send_all(preamble_, deadline));
        preamble_.clear();
    }
    while (!authenticated_) {
        size_t eol = in_.find("\r\n");
        if (eol == std::string::npos) {
            if (in_.size() > 4096) return fail(EPROTO, "D-Bus authentication: no end of line");
            FB_TRY(fill(deadline));
            continue;
        }
        std::string line = in_.substr(0, eol);
        in_.erase(0, eol + 2);
        if (line.starts_with("OK ")) {
            authenticated_ = true;
        } else if (line.starts_with("REJECTED")) {
            return fail(EACCES, "D-Bus authentication (EXTERNAL) rejected");
        } else {
            return fail(EPROTO, "D-Bus authentication: unexpected answer \"" + line + "\"");
        }
    }
    return {};
}

Result<void> Connection::flush(Clock::time_point deadline) {
    FB_TRY(authenticate(deadline));
    FB_TRY(send_all(out_, deadline));
    out_.clear();
    return {};
}

Result<void> Connection::fill(Clock::time_point deadline) {
    char buf[16384];
    for (;;) {
        ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            in_.append(buf, static_cast<size_t>(n));
            return {};
        }
        if (n == 0) return fail(ECONNRESET, "D-Bus connection closed by the peer");
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return sys_error("read from D-Bus");
        FB_TRY(wait_fd(fd_.get(), POLLIN, deadline, "waiting for D-Bus"));
    }
}

Result<Message> Connection::next(Clock::time_point deadline) {
    FB_TRY(flush(deadline));
    for (;;) {
        if (in_.size() >= 16) {
            FB_ASSIGN(size_t length, message_length(std::string_view(in_).substr(0, 16)));
            if (in_.size() >= length) {
                auto m = decode_message(std::string_view(in_).substr(0, length));
                in_.erase(0, length);
                return m;
            }
        }
        FB_TRY(fill(deadline));
    }
}

Result<Message> Connection::reply(uint32_t serial, Clock::time_point deadline) {
    for (;;) {
        FB_ASSIGN(Message m, next(deadline));
        switch (m.type) {
        case MessageType::MethodReturn:
        case MessageType::Error:
            if (m.reply_serial == serial) {
                if (m.type == MessageType::Error) return std::unexpected(reply_error(m));
                return m;
            }
            if (m.reply_serial == hello_serial_ && m.type == MessageType::Error)
                return std::unexpected(reply_error(m).wrap("D-Bus Hello"));
            break;  // an answer to a call nobody waits for any more
        case MessageType::Signal: signals_.push_back(std::move(m)); break;
        default: break;  // nobody calls forkbox's methods
        }
    }
}

Result<Message> Connection::call(Message m, Clock::time_point deadline) {
    uint32_t serial = queue(std::move(m));
    return reply(serial, deadline);
}

Result<Message> Connection::wait_signal(const std::function<bool(const Message&)>& match, Clock::time_point deadline) {
    while (!signals_.empty()) {
        Message m = std::move(signals_.front());
        signals_.pop_front();
        if (match(m)) return m;
    }
    for (;;) {
        FB_ASSIGN(Message m, next(deadline));
        if (m.type == MessageType::Signal && match(m)) return m;
        if (m.type == MessageType::Error && m.reply_serial == hello_serial_)
            return std::unexpected(reply_error(m).wrap("D-Bus Hello"));
    }
}

}  // namespace forkbox::dbus
