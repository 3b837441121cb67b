#include "oci/json.hpp"

#include <yajl/yajl_tree.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace forkbox::json {

namespace {
const yajl_val_s* node(const yajl_val_s* v) { return v; }
yajl_val mut(const yajl_val_s* v) { return const_cast<yajl_val>(v); }
}  // namespace

std::string child_path(const std::string& parent, std::string_view key) {
    if (parent.empty()) return std::string(key);
    std::string p = parent;
    p += '.';
    p += key;
    return p;
}

bool Value::is_null() const { return v_ == nullptr || YAJL_IS_NULL(mut(v_)); }
bool Value::is_object() const { return v_ && YAJL_IS_OBJECT(mut(v_)); }
bool Value::is_array() const { return v_ && YAJL_IS_ARRAY(mut(v_)); }
bool Value::is_string() const { return v_ && YAJL_IS_STRING(mut(v_)); }
bool Value::is_number() const { return v_ && YAJL_IS_NUMBER(mut(v_)); }
bool Value::is_bool() const { return v_ && (YAJL_IS_TRUE(mut(v_)) || YAJL_IS_FALSE(mut(v_))); }

std::unexpected<Error> Value::error(std::string_view what) const {
    std::string msg = path_.empty() ? std::string("(root)") : path_;
    msg += ": ";
    msg += what;
    return fail(EINVAL, std::move(msg));
}

std::unexpected<Error> Value::type_error(std::string_view expected) const {
    return error("expected " + std::string(expected));
}

Result<std::string> Value::as_string() const {
    if (!is_string()) return type_error("string");
    return std::string(node(v_)->u.string);
}

Result<bool> Value::as_bool() const {
    if (!is_bool()) return type_error("boolean");
    return static_cast<bool>(YAJL_IS_TRUE(mut(v_)));
}

Result<int64_t> Value::as_int64() const {
    if (!is_number() || !YAJL_IS_INTEGER(mut(v_))) return type_error("integer");
    return static_cast<int64_t>(node(v_)->u.number.i);
}

Result<uint64_t> Value::as_uint64() const {
    if (!is_number()) return type_error("unsigned integer");
    if (YAJL_IS_INTEGER(mut(v_))) {
        long long i = node(v_)->u.number.i;
        if (i < 0) return type_error("unsigned integer");
        return static_cast<uint64_t>(i);
    }
    // Above INT64_MAX yajl keeps only a double; the raw text still holds the exact digits.
    const char* raw = node(v_)->u.number.r;
    if (!raw || *raw == '-') return type_error("unsigned integer");
    for (const char* p = raw; *p; ++p)
        if (*p < '0' || *p > '9') return type_error("unsigned integer");
    errno = 0;
    unsigned long long u = std::strtoull(raw, nullptr, 10);
    if (errno == ERANGE) return error("integer out of range");
    return static_cast<uint64_t>(u);
}

Result<double> Value::as_double() const {
    if (!is_number()) return type_error("number");
    if (YAJL_IS_INTEGER(mut(v_))) return static_cast<double>(node(v_)->u.number.i);
    return node(v_)->u.number.d;
}

Result<void> Value::expect_object() const {
    if (!is_object()) return type_error("object");
    return {};
}

std::optional<Value> Value::get(std::string_view key) const {
    if (!is_object()) return std::nullopt;
    const auto& o = node(v_)->u.object;
    for (size_t i = 0; i < o.len; ++i) {
        if (key == o.keys[i]) {
            if (o.values[i] == nullptr || YAJL_IS_NULL(o.values[i])) return std::nullopt;
            return Value(o.values[i], child_path(path_, key));
        }
    }
    return std::nullopt;
}

Result<void> Value::for_each_member(
    const std::function<Result<void>(std::string_view, const Value&)>& fn) const {
    FB_TRY(expect_object());
    const auto& o = node(v_)->u.object;
    for (size_t i = 0; i < o.len; ++i) {
        Value child(o.values[i], child_path(path_, o.keys[i]));
        FB_TRY(fn(o.keys[i], child));
    }
    return {};
}

Result<void> Value::expect_array() const {
    if (!is_array()) return type_error("array");
    return {};
}

size_t Value::size() const { return is_array() ? node(v_)->u.array.len : 0; }

Value Value::at(size_t i) const {
    return Value(node(v_)->u.array.values[i], path_ + "[" + std::to_string(i) + "]");
}

void Document::Free::operator()(yajl_val_s* v) const { yajl_tree_free(v); }

Result<Document> Document::parse(std::string_view text) {
    std::string buf(text);  // yajl_tree_parse wants a NUL-terminated string
    char err[256] = {0};
    yajl_val v = yajl_tree_parse(buf.c_str(), err, sizeof err);
    if (!v) {
        std::string msg = "invalid JSON";
        if (err[0]) {
            std::string e(err);
            while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
            // yajl's message spans lines; keep the first one.
            if (auto nl = e.find('\n'); nl != std::string::npos) e.resize(nl);
            msg += ": " + e;
        }
        return fail(EINVAL, msg);
    }
    Document d;
    d.tree_.reset(v);
    return d;
}

void append_quoted(std::string& out, std::string_view s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
}

void Writer::newline() {
    if (!pretty_) return;
    out_ += '\n';
    out_.append(static_cast<size_t>(depth_) * 2, ' ');
}

void Writer::before_value() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (need_comma_) out_ += ',';
    if (depth_ > 0) newline();
}

Writer& Writer::begin_object() {
    before_value();
    out_ += '{';
    ++depth_;
    need_comma_ = false;
    return *this;
}

Writer& Writer::end_object() {
    --depth_;
    if (need_comma_) newline();
    out_ += '}';
    need_comma_ = true;
    return *this;
}

Writer& Writer::begin_array() {
    before_value();
    out_ += '[';
    ++depth_;
    need_comma_ = false;
    return *this;
}

Writer& Writer::end_array() {
    --depth_;
    if (need_comma_) newline();
    out_ += ']';
    need_comma_ = true;
    return *this;
}

Writer& Writer::key(std::string_view k) {
    if (need_comma_) out_ += ',';
    newline();
    append_quoted(out_, k);
    out_ += pretty_ ? ": " : ":";
    after_key_ = true;
    need_comma_ = false;
    return *this;
}

Writer& Writer::value(std::string_view s) {
    before_value();
    append_quoted(out_, s);
    need_comma_ = true;
    return *this;
}

Writer& Writer::value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
    need_comma_ = true;
    return *this;
}

Writer& Writer::value(int64_t n) {
    before_value();
    out_ += std::to_string(n);
    need_comma_ = true;
    return *this;
}

Writer& Writer::value(uint64_t n) {
    before_value();
    out_ += std::to_string(n);
    need_comma_ = true;
    return *this;
}

Writer& Writer::value(double d) {
    before_value();
    if (std::isfinite(d)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", d);
        out_ += buf;
    } else {
        out_ += "null";
    }
    need_comma_ = true;
    return *this;
}

Writer& Writer::null() {
    before_value();
    out_ += "null";
    need_comma_ = true;
    return *this;
}

Writer& Writer::raw(std::string_view json) {
    before_value();
    out_ += json;
    need_comma_ = true;
    return *this;
}

}  // namespace forkbox::json
