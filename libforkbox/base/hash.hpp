#pragma once
// A fast non-cryptographic hash for naming things by their content (cache files, config
// fingerprints): FNV-1a's constants, eight bytes a step, so a 14 KiB config.json costs a
// few microseconds. Callers that must not confuse two inputs still compare them whole, or
// accept a 2^-64 chance (the zygote's config fingerprint between root processes).
#include <cstdint>
#include <cstring>
#include <string_view>

namespace forkbox {

inline uint64_t content_hash(std::string_view s) {
    uint64_t h = 14695981039346656037ull;
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t word;
        std::memcpy(&word, s.data() + i, 8);
        h = (h ^ word) * 1099511628211ull;
        h ^= h >> 29;  // a word-wide multiply moves high bits little: fold them back down
    }
    for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ull;
    return h;
}

}  // namespace forkbox
