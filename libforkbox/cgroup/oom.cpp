#include "libforkbox/cgroup/oom.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "libforkbox/base/files.hpp"
#include "libforkbox/cgroup/stats.hpp"

namespace forkbox {

uint64_t cgroup_keyed_value(std::string_view text, std::string_view key) {
    auto m = parse_flat_keyed(text);
    if (!m) return 0;
    auto it = m->find(std::string(key));
    return it == m->end() ? 0 : it->second;
}

Result<OomNotifier> OomNotifier::open(const CgroupLayout& layout, const std::vector<std::string>& dirs) {
    OomNotifier n;
    auto d = controller_dir(layout, dirs, "memory");
    if (!d) return n;
    n.unified_ = d->unified;
    n.dir_ = d->dir;
    if (!n.unified_) {
        std::string control = n.dir_ + "/memory.oom_control";
        n.oom_control_.reset(::open(control.c_str(), O_RDONLY | O_CLOEXEC));
        if (!n.oom_control_) return sys_error("open " + control);
        n.fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (!n.fd_) return sys_error("eventfd");
        // "<eventfd> <fd of memory.oom_control>" registers the eventfd for OOM events.
        std::string line = std::to_string(n.fd_.get()) + " " + std::to_string(n.oom_control_.get());
        std::string path = n.dir_ + "/cgroup.event_control";
        unique_fd ec(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        if (!ec) return sys_error("open " + path);
        if (::write(ec.get(), line.data(), line.size()) < 0) return sys_error("write " + path);
        return n;
    }
    std::string events = n.dir_ + "/memory.events";
    auto text = read_file(events);
    if (!text) {
        // The memory controller is not enabled for this v2 cgroup: no OOM to report.
        if (text.error().errnum() == ENOENT) return OomNotifier{};
        return std::unexpected(text.error());
    }
    n.oom_kills_ = cgroup_keyed_value(*text, "oom_kill");
    n.fd_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!n.fd_) return sys_error("inotify_init1");
    // cgroupfs sends no IN_DELETE_SELF: cgroup.events tells when the last process is gone.
    for (const std::string& file : {events, n.dir_ + "/cgroup.events"})
        if (::inotify_add_watch(n.fd_.get(), file.c_str(), IN_MODIFY) < 0)
            return sys_error("inotify_add_watch " + file);
    return n;
}

Result<OomNotifier::Report> OomNotifier::read() {
    Report r;
    if (!fd_) return r;
    if (!unified_) {
        uint64_t count = 0;
        if (::read(fd_.get(), &count, sizeof count) < 0) {
            if (errno == EAGAIN) return r;
            return sys_error("read OOM eventfd");
        }
        // The kernel also signals the eventfd when it removes the cgroup.
        if (::access((dir_ + "/memory.oom_control").c_str(), F_OK) < 0 && errno == ENOENT) {
            r.gone = true;
            return r;
        }
        r.ooms = count;
        return r;
    }
    // Drain the inotify queue; which file changed does not matter, both are re-read.
    alignas(struct inotify_event) char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd_.get(), buf, sizeof buf);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) return sys_error("read inotify");
        break;
    }
    auto events = read_file(dir_ + "/memory.events");
    if (!events) {
        if (events.error().errnum() != ENOENT) return std::unexpected(events.error());
        r.gone = true;
        return r;
    }
    uint64_t kills = cgroup_keyed_value(*events, "oom_kill");
    if (kills > oom_kills_) r.ooms = kills - oom_kills_;
    oom_kills_ = kills;
    auto cg = read_file(dir_ + "/cgroup.events");
    if (!cg || cgroup_keyed_value(*cg, "populated") == 0) r.gone = true;
    return r;
}

}  // namespace forkbox
