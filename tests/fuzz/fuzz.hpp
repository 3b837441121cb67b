// Shared by the libFuzzer targets (tests/fuzz/*.cpp, built and run by `make fuzz`).
// A target fails by aborting: libFuzzer then saves the input and stops the run, the same as
// for a sanitizer report. FUZZ_CHECK states a property every input must keep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond, what)                                                             \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: property failed: %s\n  %s\n", __FILE__, __LINE__, \
                         #cond, std::string(what).c_str());                                \
            std::abort();                                                                  \
        }                                                                                  \
    } while (0)

namespace forkbox::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

}  // namespace forkbox::fuzz
