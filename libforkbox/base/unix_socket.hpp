// Unix sockets: passing fds with a message (SCM_RIGHTS) and receiving them.
#pragma once

#include <sys/socket.h>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Sends `data` with `fds` attached in one message (retries EINTR; no SIGPIPE).
Result<void> send_with_fds(int sock, std::string_view data, std::span<const int> fds, std::string_view what);

// Receives one message (at most 4 KiB) and up to 8 fds sent with it (close-on-exec). A
// truncated message or fd list is an error (EPROTO); the fds that did arrive are closed.
Result<std::string> receive_with_fds(int sock, std::vector<unique_fd>& fds, std::string_view what);

// The same into `buf`, whose size is the most a message may be (the sandbox's releases are
// larger than 4 KiB); returns the message's length, 0 at end of file.
Result<size_t> receive_message(int sock, std::string& buf, std::vector<unique_fd>& fds, std::string_view what);

// recvmsg, retried on EINTR, and once more after one ECONNRESET: a peer that exited with our
// messages unread resets the socket, and the kernel reports that once, before what the peer
// sent first (its last words, mostly). `reset_seen` spans the calls of one receive.
ssize_t recvmsg_past_reset(int sock, msghdr* msg, int flags, bool& reset_seen);

// A buffer of `bytes` for receive_message, left unwritten: filled with zeros it would take a
// page fault for each of its pages (64 for a sandbox's release buffer, ~10 us each on these
// VMs) in every process that makes one, where a message touches only the pages it fills.
std::string receive_buffer(size_t bytes);

// accept4 (SOCK_CLOEXEC) on a non-blocking listener that sheds connections instead of
// failing at fd exhaustion. At EMFILE or ENFILE the connection stays pending, so a
// level-triggered listener stays readable and the event loop around it spins at full CPU
// until a client gives up: here a reserve fd is closed for the moment, the connection taken,
// handed to `shed` (to tell the client why) and closed, and the reserve opened again.
class Acceptor {
public:
    explicit Acceptor(int listener);
    // A connection, or -1 with errno (EAGAIN once none is pending, every one shed).
    int accept(const std::function<void(int conn)>& shed = {});

private:
    int listener_;
    unique_fd reserve_;
};

}  // namespace forkbox
