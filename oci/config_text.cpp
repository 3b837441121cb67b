#include "oci/config_text.hpp"

#include <cstring>
#include <vector>

namespace forkbox::oci {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A cursor over JSON text that skips what it does not need to understand. Values are only
// delimited, not checked: whatever is kept is parsed for real later, and a cut-out profile
// is used only when its text equals one that was parsed and compiled before.
class Scanner {
public:
    explicit Scanner(std::string_view text) : t_(text) {}

    size_t pos() const { return i_; }
    bool at_end() {
        skip_space();
        return i_ == t_.size();
    }
    bool take(char c) {
        skip_space();
        if (i_ < t_.size() && t_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    bool peek(char c) {
        skip_space();
        return i_ < t_.size() && t_[i_] == c;
    }
    // A string's raw contents (between the quotes); `escaped` when it holds a backslash.
    bool string(std::string_view& raw, bool& escaped) {
        skip_space();
        if (i_ >= t_.size() || t_[i_] != '"') return false;
        size_t start = ++i_;
        escaped = false;
        while (i_ < t_.size() && t_[i_] != '"') {
            if (t_[i_] == '\\') {
                escaped = true;
                ++i_;
            }
            ++i_;
        }
        if (i_ >= t_.size()) return false;
        raw = t_.substr(start, i_ - start);
        ++i_;
        return true;
    }
    // Any value; [start, end) of its text.
    bool value(size_t& start, size_t& end) {
        skip_space();
        start = i_;
        if (i_ >= t_.size()) return false;
        if (t_[i_] == '"') {
            if (!skip_string()) return false;
        } else if (t_[i_] == '{' || t_[i_] == '[') {
            int depth = 0;
            for (;;) {
                while (i_ < t_.size() && !structural(t_[i_])) ++i_;
                if (i_ >= t_.size()) return false;
                char c = t_[i_];
                if (c == '"') {
                    if (!skip_string()) return false;
                    continue;
                }
                ++i_;
                if (c == '{' || c == '[') {
                    ++depth;
                } else if (--depth == 0) {
                    break;
                }
            }
        } else {  // a number or a literal
            while (i_ < t_.size() && !ends_word(t_[i_])) ++i_;
        }
        end = i_;
        return end > start;
    }

private:
    static bool structural(char c) { return c == '"' || c == '{' || c == '[' || c == '}' || c == ']'; }
    // From an opening quote past its closing one: the next quote not escaped by an odd
    // run of backslashes.
    bool skip_string() {
        size_t from = i_ + 1;
        for (;;) {
            const void* q = from < t_.size() ? std::memchr(t_.data() + from, '"', t_.size() - from) : nullptr;
            if (!q) return false;
            size_t at = static_cast<size_t>(static_cast<const char*>(q) - t_.data());
            size_t run = at;
            while (run > from && t_[run - 1] == '\\') --run;
            if ((at - run) % 2 == 0) {
                i_ = at + 1;
                return true;
            }
            from = at + 1;
        }
    }
    static bool ends_word(char c) { return c == ',' || c == '}' || c == ']' || is_space(c); }
    void skip_space() {
        while (i_ < t_.size() && is_space(t_[i_])) ++i_;
    }
    std::string_view t_;
    size_t i_ = 0;
};

// An object's members, from its '{' to its '}': calls on_member(key, key_start, value
// start, value end) for each. False when a key has an escape or repeats, or on bad text.
template <class OnMember>
bool members(Scanner& s, OnMember on_member) {
    if (!s.take('{')) return false;
    std::vector<std::string_view> seen;
    if (s.take('}')) return true;
    do {
        if (!s.peek('"')) return false;
        size_t key_start = s.pos();
        std::string_view key;
        bool escaped;
        if (!s.string(key, escaped) || escaped) return false;
        for (auto k : seen)
            if (k == key) return false;
        seen.push_back(key);
        if (!s.take(':')) return false;
        size_t start, end;
        if (!on_member(key, key_start, start, end)) return false;
    } while (s.take(','));
    return s.take('}');
}

// An array's elements, from its '[' to its ']': calls on_element() at each one's start.
template <class OnElement>
bool elements(Scanner& s, OnElement on_element) {
    if (!s.take('[')) return false;
    if (s.take(']')) return true;
    do {
        if (!on_element()) return false;
    } while (s.take(','));
    return s.take(']');
}

// One linux.namespaces entry: its "type" and "path", plain strings, or false.
bool namespace_entry(Scanner& s, NamespaceHint& hint) {
    std::string_view type, path;
    bool ok = members(s, [&](std::string_view key, size_t, size_t& start, size_t& end) {
        if (key != "type" && key != "path") return s.value(start, end);
        bool escaped;
        if (!s.string(key == "type" ? type : path, escaped)) return false;
        return !escaped;
    });
    if (!ok) return false;
    if (!path.empty()) {
        hint.joins_any = true;
    } else if (type == "network") {
        hint.makes_network = true;
    } else if (type == "user") {
        hint.makes_user = true;
    }
    return true;
}

}  // namespace

std::optional<NamespaceHint> scan_namespaces(std::string_view config) {
    Scanner s(config);
    NamespaceHint hint;
    bool ok = members(s, [&](std::string_view key, size_t, size_t& start, size_t& end) {
        if (key != "linux" || !s.peek('{')) return s.value(start, end);
        return members(s, [&](std::string_view inner, size_t, size_t& vs, size_t& ve) {
            if (inner != "namespaces" || !s.peek('[')) return s.value(vs, ve);
            return elements(s, [&] { return namespace_entry(s, hint); });
        });
    });
    if (!ok || !s.at_end()) return std::nullopt;
    return hint;
}

std::optional<SeccompMember> split_seccomp_member(std::string_view config) {
    Scanner s(config);
    bool found = false;
    size_t key_start = 0, value_start = 0, value_end = 0;
    bool ok = members(s, [&](std::string_view key, size_t, size_t& start, size_t& end) {
        if (key != "linux") return s.value(start, end);
        if (!s.peek('{')) return s.value(start, end);
        return members(s, [&](std::string_view inner, size_t inner_key, size_t& vs, size_t& ve) {
            if (!s.value(vs, ve)) return false;
            if (inner == "seccomp") {
                found = true;
                key_start = inner_key;
                value_start = vs;
                value_end = ve;
            }
            return true;
        });
    });
    if (!ok || !s.at_end() || !found) return std::nullopt;

    // Cut the member with one comma: the one after it, else the one before it.
    size_t cut_start = key_start, cut_end = value_end;
    size_t after = value_end;
    while (after < config.size() && is_space(config[after])) ++after;
    if (after < config.size() && config[after] == ',') {
        cut_end = after + 1;
    } else {
        size_t before = key_start;
        while (before > 0 && config[before - 1] != ',' && config[before - 1] != '{') --before;
        if (before > 0 && config[before - 1] == ',') cut_start = before - 1;
    }
    SeccompMember m;
    m.profile = config.substr(value_start, value_end - value_start);
    m.rest.reserve(config.size() - (cut_end - cut_start));
    m.rest.append(config.substr(0, cut_start));
    m.rest.append(config.substr(cut_end));
    return m;
}

}  // namespace forkbox::oci
