// Helpers shared by parse.cpp and parse_linux.cpp: typed reads of object members that name the
// JSON path in every error. Absent and null members leave the target untouched (Go's
// encoding/json, which runc uses, treats null the same way). Not part of the public interface.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "libforkbox/base/json.hpp"
#include "oci/spec.hpp"

namespace forkbox::oci::detail {

using json::Value;

// "<path>: required field is missing", the path being obj.key.
std::unexpected<Error> missing(const Value& obj, std::string_view key);

// Whole-value conversions: `v` is the value itself.
Result<std::string> to_string(const Value& v);
Result<bool> to_bool(const Value& v);
Result<std::vector<std::string>> to_strings(const Value& v);  // "expected array of strings"
Result<std::map<std::string, std::string>> to_string_map(const Value& v);

template <typename T>
Result<T> to_integer(const Value& v) {
    if constexpr (std::is_unsigned_v<T>) {
        FB_ASSIGN(uint64_t n, v.as_uint64());
        if (n > static_cast<uint64_t>(std::numeric_limits<T>::max()))
            return v.error("value " + std::to_string(n) + " out of range (maximum " +
                           std::to_string(std::numeric_limits<T>::max()) + ")");
        return static_cast<T>(n);
    } else {
        FB_ASSIGN(int64_t n, v.as_int64());
        if (n < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            n > static_cast<int64_t>(std::numeric_limits<T>::max()))
            return v.error("value " + std::to_string(n) + " out of range (" +
                           std::to_string(std::numeric_limits<T>::min()) + " to " +
                           std::to_string(std::numeric_limits<T>::max()) + ")");
        return static_cast<T>(n);
    }
}

// Member reads. opt_*: absent or null keeps `out`; req_*: absent is an error.
Result<void> opt_string(const Value& obj, std::string_view key, std::string& out);
Result<void> req_string(const Value& obj, std::string_view key, std::string& out);
Result<void> opt_bool(const Value& obj, std::string_view key, bool& out);
Result<void> opt_bool(const Value& obj, std::string_view key, std::optional<bool>& out);
Result<void> opt_strings(const Value& obj, std::string_view key, std::vector<std::string>& out);
Result<void> opt_string_map(const Value& obj, std::string_view key,
                            std::map<std::string, std::string>& out);

template <typename T>
Result<void> opt_integer(const Value& obj, std::string_view key, T& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, to_integer<T>(*v));
    return {};
}

template <typename T>
Result<void> opt_integer(const Value& obj, std::string_view key, std::optional<T>& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, to_integer<T>(*v));
    return {};
}

template <typename T>
Result<void> req_integer(const Value& obj, std::string_view key, T& out) {
    auto v = obj.get(key);
    if (!v) return missing(obj, key);
    FB_ASSIGN(out, to_integer<T>(*v));
    return {};
}

// Reads an optional object member with a parser, into an std::optional.
template <typename T, typename F>
Result<void> opt_object(const Value& obj, std::string_view key, std::optional<T>& out, F parse) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, parse(*v));
    return {};
}

// Reads an optional array member, calling parse(element) for each element.
template <typename T, typename F>
Result<void> opt_array(const Value& obj, std::string_view key, std::vector<T>& out, F parse) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_TRY(v->expect_array());
    out.clear();
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
        FB_ASSIGN(T item, parse(v->at(i)));
        out.push_back(std::move(item));
    }
    return {};
}

// Reads an optional object member used as a map, calling parse(member value) per entry.
template <typename T, typename F>
Result<void> opt_object_map(const Value& obj, std::string_view key, std::map<std::string, T>& out,
                            F parse) {
    auto v = obj.get(key);
    if (!v) return {};
    out.clear();
    return v->for_each_member([&](std::string_view k, const Value& m) -> Result<void> {
        T item{};
        if (!m.is_null()) {
            FB_ASSIGN(item, parse(m));
        }
        out[std::string(k)] = std::move(item);
        return {};
    });
}

// Shared between config.json and `exec --process` (parse.cpp) and linux (parse_linux.cpp).
Result<IdMapping> parse_id_mapping(const Value& v);
Result<Linux> parse_linux(const Value& v);
Result<Resources> parse_resources(const Value& v);

}  // namespace forkbox::oci::detail
