// Terminals: the pty a container process gets when process.terminal is set, handed to the
// caller over a console socket (runc's protocol), or driven by forkbox itself for a
// foreground `run -t` / `exec -t`.
#pragma once

#include <sys/types.h>
#include <termios.h>

#include <optional>
#include <string>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "oci/spec.hpp"

namespace forkbox {

// runc's rules for --console-socket against the process's terminal and detaching.
Result<void> check_console_options(bool terminal, bool detach, const std::string& console_socket);

// Connects a stream socket to the unix socket at path; `what` names it in errors.
Result<unique_fd> connect_unix_socket(const std::string& path, const std::string& what);
// Connects to the unix socket a manager listens on for the pty master (parent side).
inline Result<unique_fd> connect_console_socket(const std::string& path) {
    return connect_unix_socket(path, "console socket");
}

// In the container process, after its root is the container's: opens a pty from the
// container's /dev/ptmx, applies the console size, sends the master over `socket_fd`
// (SCM_RIGHTS, with the slave's name as payload, as runc does), and makes the slave its
// stdin, stdout, stderr and controlling terminal. The caller must be a session leader.
Result<void> setup_console(int socket_fd, const std::optional<oci::ConsoleSize>& size, uid_t uid);

// Receives a pty master sent by setup_console (the far end of a socketpair).
Result<unique_fd> receive_console_master(int socket_fd);

// The caller's terminal in raw mode for as long as this lives (no-op when fd is no tty).
class RawTerminal {
public:
    explicit RawTerminal(int fd);
    RawTerminal(const RawTerminal&) = delete;
    RawTerminal& operator=(const RawTerminal&) = delete;
    ~RawTerminal();

private:
    int fd_ = -1;
    bool active_ = false;
    struct termios saved_ {};
};

// Copies the window size of `from` (the caller's tty) to the pty master `to`, if any.
void copy_window_size(int from, int to);

}  // namespace forkbox
