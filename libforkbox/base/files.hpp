// Whole-file reads and atomic replacement: what the state store, the cgroup code and the
// daemons use to read and write small files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"

namespace forkbox {

// Atomic file replacement: write to a temp file beside it, then rename over the target.
Result<void> write_file_atomic(int dirfd, const std::string& name, std::string_view data, mode_t mode);
Result<std::string> read_file(const std::string& path);
// One write of `data` to an existing file (procfs, cgroupfs: a short write is an error).
Result<void> write_file(const std::string& path, std::string_view data);
// Reads fd to its end; `what` names it in errors.
Result<std::string> read_all(int fd, const std::string& what);
Result<std::string> read_file_at(int dirfd, const std::string& name);
// Bytes in use on the filesystem fd is on (statfs: blocks less free blocks); -1 when unknown.
int64_t filesystem_bytes_used(int fd);

}  // namespace forkbox
