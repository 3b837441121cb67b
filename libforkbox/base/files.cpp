#include "libforkbox/base/files.hpp"

#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>

#include "libforkbox/base/fd.hpp"

namespace forkbox {

Result<void> write_file_atomic(int dirfd, const std::string& name, std::string_view data, mode_t mode) {
    std::string tmp = "." + name + ".tmp";
    unique_fd fd(::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    if (!fd) return sys_error("create " + tmp);
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::unlinkat(dirfd, tmp.c_str(), 0);
            return sys_error(e, "write " + tmp);
        }
        off += static_cast<size_t>(n);
    }
    // No fsync: rename makes the replacement atomic for every reader and against a crash of
    // this process; state lives on tmpfs (/run), which a power loss empties anyway, and an
    // fsync on a disk-backed --root costs milliseconds on every create.
    fd.reset();
    if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) < 0) {
        int e = errno;
        ::unlinkat(dirfd, tmp.c_str(), 0);
        return sys_error(e, "rename " + tmp);
    }
    return {};
}

Result<std::string> read_all(int fd, const std::string& what) {
    std::string out;
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("read " + what);
        }
        if (n == 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

Result<std::string> read_file(const std::string& path) {
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + path);
    return read_all(fd.get(), path);
}

Result<std::string> read_file_at(int dirfd, const std::string& name) {
    unique_fd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + name);
    return read_all(fd.get(), name);
}

Result<void> write_file(const std::string& path, std::string_view data) {
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + path);
    ssize_t n = ::write(fd.get(), data.data(), data.size());
    if (n < 0) return sys_error("write " + path);
    if (static_cast<size_t>(n) != data.size()) return fail(EIO, "short write to " + path);
    return {};
}

int64_t filesystem_bytes_used(int fd) {
    struct statfs fs;
    if (fd < 0 || ::fstatfs(fd, &fs) < 0) return -1;
    return static_cast<int64_t>((fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize));
}

}  // namespace forkbox
