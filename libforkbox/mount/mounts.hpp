// Mount primitives that never follow a symlink out of the container's rootfs: every path
// inside the rootfs is resolved with openat2(RESOLVE_IN_ROOT) from a rootfs dirfd, and
// mounts land on the resolved fd through /proc/self/fd (CVE-2021-30465 class).
#pragma once

#include <string>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

// Opens `path` (absolute inside the root) as O_PATH, confined to root_fd.
Result<unique_fd> open_in_root(int root_fd, const std::string& path);

// Like open_in_root, creating missing directories on the way (mode 0755). If `file` is true,
// the last component is created as an empty regular file when missing.
Result<unique_fd> create_in_root(int root_fd, const std::string& path, bool file);

// "/proc/self/fd/N": a path the kernel resolves to exactly the file behind fd.
std::string fd_path(int fd);

// mount(2) onto the file behind target_fd.
Result<void> mount_on_fd(const char* source, int target_fd, const char* fstype, unsigned long flags,
                         const char* data, const std::string& what);

// Sets propagation flags (MS_SHARED etc.) on the mount at target_fd.
Result<void> set_propagation(int target_fd, unsigned long flags, const std::string& what);

}  // namespace forkbox
