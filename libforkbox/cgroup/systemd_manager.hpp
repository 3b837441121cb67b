// The systemd cgroup driver's D-Bus half: systemd's Manager interface, the calls runc makes.
// Connects to the system bus (dbus-daemon), and falls back to systemd's own
// /run/systemd/private socket (a peer, no bus in between) when the bus cannot be reached or
// systemd is not on it, as runc does; rootless, the same with the user's manager (the session
// bus, $XDG_RUNTIME_DIR/systemd/private).
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
    // Root's: the system manager, on the system bus or its private socket. A rootless
    // caller's (an unprivileged user, or root in a user namespace, as under rootless podman):
    // the user's own manager (`systemd --user`), on the session bus or on
    // $XDG_RUNTIME_DIR/systemd/private, authenticated as the host's uid; its units' cgroups are
    // delegated to the user.
    static Result<Manager> connect();

    // Which socket answered: "system bus", "session bus" or a private socket's path (for debug
    // logs, tests).
    const std::string& via() const { return via_; }
    // The user's manager, not the system's.
    bool for_user() const { return for_user_; }
    // The manager's own cgroup (Manager.ControlGroup: "/user.slice/user-1000.slice/
    // user@1000.service" for a user's), below which its slices are; "" for the system's.
    Result<std::string> control_group();

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
    // AttachProcessesToUnit(unit, "", pids): systemd moves them into the unit's cgroup, which
    // a user's process outside the user's delegated subtree may not do itself (a user's
    // manager asks the system's).
    // subcgroup: "" for the unit's own cgroup, or "/PATH" under it.
    Result<void> attach_processes(const std::string& unit, const std::vector<uint32_t>& pids,
                                  const std::string& subcgroup = "");

private:
    Manager(dbus::Connection c, std::string via, std::string private_socket, uid_t auth_uid, bool for_user)
        : conn_(std::move(c)),
          via_(std::move(via)),
          private_socket_(std::move(private_socket)),
          auth_uid_(auth_uid),
          for_user_(for_user) {}
    static Result<Manager> connect_user();
    // Runs one exchange; when the bus turns out not to work (systemd is not on it, the daemon
    // hung up) before anything was done through it, switches to the manager's private socket
    // and runs it again.
    template <typename F>
    auto with_fallback(F&& f) -> decltype(f());
    // Properties.Get of a string property of the Manager interface.
    Result<std::string> string_property(const char* name);
    Result<std::string> start_job(const std::string& unit, const Properties& properties);
    Result<std::string> wait_job(const std::string& job, std::chrono::steady_clock::time_point deadline);
    dbus::Message manager_call(const char* member, std::vector<dbus::Value> body) const;
    void subscribe();

    dbus::Connection conn_;
    std::string via_;
    std::string private_socket_;  // the manager's own socket, the bus's fallback
    uid_t auth_uid_;
    bool for_user_;
    bool answered_ = false;  // systemd answered through this connection
    bool subscribed_ = false;
    uint32_t subscribe_serial_ = 0;
    std::optional<int> version_;
};

}  // namespace forkbox::systemd
