// Who holds a flock: /proc/locks names the process that took each lock, by file.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>

namespace forkbox {

// The pid that holds a flock on the file (dev, ino), from the text of /proc/locks; waiters
// ("->") are not holders. nullopt when nobody holds one.
std::optional<pid_t> parse_flock_holder(std::string_view proc_locks, dev_t dev, ino_t ino);

// The same for an open file.
std::optional<pid_t> flock_holder(int fd);

}  // namespace forkbox
