// Timing helpers shared by the in-process benchmark programs in bench/.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace forkbox::bench {

inline double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The q-th quantile (0..1). On a shared, loaded machine the low quantiles show the
// intrinsic cost best: the median and p90 mostly measure the neighbours.
inline double quantile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace forkbox::bench
