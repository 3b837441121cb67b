// The systemd cgroup driver's D-Bus half: systemd's Manager interface, the calls runc makes.
// Connects to the system bus (dbus-daemon), and as root falls back to systemd's own
// /run/systemd/private socket (a peer, no bus in between) when the bus cannot be reached or
// systemd is not on it, as runc does.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "libforkbox/base/error.hpp"
#include "libforkbox/cgroup/systemd.hpp"
#include "libforkbox/dbus/connection.hpp"

namespace forkbox::systemd {

// How long a job (start, stop) may take before forkbox gives up on it: runc's 30 s.
inline constexpr std::chrono::seconds kJobTimeout{30};

class Manager {
public:
    // Only the system manager: a rootless driver would need the user's manager and its
    // delegated subtree (not supported yet).
    static Result<Manager> connect();

    // Which socket answered: "system bus" or "/run/systemd/private" (for debug logs, tests).
    const std::string& via() const { return via_; }

    // Manager.Version as a number (252), asked once; -1 when systemd does not say.
    int version();

    // StartTransientUnit(unit, "replace", properties, []) and its job: done, or an error after
    // ResetFailedUnit (a failed job, or none within kJobTimeout). A unit of that name that
    // exists already (a failed one left behind) is reset and the start tried once more.
    Result<void> start_transient_unit(const std::string& unit, const Properties& properties);
    // StopUnit(unit, "replace") and its job, then ResetFailedUnit. A unit systemd does not
    // know (a scope is gone once its processes are) is not an error.
    Result<void> stop_unit(const std::string& unit);
    Result<void> reset_failed_unit(const std::string& unit);
    // SetUnitProperties(unit, runtime=true, properties).
    Result<void> set_unit_properties(const std::string& unit, const Properties& properties);

private:
    Manager(dbus::Connection c, std::string via) : conn_(std::move(c)), via_(std::move(via)) {}
    // Runs one exchange; when the system bus turns out not to work (systemd is not on it, the
    // daemon hung up) before anything was done through it, switches to the private socket
    // (root only) and runs it again.
    template <typename F>
    auto with_fallback(F&& f) -> decltype(f());
    Result<std::string> start_job(const std::string& unit, const Properties& properties);
    Result<std::string> wait_job(const std::string& job, std::chrono::steady_clock::time_point deadline);
    dbus::Message manager_call(const char* member, std::vector<dbus::Value> body) const;
    void subscribe();

    dbus::Connection conn_;
    std::string via_;
    bool answered_ = false;  // systemd answered through this connection
    bool subscribed_ = false;
    uint32_t subscribe_serial_ = 0;
    std::optional<int> version_;
};

}  // namespace forkbox::systemd
