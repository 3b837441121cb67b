// A D-Bus connection over a unix socket: SASL EXTERNAL, method calls with their replies,
// and signals. Single-threaded and blocking with deadlines: forkbox makes a handful of calls
// per invocation.
//
// Round trips are what it costs, so nothing is waited for that need not be: the
// authentication and BEGIN go out in one write, then (after the server's OK) Hello on a bus
// and the first calls in another, and the answers are read as the replies are needed.
// Messages never travel with the authentication: sd-bus (systemd's /run/systemd/private)
// parses what came with BEGIN only when more data arrives, so a short call sent along would
// wait for ever (seen with StopUnit; a long StartTransientUnit happened to get through).
#pragma once

#include <unistd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/dbus/message.hpp"

namespace forkbox::dbus {

using Clock = std::chrono::steady_clock;

// The SASL client's first bytes (pure): the NUL byte, AUTH EXTERNAL with the uid in hex of
// its decimal digits, and BEGIN (sent without waiting for OK, as sd-bus does).
std::string sasl_external_preamble(uid_t uid);

// An error reply as forkbox reports it: "TEXT (NAME)", with an errno for the names callers
// test (UnitExists: EEXIST, NoSuchUnit: ENOENT, AccessDenied: EACCES, ...; else EIO).
Error reply_error(const Message& reply);

// The address of the system bus (DBUS_SYSTEM_BUS_ADDRESS's unix:path=, else
// /run/dbus/system_bus_socket). Only unix:path= addresses are understood.
Result<std::string> system_bus_path();
// The user's session bus: DBUS_SESSION_BUS_ADDRESS's unix:path=, else `runtime_dir`/bus.
Result<std::string> session_bus_path(const std::string& runtime_dir);

class Connection {
public:
    // Connects to the socket at `path`. With `bus` the peer is a message bus (dbus-daemon) and
    // Hello is sent; without, it is a peer (systemd's /run/systemd/private). Nothing is read
    // yet: a refused authentication shows at the first reply.
    // `auth_uid` is the uid the peer sees this process as (the host's, from a user namespace).
    static Result<Connection> open(const std::string& path, bool bus, uid_t auth_uid = ::geteuid());
    // The same over a socket connected already (a socketpair in tests).
    static Connection adopt(unique_fd fd, bool bus, uid_t auth_uid = ::geteuid());

    Connection(Connection&&) = default;
    Connection& operator=(Connection&&) = default;

    bool is_bus() const { return bus_; }

    // Queues a message (its serial is assigned here and returned); sent at the next wait or
    // flush().
    uint32_t queue(Message m);
    Result<void> flush(Clock::time_point deadline);
    // Waits for the reply to `serial`: a MethodReturn, or an Error reply as reply_error.
    // Signals that arrive meanwhile are kept for wait_signal.
    Result<Message> reply(uint32_t serial, Clock::time_point deadline);
    // queue + reply.
    Result<Message> call(Message m, Clock::time_point deadline);
    // The first signal (kept or arriving) that `match` accepts; others are dropped.
    Result<Message> wait_signal(const std::function<bool(const Message&)>& match, Clock::time_point deadline);

private:
    Connection(unique_fd fd, bool bus) : fd_(std::move(fd)), bus_(bus) {}
    // Reads until one whole message is buffered (after the authentication's answer), or the
    // deadline passes (ETIMEDOUT).
    Result<Message> next(Clock::time_point deadline);
    Result<void> fill(Clock::time_point deadline);
    Result<void> send_all(const std::string& data, Clock::time_point deadline);
    // Sends the preamble (once) and reads the server's OK.
    Result<void> authenticate(Clock::time_point deadline);

    unique_fd fd_;
    bool bus_ = false;
    bool authenticated_ = false;
    uint32_t next_serial_ = 1;
    uint32_t hello_serial_ = 0;
    std::string preamble_;  // the authentication, until sent
    std::string out_;
    std::string in_;
    std::deque<Message> signals_;
};

}  // namespace forkbox::dbus
