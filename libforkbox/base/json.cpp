#include "libforkbox/base/json.hpp"

#include <yajl/yajl_parse.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace forkbox::json {

using detail::Kind;
using detail::Node;
using detail::Slot;
using detail::Tree;

namespace {

// The number's text as a long long when it is an integer in range, as yajl_tree's
// YAJL_IS_INTEGER decided (yajl_parse_integer): an optional sign and digits only, and a
// magnitude of at most LLONG_MAX (so -9223372036854775808 is not one).
bool integer_value(std::string_view raw, long long& out) {
    const char* p = raw.data();
    const char* end = p + raw.size();
    bool negative = false;
    if (p < end && *p == '-') {
        negative = true;
        ++p;
    }
    if (p < end && *p == '+') ++p;
    long long r = 0;
    for (; p < end; ++p) {
        if (*p < '0' || *p > '9') return false;
        int d = *p - '0';
        if (r > (LLONG_MAX - d) / 10) return false;
        r = r * 10 + d;
    }
    out = negative ? -r : r;
    return true;
}

// Builds a Tree from yajl's callbacks. Children of the containers still open wait in
// `pending`, innermost last; when a container closes they move, contiguous, to Tree::slots.
// No recursion, so nesting depth is bounded by memory, not by the stack.
class Builder {
public:
    explicit Builder(Tree& t) : t_(t) {}

    static const yajl_callbacks callbacks;

private:
    static Builder& self(void* ctx) { return *static_cast<Builder*>(ctx); }

    uint32_t add_text(const void* p, size_t n) {
        auto off = static_cast<uint32_t>(t_.text.size());
        t_.text.append(static_cast<const char*>(p), n);
        t_.text.push_back('\0');  // strtod and strtoull read number texts in place
        return off;
    }

    uint32_t add(Kind k, uint32_t off = 0, uint32_t len = 0) {
        auto n = static_cast<uint32_t>(t_.nodes.size());
        uint32_t parent = open_.empty() ? Tree::kNone : open_.back().node;
        t_.nodes.push_back(Node{k, off, len, parent, Tree::kNone});
        if (!open_.empty()) pending_.push_back(Slot{n, key_off_, key_len_});
        return n;
    }

    void start(Kind k) { open_.push_back(Open{add(k), static_cast<uint32_t>(pending_.size())}); }

    void end() {
        Open o = open_.back();
        open_.pop_back();
        Node& c = t_.nodes[o.node];
        c.off = static_cast<uint32_t>(t_.slots.size());
        c.len = static_cast<uint32_t>(pending_.size() - o.first);
        for (size_t i = o.first; i < pending_.size(); ++i) {
            t_.nodes[pending_[i].node].slot = static_cast<uint32_t>(t_.slots.size());
            t_.slots.push_back(pending_[i]);
        }
        pending_.resize(o.first);
    }

    static int on_null(void* ctx) {
        self(ctx).add(Kind::Null);
        return 1;
    }
    static int on_boolean(void* ctx, int b) {
        self(ctx).add(b ? Kind::True : Kind::False);
        return 1;
    }
    static int on_number(void* ctx, const char* s, size_t n) {
        Builder& b = self(ctx);
        b.add(Kind::Number, b.add_text(s, n), static_cast<uint32_t>(n));
        return 1;
    }
    static int on_string(void* ctx, const unsigned char* s, size_t n) {
        Builder& b = self(ctx);
        b.add(Kind::String, b.add_text(s, n), static_cast<uint32_t>(n));
        return 1;
    }
    static int on_start_map(void* ctx) {
        self(ctx).start(Kind::Object);
        return 1;
    }
    static int on_map_key(void* ctx, const unsigned char* s, size_t n) {
        Builder& b = self(ctx);
        b.key_off_ = b.add_text(s, n);
        b.key_len_ = static_cast<uint32_t>(n);
        return 1;
    }
    static int on_end_map(void* ctx) {
        self(ctx).end();
        return 1;
    }
    static int on_start_array(void* ctx) {
        self(ctx).start(Kind::Array);
        return 1;
    }
    static int on_end_array(void* ctx) {
        self(ctx).end();
        return 1;
    }

    struct Open {
        uint32_t node;
        uint32_t first;  // its first child in pending_
    };
    Tree& t_;
    std::vector<Open> open_;
    std::vector<Slot> pending_;
    uint32_t key_off_ = 0;  // the key of the next member, while inside an object
    uint32_t key_len_ = 0;
};

// yajl_number gets every number as written; yajl_integer and yajl_double stay unset.
const yajl_callbacks Builder::callbacks = {
    on_null,     on_boolean, nullptr,      nullptr,        on_number,    on_string,
    on_start_map, on_map_key, on_end_map, on_start_array, on_end_array,
};

struct HandleFree {
    void operator()(yajl_handle h) const { yajl_free(h); }
};

}  // namespace

std::string child_path(const std::string& parent, std::string_view key) {
    if (parent.empty()) return std::string(key);
    std::string p = parent;
    p += '.';
    p += key;
    return p;
}

std::string Value::path() const {
    // Walk up to the root, then write the steps down from it. Only errors ask, so no hurry.
    std::vector<uint32_t> chain;
    for (uint32_t n = n_; t_->nodes[n].parent != Tree::kNone; n = t_->nodes[n].parent) chain.push_back(n);
    std::string p;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const Node& c = t_->nodes[*it];
        const Node& parent = t_->nodes[c.parent];
        if (parent.kind == Kind::Array) {
            p += '[';
            p += std::to_string(c.slot - parent.off);
            p += ']';
        } else {
            const Slot& s = t_->slots[c.slot];
            if (!p.empty()) p += '.';  // as child_path: a member of the root has no dot
            p += t_->str(s.key_off, s.key_len);
        }
    }
    return p;
}

