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

Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text) {
    auto invalid = [&] { return fail(EINVAL, "invalid duration \"" + std::string(text) + "\""); };
    std::string_view s = text;
    bool negative = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        negative = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s == "0") return std::chrono::nanoseconds(0);
    if (s.empty()) return invalid();
    struct Unit {
        std::string_view name;
        uint64_t ns;
    };
    static constexpr Unit kUnits[] = {
        {"ns", 1},           {"us", 1000},          {"\u00b5s", 1000} /* micro sign */,
        {"\u03bcs", 1000} /* Greek mu */, {"ms", 1000000}, {"s", 1000000000},
        {"m", 60000000000},  {"h", 3600000000000},
    };
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    unsigned __int128 total = 0;
    constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 63;  // |int64 min|
    while (!s.empty()) {
        if (!is_digit(s[0]) && s[0] != '.') return invalid();
        unsigned __int128 whole = 0;
        size_t i = 0;
        for (; i < s.size() && is_digit(s[i]); ++i) {
            whole = whole * 10 + static_cast<unsigned>(s[i] - '0');
            if (whole > kLimit) return invalid();
        }
        bool pre = i > 0, post = false;
        unsigned __int128 frac = 0, scale = 1;
        if (i < s.size() && s[i] == '.') {
            ++i;
            for (; i < s.size() && is_digit(s[i]); ++i) {
                post = true;
                if (scale < static_cast<unsigned __int128>(1000000000000000000ULL)) {  // 18 digits are plenty
                    frac = frac * 10 + static_cast<unsigned>(s[i] - '0');
                    scale *= 10;
                }
            }
        }
        if (!pre && !post) return invalid();
        size_t u = i;
        while (u < s.size() && s[u] != '.' && !is_digit(s[u])) ++u;
        std::string_view unit = s.substr(i, u - i);
        const Unit* found = nullptr;
        for (const auto& k : kUnits)
            if (k.name == unit) found = &k;
        if (!found) return invalid();  // missing or unknown unit
        total += whole * found->ns + frac * found->ns / scale;
        if (total > kLimit) return invalid();
        s.remove_prefix(u);
    }
    if (!negative && total == kLimit) return invalid();  // int64 max is one less
    auto v = static_cast<int64_t>(negative ? -static_cast<__int128>(total) : static_cast<__int128>(total));
    return std::chrono::nanoseconds(v);
}

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
