// Wall-clock timestamps as runc writes them (state.json's "created", log lines), and
// durations as runc's flags take them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"

namespace forkbox {

// Now as RFC 3339 with nanoseconds in UTC ("2026-12-01T03:44:33.123456789Z").
std::string rfc3339_now();
// A UTC time as RFC 3339 with nanoseconds, as runc writes "created".
std::string rfc3339_utc(int64_t seconds, long nanoseconds);

// Go's time.ParseDuration, which runc's `events --interval` takes (and `run --timeout`): a
// sequence of decimal numbers with units ns, us (or µs), ms, s, m, h ("5s", "100ms",
// "1m30s", "1.5h"); "0" alone needs no unit. Pure, unit-tested.
Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

}  // namespace forkbox
