#include "libforkbox/container/events.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>
#include <limits>

#include "libforkbox/base/log.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/oom.hpp"
#include "libforkbox/cgroup/stats.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/process/pidfd.hpp"

namespace forkbox {

namespace {

// Blocks SIGINT and SIGTERM while alive, so they arrive through a signalfd instead of
// killing the stream mid-line; the old mask comes back at scope exit.
class BlockedSignals {
public:
    BlockedSignals() {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        ::sigprocmask(SIG_BLOCK, &set_, &old_);
    }
    ~BlockedSignals() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
    BlockedSignals(const BlockedSignals&) = delete;
    BlockedSignals& operator=(const BlockedSignals&) = delete;
    const sigset_t& set() const { return set_; }

private:
    sigset_t set_, old_;
};

Result<unique_fd> interval_timer(std::chrono::nanoseconds interval) {
    unique_fd fd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!fd) return sys_error("timerfd_create");
    struct itimerspec its {};
    auto ns = interval.count();
    its.it_interval.tv_sec = static_cast<time_t>(ns / 1000000000);
    its.it_interval.tv_nsec = static_cast<long>(ns % 1000000000);
    its.it_value = its.it_interval;
    if (::timerfd_settime(fd.get(), 0, &its, nullptr) < 0) return sys_error("timerfd_settime");
    return fd;
}

std::unexpected<Error> not_running(const std::string& id) {
    return fail(ESRCH, "container with id " + id + " is not running");
}

}  // namespace

Result<void> container_events(const StateStore& store, const std::string& id, const EventsOptions& options,
                              const EventSink& sink) {
    FB_ASSIGN(ContainerInfo info, container_info(store, id));
    if (info.status == Status::Stopped) return not_running(id);
    const auto& dirs = info.state.cgroup_dirs;
    FB_ASSIGN(CgroupLayout layout, detect_cgroup_layout());

    if (options.stats_only) {
        FB_ASSIGN(CgroupStats stats, read_cgroup_stats(layout, dirs));
        sink(event_json("stats", id, &stats));
        return {};
    }

    // The pidfd pins init: its exit ends the stream, even for a container whose cgroup stays
    // until delete.
    auto pidfd = open_pidfd(info.state.pid, info.state.pid_start_time);
    if (!pidfd) return not_running(id);
    FB_ASSIGN(OomNotifier oom, OomNotifier::open(layout, dirs));
    BlockedSignals blocked;
    unique_fd sigfd(::signalfd(-1, &blocked.set(), SFD_CLOEXEC | SFD_NONBLOCK));
    if (!sigfd) return sys_error("signalfd");
    FB_ASSIGN(unique_fd timer, interval_timer(options.interval));

    // Emits the OOM events the notifier holds; false when the stream should end.
    auto drain_oom = [&]() -> Result<bool> {
        FB_ASSIGN(OomNotifier::Report r, oom.read());
        for (uint64_t i = 0; i < r.ooms; ++i)
            if (!sink(event_json("oom", id))) return false;
        return !r.gone;
    };

    enum { kOom, kTimer, kInit, kSignal };
    for (;;) {
        struct pollfd fds[4] = {{oom.fd(), POLLIN, 0},
                                {timer.get(), POLLIN, 0},
                                {pidfd->get(), POLLIN, 0},
                                {sigfd.get(), POLLIN, 0}};
        if (::poll(fds, 4, -1) < 0) {
            if (errno == EINTR) continue;
            return sys_error("poll");
        }
        // OOM first: the kernel signals it before the killed init's pidfd becomes readable,
        // and the event must not be lost when both arrive in one wakeup.
        if (fds[kOom].revents) {
            FB_ASSIGN(bool go_on, drain_oom());
            if (!go_on) return {};
        }
        if (fds[kSignal].revents) {
            // Consumed here: still pending when the mask is restored, it would kill us.
            struct signalfd_siginfo si;
            (void)!::read(sigfd.get(), &si, sizeof si);
            return {};
        }
        if (fds[kInit].revents) {
            (void)drain_oom();  // an OOM that killed init and has not been read yet
            return {};
        }
        if (fds[kTimer].revents) {
            uint64_t expirations;
            if (::read(timer.get(), &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                return sys_error("read timerfd");
            // A failed read is logged and the stream goes on, as runc does.
            auto stats = read_cgroup_stats(layout, dirs);
            if (!stats) {
                log::error("events: " + stats.error().what());
                continue;
            }
            if (!sink(event_json("stats", id, &*stats))) return {};
        }
    }
}

}  // namespace forkbox
