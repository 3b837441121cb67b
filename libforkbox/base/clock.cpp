#include "libforkbox/base/clock.hpp"

#include <cstdio>
#include <ctime>

namespace forkbox {

std::string rfc3339_utc(int64_t seconds, long nanoseconds) {
    // Days to a civil date (Howard Hinnant's algorithm): gmtime_r would make glibc read
    // /etc/localtime first, six syscalls on every create for a zone we never use.
    int64_t days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400;
    int64_t secs = seconds - days * 86400;
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1;
    int64_t month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
    char buf[160];  // room for any int64 fields, so the compiler can see no truncation
    std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%09ldZ", static_cast<long long>(year),
                  static_cast<long long>(month), static_cast<long long>(day), static_cast<long long>(secs / 3600),
                  static_cast<long long>(secs / 60 % 60), static_cast<long long>(secs % 60), nanoseconds);
    return buf;
}

std::string rfc3339_now() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return rfc3339_utc(ts.tv_sec, ts.tv_nsec);
}

}  // namespace forkbox
