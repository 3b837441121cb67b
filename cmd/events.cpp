#include <unistd.h>

#include <cerrno>

#include "cmd/common.hpp"
#include "libforkbox/base/clock.hpp"
#include "libforkbox/container/events.hpp"

namespace forkbox::cmd {

namespace {

// One event per write, flushed at once: a reader of a stream sees whole lines.
bool write_line(const std::string& json) {
    std::string line = json + "\n";
    size_t off = 0;
    while (off < line.size()) {
        ssize_t n = ::write(STDOUT_FILENO, line.data() + off, line.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

int cmd_events(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("events [--stats] [--interval DURATION] <container-id>",
                 "Print a container's resource usage every interval and its OOM events as they happen, "
                 "one JSON object per line, until it stops; --stats prints the usage once.");
    bool stats = false;
    std::string interval;
    p.add()("stats", po::bool_switch(&stats), "display the container's stats then exit")(
        "interval", po::value(&interval)->default_value("5s"),
        "stats collection interval: a Go duration (5s, 100ms, 1m30s)")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto d = parse_go_duration(interval);
    if (!d) return report("invalid value \"" + interval + "\" for flag -interval: parse error");
    if (d->count() <= 0) return report("duration interval must be greater than 0");
    EventsOptions options;
    options.stats_only = stats;
    options.interval = *d;
    auto r = container_events(g.store(), require_id(vm, "events"), options, write_line);
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
