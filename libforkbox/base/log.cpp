#include "libforkbox/base/log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "libforkbox/base/clock.hpp"
#include "libforkbox/base/json.hpp"

namespace forkbox::log {

namespace {
struct Sink {
    int fd = -1;  // -1: stderr, and only warnings and errors
    bool json = false;
    bool debug = false;
    // --log given but not opened (EMFILE, a missing directory): said once on stderr, and
    // stderr then gets the plain "forkbox: ..." lines a human reads, not the file's format.
    std::string failed_path;
    int failed_errno = 0;
    bool plain_stderr = false;
};
Sink& sink() {
    static Sink s;
    return s;
}
const char* level_name(Level l) {
    switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warning: return "warning";
    case Level::Error: return "error";
    }
    return "info";
}
}  // namespace

void configure(const std::string& path, bool json, bool debug) {
    Sink& s = sink();
    s.json = json;
    s.debug = debug;
    if (!path.empty()) {
        s.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (s.fd < 0) {
            s.failed_path = path;
            s.failed_errno = errno;
            s.plain_stderr = true;
        }
    }
}

bool debug_enabled() { return sink().debug; }
bool has_file() { return sink().fd >= 0; }
int file_fd() { return sink().fd; }

void write(Level level, std::string_view msg) {
    Sink& s = sink();
    if (level == Level::Debug && !s.debug) return;
    int fd = s.fd;
    if (fd < 0) {
        if (level < Level::Warning && !s.debug) return;
        fd = 2;
    }
    std::string line;
    if (!s.failed_path.empty()) {
        line = "forkbox: warning: log file " + s.failed_path + ": " + std::strerror(s.failed_errno) + "\n";
        s.failed_path.clear();
    }
    if (s.json && !(fd == 2 && s.plain_stderr)) {
        json::Writer w;
        w.begin_object().key("level").value(level_name(level)).key("msg").value(msg).key("time").value(rfc3339_now());
        w.end_object();
        line += w.take();
    } else if (fd == 2) {
        line += "forkbox: ";
        if (level != Level::Error) line += std::string(level_name(level)) + ": ";
        line += msg;
    } else {
        line += "time=\"" + rfc3339_now() + "\" level=" + level_name(level) + " msg=";
        json::append_quoted(line, msg);
    }
    line += '\n';
    // One write per line: concurrent writers never interleave within a line (O_APPEND).
    (void)!::write(fd, line.data(), line.size());
}

}  // namespace forkbox::log