bool Value::is_null() const { return kind() == Kind::Null; }
bool Value::is_object() const { return kind() == Kind::Object; }
bool Value::is_array() const { return kind() == Kind::Array; }
bool Value::is_string() const { return kind() == Kind::String; }
bool Value::is_number() const { return kind() == Kind::Number; }
bool Value::is_bool() const { return kind() == Kind::True || kind() == Kind::False; }

std::unexpected<Error> Value::error(std::string_view what) const {
    std::string msg = path();
    if (msg.empty()) msg = "(root)";
    msg += ": ";
    msg += what;
    return fail(EINVAL, std::move(msg));
}

std::unexpected<Error> Value::type_error(std::string_view expected) const {
    return error("expected " + std::string(expected));
}

Result<std::string> Value::as_string() const {
    if (!is_string()) return type_error("string");
    return std::string(text());
}

Result<bool> Value::as_bool() const {
    if (!is_bool()) return type_error("boolean");
    return kind() == Kind::True;
}

Result<int64_t> Value::as_int64() const {
    long long i = 0;
    if (!is_number() || !integer_value(text(), i)) return type_error("integer");
    return static_cast<int64_t>(i);
}

Result<uint64_t> Value::as_uint64() const {
    if (!is_number()) return type_error("unsigned integer");
    std::string_view raw = text();
    if (long long i = 0; integer_value(raw, i)) {
        if (i < 0) return type_error("unsigned integer");
        return static_cast<uint64_t>(i);
    }
    // Above INT64_MAX: the text holds the exact digits.
    if (raw.empty() || raw[0] == '-') return type_error("unsigned integer");
    for (char c : raw)
        if (c < '0' || c > '9') return type_error("unsigned integer");
    errno = 0;
    unsigned long long u = std::strtoull(raw.data(), nullptr, 10);  // NUL-terminated in Tree::text
    if (errno == ERANGE) return error("integer out of range");
    return static_cast<uint64_t>(u);
}

Result<double> Value::as_double() const {
    if (!is_number()) return type_error("number");
    std::string_view raw = text();
    if (long long i = 0; integer_value(raw, i)) return static_cast<double>(i);
    return std::strtod(raw.data(), nullptr);
}

Result<void> Value::expect_object() const {
    if (!is_object()) return type_error("object");
    return {};
}

std::optional<Value> Value::get(std::string_view key) const {
    if (!is_object()) return std::nullopt;
    const Node& o = node();
    for (uint32_t i = o.off; i < o.off + o.len; ++i) {
        const Slot& s = t_->slots[i];
        if (t_->str(s.key_off, s.key_len) == key) {
            if (t_->nodes[s.node].kind == Kind::Null) return std::nullopt;
            return Value(t_, s.node);
        }
    }
    return std::nullopt;
}

Result<void> Value::expect_array() const {
    if (!is_array()) return type_error("array");
    return {};
}

size_t Value::size() const { return is_array() ? node().len : 0; }

Value Value::at(size_t i) const { return Value(t_, t_->slots[node().off + i].node); }

Result<Document> Document::parse(std::string_view text) {
    // yajl_tree_parse, used before, read a C string: input ends at the first NUL. (An empty
    // view may have no data pointer at all: memchr must not see it.)
    if (const void* nul = text.empty() ? nullptr : std::memchr(text.data(), '\0', text.size()))
        text = text.substr(0, static_cast<size_t>(static_cast<const char*>(nul) - text.data()));
    if (text.size() >= UINT32_MAX / 2) return fail(EINVAL, "invalid JSON: document too large");

    auto tree = std::make_unique<Tree>();
    // Guesses that save most regrowth without touching much more memory than needed (a first
    // call pays a page fault per fresh page): runc's config.json, indented, has a value per
    // ~25 bytes and half its bytes in strings.
    tree->text.reserve(text.size() / 2 + 16);
    tree->nodes.reserve(text.size() / 16 + 4);
    tree->slots.reserve(text.size() / 16 + 4);
    Builder b(*tree);
    std::unique_ptr<yajl_handle_t, HandleFree> h(yajl_alloc(&Builder::callbacks, nullptr, &b));
    if (!h) return fail(ENOMEM, "invalid JSON: out of memory");
    yajl_config(h.get(), yajl_allow_comments, 1);  // as yajl_tree_parse does
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    yajl_status st = yajl_parse(h.get(), bytes, text.size());
    if (st == yajl_status_ok) st = yajl_complete_parse(h.get());
    if (st != yajl_status_ok) {
        std::string msg = "invalid JSON";
        // Not verbose: the verbose message adds lines quoting the input, which were cut anyway.
        if (unsigned char* e = yajl_get_error(h.get(), 0, bytes, text.size())) {
            std::string err(reinterpret_cast<char*>(e));
            yajl_free_error(h.get(), e);
            if (auto nl = err.find('\n'); nl != std::string::npos) err.resize(nl);
            while (!err.empty() && err.back() == ' ') err.pop_back();
            if (!err.empty()) msg += ": " + err;
        }
        return fail(EINVAL, msg);
    }
    Document d;
    d.tree_ = std::move(tree);
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
