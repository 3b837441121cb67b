#include "libforkbox/cgroup/freezer.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <optional>
#include <string_view>

#include "libforkbox/base/files.hpp"

namespace forkbox {

namespace {

Result<void> write_value(const std::string& path, std::string_view value) {
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + path);
    if (::write(fd.get(), value.data(), value.size()) < 0) return sys_error("write " + path);
    return {};
}

Result<void> set_frozen(const Freezer& f, bool frozen) {
    if (f.kind == Freezer::Kind::None) return fail(ENOTSUP, "the container's cgroup has no freezer");
    const char* what = frozen ? "freeze" : "thaw";
    if (f.kind == Freezer::Kind::V1) {
        FB_TRY_CTX(write_value(f.dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"), what);
    } else {
        FB_TRY_CTX(write_value(f.dir + "/cgroup.freeze", frozen ? "1" : "0"), what);
    }
    // v1 passes through FREEZING while tasks are stopped one by one (and stays there while
    // a task cannot be frozen); v2 reports the new state in cgroup.events once every task
    // has stopped. Poll from 100 us up to 10 ms steps, ~5 s in all.
    for (int tries = 0; tries < 520; ++tries) {
        FB_ASSIGN(bool now, cgroup_frozen(f));
        if (now == frozen) return {};
        if (f.kind == Freezer::Kind::V1 && frozen && tries % 50 == 49) {
            // runc re-writes FROZEN periodically: a task forked meanwhile may be missed.
            (void)write_value(f.dir + "/freezer.state", "FROZEN");
        }
        long us = std::min(100L << std::min(tries, 7), 10000L);
        struct timespec ts {0, us * 1000};
        nanosleep(&ts, nullptr);
    }
    if (frozen && f.kind == Freezer::Kind::V1) (void)write_value(f.dir + "/freezer.state", "THAWED");
    if (frozen && f.kind == Freezer::Kind::V2) (void)write_value(f.dir + "/cgroup.freeze", "0");
    return fail(ETIMEDOUT, std::string(what) + " cgroup " + f.dir + ": timed out after 5s waiting for " +
                               (frozen ? "the tasks to stop" : "the tasks to resume"));
}

}  // namespace

Freezer find_freezer(const CgroupLayout& layout, const std::vector<std::string>& cgroup_dirs) {
    auto d = controller_dir(layout, cgroup_dirs, "freezer");
    if (!d) return {};
    return {d->unified ? Freezer::Kind::V2 : Freezer::Kind::V1, d->dir};
}

Result<Freezer> container_freezer(const std::vector<std::string>& cgroup_dirs) {
    static std::optional<CgroupLayout> layout;
    if (!layout) {
        FB_ASSIGN(CgroupLayout l, detect_cgroup_layout());
        layout = std::move(l);
    }
    return find_freezer(*layout, cgroup_dirs);
}

Result<void> freeze_cgroup(const Freezer& f) { return set_frozen(f, true); }
Result<void> thaw_cgroup(const Freezer& f) { return set_frozen(f, false); }

namespace {
// The file holds `word` (and a newline).
Result<bool> holds_word(const std::string& path, std::string_view word) {
    FB_ASSIGN(std::string s, read_file(path));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s == word;
}
}  // namespace

Result<bool> cgroup_thawed(const Freezer& f) {
    switch (f.kind) {
    case Freezer::Kind::None: return true;
    case Freezer::Kind::V1: return holds_word(f.dir + "/freezer.state", "THAWED");
    case Freezer::Kind::V2: return holds_word(f.dir + "/cgroup.freeze", "0");
    }
    return true;
}

Result<bool> cgroup_frozen(const Freezer& f) {
    switch (f.kind) {
    case Freezer::Kind::None: return false;
    case Freezer::Kind::V1: return holds_word(f.dir + "/freezer.state", "FROZEN");
    case Freezer::Kind::V2: {
        FB_ASSIGN(std::string s, read_file(f.dir + "/cgroup.events"));
        size_t pos = 0;
        while (pos < s.size()) {
            size_t end = s.find('\n', pos);
            if (end == std::string::npos) end = s.size();
            std::string_view line(s.data() + pos, end - pos);
            if (line.starts_with("frozen ")) return line.substr(7) == "1";
            pos = end + 1;
        }
        return false;  // a kernel before 5.2: no v2 freezer, never frozen
    }
    }
    return false;
}

}  // namespace forkbox
