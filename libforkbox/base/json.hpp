// A small JSON interface. Reading: yajl's callback parser builds a compact tree owned by a
// Document (nodes in one array, strings and number texts in one buffer); every value can name
// its JSON path so errors say where ("process.args[2]: expected string"), the path being built
// only when asked. Writing is a streaming writer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libforkbox/base/error.hpp"

namespace forkbox::json {

class Document;

namespace detail {

enum class Kind : uint8_t { Null, False, True, Number, String, Object, Array };

// One JSON value. String and Number: `off`/`len` locate the text (unescaped string, or the
// number exactly as written) in Tree::text. Object and Array: `off`/`len` locate the members
// or elements in Tree::slots. `parent` and `slot` (index in Tree::slots) are where the value
// sits, for its path; the root has parent kNone.
struct Node {
    Kind kind;
    uint32_t off;
    uint32_t len;
    uint32_t parent;
    uint32_t slot;
};

// A member of an object (key in Tree::text) or an element of an array (key unused).
struct Slot {
    uint32_t node;
    uint32_t key_off;
    uint32_t key_len;
};

struct Tree {
    static constexpr uint32_t kNone = UINT32_MAX;
    std::vector<Node> nodes;  // nodes[0] is the root
    std::vector<Slot> slots;  // each container's children are contiguous
    std::string text;         // every string, key and number, each followed by a NUL

    std::string_view str(uint32_t off, uint32_t len) const { return {text.data() + off, len}; }
};

}  // namespace detail

// A non-owning view of one value in a parsed Document: two words, cheap to copy. It stays
// valid as long as the Document (moving the Document keeps it valid).
class Value {
public:
    // The path of this value: "" for the root, "process.args[2]" below it.
    std::string path() const;
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
    // Go's encoding/json which runc's spec parsing uses. With duplicate keys get() finds the
    // first; for_each_member visits all, in document order.
    Result<void> expect_object() const;
    std::optional<Value> get(std::string_view key) const;
    template <typename F>  // F: Result<void>(std::string_view key, const Value& value)
    Result<void> for_each_member(F&& fn) const;

    // Array access.
    Result<void> expect_array() const;
    size_t size() const;  // array length, 0 for non-arrays
    Value at(size_t i) const;  // i < size()

    // Errors naming this value's path.
    std::unexpected<Error> error(std::string_view what) const;
    std::unexpected<Error> type_error(std::string_view expected) const;

private:
    friend class Document;
    Value(const detail::Tree* t, uint32_t n) : t_(t), n_(n) {}
    const detail::Node& node() const { return t_->nodes[n_]; }
    detail::Kind kind() const { return node().kind; }
    std::string_view text() const { return t_->str(node().off, node().len); }

    const detail::Tree* t_;
    uint32_t n_;
};

// Owns a parsed tree.
class Document {
public:
    static Result<Document> parse(std::string_view text);
    Value root() const { return Value(tree_.get(), 0); }

private:
    std::unique_ptr<detail::Tree> tree_;
};

template <typename F>
Result<void> Value::for_each_member(F&& fn) const {
    FB_TRY(expect_object());
    const detail::Node& o = node();
    for (uint32_t i = o.off; i < o.off + o.len; ++i) {
        const detail::Slot& s = t_->slots[i];
        const Value child(t_, s.node);
        FB_TRY(fn(t_->str(s.key_off, s.key_len), child));
    }
    return {};
}

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
