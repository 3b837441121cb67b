#include "libforkbox/base/clock.hpp"

#include <cstdint>
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

}  // namespace forkbox
