#include "libforkbox/cgroup/systemd_manager.hpp"

#include <unistd.h>

#include <cstdlib>

#include "libforkbox/base/log.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/process/rootless.hpp"

namespace forkbox::systemd {

namespace {

using dbus::Message;
using dbus::Value;
using Clock = std::chrono::steady_clock;

constexpr const char* kService = "org.freedesktop.systemd1";
constexpr const char* kPath = "/org/freedesktop/systemd1";
constexpr const char* kManager = "org.freedesktop.systemd1.Manager";
constexpr const char* kPrivateSocket = "/run/systemd/private";
constexpr const char* kSystemBus = "system bus";
constexpr const char* kSessionBus = "session bus";
// How long a plain call (not a job) may take.
constexpr std::chrono::seconds kCallTimeout{25};

// No auto-start: systemd cannot be activated, and a bus that tried (its
// org.freedesktop.systemd1 service file runs /bin/false) would answer with a spawn error
// instead of ServiceUnknown, which is what sends forkbox to the private socket.
Message systemd_call(const char* interface, const char* member, std::vector<Value> body) {
    Message m = Message::method_call(kService, kPath, interface, member, std::move(body));
    m.flags |= dbus::kNoAutoStart;
    return m;
}

Value property_array(const Properties& props) {
    std::vector<Value> items;
    for (const auto& p : props) items.push_back(Value::structure({Value::string(p.name), Value::variant(p.value)}));
    return Value::array("(sv)", std::move(items));
}

// Errors that say the bus did not get the call to systemd: worth the private socket.
bool bus_unusable(const Error& e) {
    switch (e.errnum()) {
    case EHOSTDOWN:  // ServiceUnknown, NameHasNoOwner: systemd is not on this bus
    case ECONNRESET:
    case EPIPE:
    case EPROTO:
        return true;
    default:
        return false;
    }
}

}  // namespace

Result<Manager> Manager::connect() {
    if (rootless_mode().any()) return connect_user();
    auto bus = dbus::system_bus_path();
    if (bus) {
        auto c = dbus::Connection::open(*bus, true);
        if (c) return Manager(std::move(*c), kSystemBus, kPrivateSocket, ::geteuid(), false);
        log::debug("systemd: system bus " + *bus + ": " + c.error().what() + "; trying " + kPrivateSocket);
    }
    auto c = dbus::Connection::open(kPrivateSocket, false);
    if (!c) {
        std::string why = bus ? "the system bus (" + *bus + ") and " + kPrivateSocket : std::string(kPrivateSocket);
        return std::unexpected(c.error().wrap("systemd: cannot reach " + why + " (is systemd running?)"));
    }
    return Manager(std::move(*c), kPrivateSocket, kPrivateSocket, ::geteuid(), false);
}

Result<Manager> Manager::connect_user() {
    // From a user namespace (rootless podman's), the peer sees the host's uid: EXTERNAL must
    // name that one.
    uid_t uid = host_euid();
    const char* xdg = std::getenv("XDG_RUNTIME_DIR");
    std::string runtime = xdg && *xdg ? std::string(xdg) : "/run/user/" + std::to_string(uid);
    std::string private_socket = runtime + "/systemd/private";
    auto bus = dbus::session_bus_path(runtime);
    if (bus) {
        auto c = dbus::Connection::open(*bus, true, uid);
        if (c) return Manager(std::move(*c), kSessionBus, private_socket, uid, true);
        log::debug("systemd: session bus " + *bus + ": " + c.error().what() + "; trying " + private_socket);
    }
    auto c = dbus::Connection::open(private_socket, false, uid);
    if (!c) {
        std::string why = bus ? "the session bus (" + *bus + ") and " + private_socket : private_socket;
        return std::unexpected(c.error().wrap("systemd: cannot reach the user's manager: " + why +
                                              " (is `systemd --user` running, and XDG_RUNTIME_DIR set?)"));
    }
    return Manager(std::move(*c), private_socket, private_socket, uid, true);
}

template <typename F>
auto Manager::with_fallback(F&& f) -> decltype(f()) {
    auto r = f();
    if (r || answered_ || via_ == private_socket_ || !bus_unusable(r.error())) return r;
    auto c = dbus::Connection::open(private_socket_, false, auth_uid_);
    if (!c) return r;
    log::debug("systemd: " + r.error().what() + " on the " + via_ + "; using " + private_socket_);
    conn_ = std::move(*c);
    via_ = private_socket_;
    subscribed_ = false;
    subscribe_serial_ = 0;
    return f();
}

Message Manager::manager_call(const char* member, std::vector<Value> body) const {
    return systemd_call(kManager, member, std::move(body));
}

void Manager::subscribe() {
    // Signals reach a peer connection (the private socket) unconditionally; on the bus only
    // those a match rule asks for. systemd sends JobRemoved to the bus when someone
    // subscribed or when the job's own client is still there (us): the match is enough.
    if (subscribed_ || !conn_.is_bus()) return;
    subscribed_ = true;
    subscribe_serial_ = conn_.queue(Message::method_call(
        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
        {Value::string(std::string("type='signal',sender='") + kService + "',path='" + kPath + "',interface='" +
                       kManager + "',member='JobRemoved'")}));
}

Result<std::string> Manager::string_property(const char* name) {
    return with_fallback([&]() -> Result<std::string> {
        FB_ASSIGN(Message reply, conn_.call(systemd_call("org.freedesktop.DBus.Properties", "Get",
                                                         {Value::string(kManager), Value::string(name)}),
                                            Clock::now() + kCallTimeout));
        answered_ = true;
        if (reply.body.empty() || reply.body[0].unwrapped().code() != 's')
            return fail(EPROTO, std::string("systemd: Manager.") + name + " is not a string");
        return reply.body[0].unwrapped().as_string();
    });
}

int Manager::version() {
    if (version_) return *version_;
    auto r = string_property("Version");
    if (!r) log::debug("systemd: Manager.Version: " + r.error().what());
    version_ = r ? parse_version(*r) : -1;
    return *version_;
}

Result<std::string> Manager::control_group() {
    if (!for_user_) return std::string();
    auto group = string_property("ControlGroup");
    if (group && *group == "/") group->clear();
    return group;
}

Result<std::string> Manager::start_job(const std::string& unit, const Properties& properties) {
    return with_fallback([&]() -> Result<std::string> {
        subscribe();
        auto deadline = Clock::now() + kCallTimeout;
        uint32_t serial = conn_.queue(manager_call(
            "StartTransientUnit", {Value::string(unit), Value::string("replace"), property_array(properties),
                                   Value::array("(sa(sv))", {})}));
        if (subscribe_serial_) {
            FB_TRY_CTX(conn_.reply(std::exchange(subscribe_serial_, 0), deadline), "D-Bus AddMatch");
        }
        FB_ASSIGN(Message reply, conn_.reply(serial, deadline));
        answered_ = true;
        if (reply.body.empty() || reply.body[0].code() != 'o') return fail(EPROTO, "StartTransientUnit: no job in the reply");
        return reply.body[0].as_string();
    });
}

Result<std::string> Manager::wait_job(const std::string& job, Clock::time_point deadline) {
    // JobRemoved(u id, o job, s unit, s result)
    FB_ASSIGN(Message m, conn_.wait_signal(
                             [&](const Message& s) {
                                 return s.member == "JobRemoved" && s.interface == kManager && s.body.size() == 4 &&
                                        s.body[1].as_string() == job;
                             },
                             deadline));
    return m.body[3].as_string();
}

Result<void> Manager::start_transient_unit(const std::string& unit, const Properties& properties) {
    auto deadline = Clock::now() + kJobTimeout;
    for (int attempt = 0;; ++attempt) {
        auto job = start_job(unit, properties);
        if (!job) {
            // A leftover of that name (a failed unit keeps its name until reset): reset, again once.
            if (job.error().errnum() == EEXIST && attempt == 0) {
                log::debug("systemd: " + job.error().what() + ": resetting it and trying once more");
                if (auto r = reset_failed_unit(unit); !r) log::warn("systemd: reset unit " + unit + ": " + r.error().what());
                continue;
            }
            return std::unexpected(job.error().wrap("systemd: start unit " + unit));
        }
        trace::mark("create: systemd job queued");
        auto result = wait_job(*job, deadline);
        if (!result || *result != "done") {
            (void)reset_failed_unit(unit);
            if (!result) {
                if (result.error().errnum() == ETIMEDOUT)
                    return fail(ETIMEDOUT, "systemd: timeout waiting for systemd to create " + unit);
                return std::unexpected(result.error().wrap("systemd: start unit " + unit));
            }
            return fail(EIO, "systemd: error creating systemd unit `" + unit + "`: got `" + *result + "`");
        }
        return {};
    }
}

Result<void> Manager::stop_unit(const std::string& unit) {
    auto job = with_fallback([&]() -> Result<std::string> {
        subscribe();
        auto deadline = Clock::now() + kCallTimeout;
        uint32_t serial = conn_.queue(manager_call("StopUnit", {Value::string(unit), Value::string("replace")}));
        if (subscribe_serial_) {
            FB_TRY_CTX(conn_.reply(std::exchange(subscribe_serial_, 0), deadline), "D-Bus AddMatch");
        }
        FB_ASSIGN(Message reply, conn_.reply(serial, deadline));
        answered_ = true;
        if (reply.body.empty() || reply.body[0].code() != 'o') return fail(EPROTO, "StopUnit: no job in the reply");
        return reply.body[0].as_string();
    });
    if (!job) {
        if (job.error().errnum() == ENOENT) return {};  // gone already: nothing to stop
        return std::unexpected(job.error().wrap("systemd: stop unit " + unit));
    }
    auto result = wait_job(*job, Clock::now() + kJobTimeout);
    if (!result) return std::unexpected(result.error().wrap("systemd: stop unit " + unit));
    if (*result != "done") log::warn("systemd: stopping unit " + unit + ": got `" + *result + "`; continuing");
    // A unit that failed stays until reset; a stopped one is gone already (ENOENT).
    if (auto r = reset_failed_unit(unit); !r && r.error().errnum() != ENOENT)
        log::warn("systemd: reset unit " + unit + ": " + r.error().what());
    return {};
}

Result<void> Manager::reset_failed_unit(const std::string& unit) {
    return with_fallback([&]() -> Result<void> {
        FB_TRY(conn_.call(manager_call("ResetFailedUnit", {Value::string(unit)}), Clock::now() + kCallTimeout));
        answered_ = true;
        return {};
    });
}

Result<void> Manager::set_unit_properties(const std::string& unit, const Properties& properties) {
    auto r = with_fallback([&]() -> Result<void> {
        FB_TRY(conn_.call(manager_call("SetUnitProperties",
                                       {Value::string(unit), Value::boolean(true), property_array(properties)}),
                          Clock::now() + kCallTimeout));
        answered_ = true;
        return {};
    });
    if (!r) return std::unexpected(r.error().wrap("systemd: set properties of unit " + unit));
    return r;
}

Result<void> Manager::attach_processes(const std::string& unit, const std::vector<uint32_t>& pids,
                                       const std::string& subcgroup) {
    auto r = with_fallback([&]() -> Result<void> {
        FB_TRY(conn_.call(manager_call("AttachProcessesToUnit", {Value::string(unit), Value::string(subcgroup), Value::uint32s(pids)}),
                          Clock::now() + kCallTimeout));
        answered_ = true;
        return {};
    });
    if (!r) return std::unexpected(r.error().wrap("systemd: attach processes to unit " + unit));
    return r;
}

}  // namespace forkbox::systemd
