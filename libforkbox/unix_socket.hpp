// Unix sockets: passing fds with a message (SCM_RIGHTS) and receiving them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/error.hpp"
#include "libforkbox/fd.hpp"

namespace forkbox {

// Sends `data` with `fds` attached in one message (retries EINTR; no SIGPIPE).
Result<void> send_with_fds(int sock, std::string_view data, std::span<const int> fds, std::string_view what);

}  // namespace forkbox
