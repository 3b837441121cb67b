#include "libforkbox/dbus/variant_text.hpp"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace forkbox::dbus {

namespace {

class Parser {
public:
    explicit Parser(std::string_view s) : s_(s) {}

    Result<Value> whole() {
        FB_ASSIGN(Value v, value(std::nullopt));
        skip_space();
        if (i_ != s_.size()) return error("unexpected text after the value");
        return v;
    }

private:
    std::unexpected<Error> error(const std::string& what) const {
        return fail(EINVAL, what + " at offset " + std::to_string(i_));
    }
    void skip_space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
    }
    bool word(std::string_view w) {
        if (s_.substr(i_, w.size()) != w) return false;
        size_t end = i_ + w.size();
        if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
        i_ = end;
        return true;
    }

    // One value; `type` is a signature the value must have (from @T or a keyword).
    Result<Value> value(std::optional<std::string> type) {
        skip_space();
        if (i_ >= s_.size()) return error("missing value");
        if (s_[i_] == '@') {
            ++i_;
            size_t start = i_;
            while (i_ < s_.size() && s_[i_] != ' ') ++i_;
            std::string t(s_.substr(start, i_ - start));
            if (complete_type_length(t) != t.size()) return error("bad type annotation @" + t);
            return value(t);
        }
        static const struct {
            const char* keyword;
            const char* sig;
        } keywords[] = {{"byte", "y"},   {"int16", "n"},  {"uint16", "q"}, {"int32", "i"}, {"uint32", "u"},
                        {"int64", "x"},  {"uint64", "t"}, {"handle", "h"}, {"double", "d"}, {"objectpath", "o"},
                        {"signature", "g"}, {"string", "s"}, {"boolean", "b"}};
        for (const auto& k : keywords)
            if (word(k.keyword)) return value(std::string(k.sig));
        char c = s_[i_];
        if (word("true")) return typed(Value::boolean(true), type);
        if (word("false")) return typed(Value::boolean(false), type);
        if (c == '\'' || c == '"') {
            FB_ASSIGN(std::string str, quoted());
            if (type == "o") return Value::object_path(std::move(str));
            if (type == "g") return Value::signature(std::move(str));
            return typed(Value::string(std::move(str)), type);
        }
        if (c == '[') return array(type);
        if (c == '(') return tuple(type);
        if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c))) return number(type);
        return error("unknown value");
    }

    Result<Value> typed(Value v, const std::optional<std::string>& type) {
        if (type && *type != v.type()) return error("value of type " + v.type() + " where " + *type + " was asked for");
        return v;
    }

    Result<std::string> quoted() {
        char q = s_[i_++];
        std::string out;
        while (i_ < s_.size() && s_[i_] != q) {
            char c = s_[i_++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i_ >= s_.size()) break;
            char e = s_[i_++];
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '0': out += '\0'; break;
            default: out += e; break;  // \\ \' \"
            }
        }
        if (i_ >= s_.size()) return error("unterminated string");
        ++i_;
        if (out.find('\0') != std::string::npos) return error("NUL in a string");
        return out;
    }

    Result<Value> number(const std::optional<std::string>& type) {
        size_t start = i_;
        while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                  s_[i_] == '-' || s_[i_] == '+'))
            ++i_;
        std::string text(s_.substr(start, i_ - start));
        bool floating = text.find_first_of(".eE") != std::string::npos && text.find("0x") == std::string::npos;
        std::string sig = type ? *type : (floating ? "d" : "i");
        errno = 0;
        char* end = nullptr;
        if (sig == "d") {
            double d = std::strtod(text.c_str(), &end);
            if (*end || errno) return error("bad number " + text);
            return Value::dbl(d);
        }
        if (floating) return error("a fraction where an integer was asked for: " + text);
        bool is_signed = sig == "n" || sig == "i" || sig == "x";
        if (is_signed) {
            long long v = std::strtoll(text.c_str(), &end, 0);
            if (*end || errno) return error("bad number " + text);
            if (sig == "n" && (v < INT16_MIN || v > INT16_MAX)) return error("out of range for int16: " + text);
            if (sig == "i" && (v < INT32_MIN || v > INT32_MAX)) return error("out of range for int32: " + text);
            if (sig == "n") return Value::int16(static_cast<int16_t>(v));
            if (sig == "i") return Value::int32(static_cast<int32_t>(v));
            return Value::int64(v);
        }
        if (text[0] == '-') return error("negative number for an unsigned type: " + text);
        unsigned long long v = std::strtoull(text.c_str(), &end, 0);
        if (*end || errno) return error("bad number " + text);
        if (sig == "y") {
            if (v > 255) return error("out of range for byte: " + text);
            return Value::byte(static_cast<uint8_t>(v));
        }
        if (sig == "q") {
            if (v > UINT16_MAX) return error("out of range for uint16: " + text);
            return Value::uint16(static_cast<uint16_t>(v));
        }
        if (sig == "u" || sig == "h") {
            if (v > UINT32_MAX) return error("out of range for uint32: " + text);
            return Value::uint32(static_cast<uint32_t>(v));
        }
        if (sig == "t") return Value::uint64(v);
        return error("a number where " + sig + " was asked for");
    }

    Result<Value> array(const std::optional<std::string>& type) {
        if (type && (*type)[0] != 'a') return error("an array where " + *type + " was asked for");
        std::optional<std::string> element;
        if (type) element = type->substr(1);
        ++i_;  // [
        std::vector<Value> items;
        skip_space();
        while (i_ < s_.size() && s_[i_] != ']') {
            FB_ASSIGN(Value v, value(element));
            if (!element) element = v.type();
            items.push_back(std::move(v));
            skip_space();
            if (i_ < s_.size() && s_[i_] == ',') {
                ++i_;
                skip_space();
            } else if (i_ < s_.size() && s_[i_] != ']') {
                return error("expected ',' or ']'");
            }
        }
        if (i_ >= s_.size()) return error("unterminated array");
        ++i_;
        if (!element) return error("an empty array needs its type (@as [])");
        return Value::array(*element, std::move(items));
    }

    Result<Value> tuple(const std::optional<std::string>& type) {
        if (type && (*type)[0] != '(') return error("a tuple where " + *type + " was asked for");
        ++i_;  // (
        std::vector<Value> fields;
        size_t t = 1;  // into *type
        skip_space();
        while (i_ < s_.size() && s_[i_] != ')') {
            std::optional<std::string> field_type;
            if (type) {
                size_t n = complete_type_length(std::string_view(*type).substr(t));
                if (n == 0) return error("more fields than " + *type + " has");
                field_type = type->substr(t, n);
                t += n;
            }
            FB_ASSIGN(Value v, value(field_type));
            fields.push_back(std::move(v));
            skip_space();
            if (i_ < s_.size() && s_[i_] == ',') {
                ++i_;
                skip_space();
            } else if (i_ < s_.size() && s_[i_] != ')') {
                return error("expected ',' or ')'");
            }
        }
        if (i_ >= s_.size()) return error("unterminated tuple");
        ++i_;
        if (fields.empty()) return error("an empty tuple");
        Value v = Value::structure(std::move(fields));
        if (type && v.type() != *type) return error("tuple of type " + v.type() + " where " + *type + " was asked for");
        return v;
    }

    std::string_view s_;
    size_t i_ = 0;
};

}  // namespace

Result<Value> parse_variant_text(std::string_view text) { return Parser(text).whole(); }

}  // namespace forkbox::dbus
