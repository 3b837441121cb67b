// A small JSON interface: reading goes through yajl's tree parser, every value knows its JSON
// path so errors name it ("process.args[2]: expected string"); writing is a streaming writer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "libforkbox/error.hpp"

struct yajl_val_s;

namespace forkbox::json {

// A non-owning view of one value in a parsed Document.
class Value {
public:
    Value(const yajl_val_s* v, std::string path) : v_(v), path_(std::move(path)) {}

    const std::string& path() const { return path_; }
    bool is_null() const;
    bool is_object() const;
    bool is_array() const;
    bool is_string() const;
    bool is_number() const;
    bool is_bool() const;

    Result<std::string> as_string() const;
    Result<bool> as_bool() const;
    Result<int64_t> as_int64() const;
    Result<uint64_t> as_uint64() const;  // also takes values above INT64_MAX
    Result<double> as_double() const;

    // Object access. A member that is present with the value null counts as absent, as in
    // Go's encoding/json which runc's spec parsing uses.
    Result<void> expect_object() const;
    std::optional<Value> get(std::string_view key) const;
    Result<void> for_each_member(const std::function<Result<void>(std::string_view, const Value&)>& fn) const;

    // Array access.
    Result<void> expect_array() const;
    size_t size() const;  // array length, 0 for non-arrays
    Value at(size_t i) const;

    // Errors naming this value's path.
    std::unexpected<Error> error(std::string_view what) const;
    std::unexpected<Error> type_error(std::string_view expected) const;

private:
    const yajl_val_s* v_;
    std::string path_;
};

// Owns a parsed tree.
class Document {
public:
    static Result<Document> parse(std::string_view text);
    Value root() const { return Value(tree_.get(), ""); }

private:
    struct Free {
        void operator()(yajl_val_s* v) const;
    };
    std::unique_ptr<yajl_val_s, Free> tree_;
};

// Appends "key" to a parent path: "" + "process" = "process", "process" + "args" = "process.args".
std::string child_path(const std::string& parent, std::string_view key);

// Streaming writer producing compact JSON (or indented when asked).
class Writer {
public:
    explicit Writer(bool pretty = false) : pretty_(pretty) {}

    Writer& begin_object();
    Writer& end_object();
    Writer& begin_array();
    Writer& end_array();
    Writer& key(std::string_view k);
    Writer& value(std::string_view s);
    Writer& value(const char* s) { return value(std::string_view(s)); }
    Writer& value(const std::string& s) { return value(std::string_view(s)); }
    Writer& value(bool b);
    Writer& value(int64_t n);
    Writer& value(uint64_t n);
    Writer& value(int n) { return value(static_cast<int64_t>(n)); }
    Writer& value(unsigned n) { return value(static_cast<uint64_t>(n)); }
    // int64_t is `long` on LP64 and `long long` elsewhere: declare only the one that differs,
    // or the two overloads collide.
#if defined(__LP64__)
    Writer& value(long long n) { return value(static_cast<int64_t>(n)); }
    Writer& value(unsigned long long n) { return value(static_cast<uint64_t>(n)); }
#else
    Writer& value(long n) { return value(static_cast<int64_t>(n)); }
    Writer& value(unsigned long n) { return value(static_cast<uint64_t>(n)); }
#endif
    Writer& value(double d);
    Writer& null();
    // Inserts already-serialized JSON as a value.
    Writer& raw(std::string_view json);

    const std::string& str() const { return out_; }
    std::string take() { return std::move(out_); }

private:
    void before_value();
    void newline();
    std::string out_;
    bool pretty_;
    int depth_ = 0;
    bool need_comma_ = false;
    bool after_key_ = false;
};

// Appends s as a quoted, escaped JSON string.
void append_quoted(std::string& out, std::string_view s);

}  // namespace forkbox::json
