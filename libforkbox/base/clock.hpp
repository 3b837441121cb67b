// Wall-clock timestamps as runc writes them (state.json's "created", log lines).
#pragma once

#include <cstdint>
#include <string>

namespace forkbox {

// Now as RFC 3339 with nanoseconds in UTC ("2026-12-01T03:44:33.123456789Z").
std::string rfc3339_now();
// A UTC time as RFC 3339 with nanoseconds, as runc writes "created".
std::string rfc3339_utc(int64_t seconds, long nanoseconds);

}  // namespace forkbox
