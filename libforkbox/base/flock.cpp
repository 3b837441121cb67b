#include "libforkbox/base/flock.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <charconv>
#include <string>

#include "libforkbox/base/files.hpp"

namespace forkbox {

namespace {
std::string_view next_word(std::string_view& line) {
    size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) return line = {}, std::string_view{};
    line.remove_prefix(start);
    size_t end = line.find(' ');
    std::string_view word = line.substr(0, end);
    line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    return word;
}

template <typename T>
bool parse_number(std::string_view s, T& out, int base = 10) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return ec == std::errc{} && p == s.data() + s.size();
}
}  // namespace

// "1: FLOCK  ADVISORY  WRITE 10816 fe:00:10952925 0 EOF": id, type, mode, access, pid,
// major:minor:inode (device numbers in hex), range.
std::optional<pid_t> parse_flock_holder(std::string_view proc_locks, dev_t dev, ino_t ino) {
    while (!proc_locks.empty()) {
        size_t nl = proc_locks.find('\n');
        std::string_view line = proc_locks.substr(0, nl);
        proc_locks.remove_prefix(nl == std::string_view::npos ? proc_locks.size() : nl + 1);
        next_word(line);  // "N:"
        if (next_word(line) != "FLOCK") continue;  // POSIX, OFDLCK, or "->" (a waiter)
        next_word(line);  // ADVISORY
        next_word(line);  // WRITE / READ
        pid_t pid = 0;
        if (!parse_number(next_word(line), pid) || pid <= 0) continue;
        std::string_view file = next_word(line);
        size_t c1 = file.find(':'), c2 = c1 == std::string_view::npos ? c1 : file.find(':', c1 + 1);
        if (c2 == std::string_view::npos) continue;
        unsigned major_no = 0, minor_no = 0;
        unsigned long inode = 0;
        if (!parse_number(file.substr(0, c1), major_no, 16) ||
            !parse_number(file.substr(c1 + 1, c2 - c1 - 1), minor_no, 16) ||
            !parse_number(file.substr(c2 + 1), inode))
            continue;
        if (major_no == ::major(dev) && minor_no == ::minor(dev) && inode == ino) return pid;
    }
    return std::nullopt;
}

std::optional<pid_t> flock_holder(int fd) {
    struct stat st;
    if (::fstat(fd, &st) < 0) return std::nullopt;
    auto text = read_file("/proc/locks");
    if (!text) return std::nullopt;
    return parse_flock_holder(*text, st.st_dev, st.st_ino);
}

}  // namespace forkbox
