// The D-Bus wire format (the specification's "Message Protocol"), pure: values of any
// signature, their marshalling, and whole messages. No sockets here (connection.hpp).
//
// forkbox talks to systemd over D-Bus for its systemd cgroup driver, and links statically:
// Debian ships no static sd-bus, and the few calls the driver makes do not justify linking
// libdbus-1.a (README: "The systemd cgroup driver"). Written from the specification; the
// unit tests pin the bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"

namespace forkbox::dbus {

// One value of a single complete type: a basic value, an array, a struct, a dict entry or a
// variant. Containers hold their members in items(): an array its elements, a struct its
// fields, a dict entry its key and value, a variant the one value it carries.
class Value {
public:
    Value() = default;
    static Value byte(uint8_t v) { return basic("y", v); }
    static Value boolean(bool v) { return basic("b", v ? 1 : 0); }
    static Value int16(int16_t v) { return basic("n", static_cast<uint16_t>(v)); }
    static Value uint16(uint16_t v) { return basic("q", v); }
    static Value int32(int32_t v) { return basic("i", static_cast<uint32_t>(v)); }
    static Value uint32(uint32_t v) { return basic("u", v); }
    static Value int64(int64_t v) { return basic("x", static_cast<uint64_t>(v)); }
    static Value uint64(uint64_t v) { return basic("t", v); }
    static Value dbl(double v);
    static Value string(std::string v) { return text("s", std::move(v)); }
    static Value object_path(std::string v) { return text("o", std::move(v)); }
    static Value signature(std::string v) { return text("g", std::move(v)); }
    // An array of elements whose single complete type is `element` (kept for an empty one).
    static Value array(std::string element, std::vector<Value> items);
    static Value structure(std::vector<Value> fields);
    static Value dict_entry(Value key, Value value);
    static Value variant(Value inner);
    // Conveniences for the arrays systemd's properties use: as, au, ay.
    static Value strings(const std::vector<std::string>& v);
    static Value uint32s(const std::vector<uint32_t>& v);
    static Value bytes(const std::vector<uint8_t>& v);

    // The value's signature: "s", "au", "a(ss)", "v", "(uoss)".
    const std::string& type() const { return sig_; }
    char code() const { return sig_.empty() ? '\0' : sig_[0]; }
    // Integers and booleans, whatever their width (signed ones sign-extended).
    uint64_t as_uint() const { return num_; }
    int64_t as_int() const;
    bool as_bool() const { return num_ != 0; }
    double as_double() const;
    // Strings, object paths and signatures.
    const std::string& as_string() const { return str_; }
    const std::vector<Value>& items() const { return items_; }
    // A variant's value (a value that is not a variant is its own).
    const Value& unwrapped() const;

    bool operator==(const Value&) const = default;

private:
    static Value basic(const char* sig, uint64_t v);
    static Value text(const char* sig, std::string v);
    std::string sig_;
    uint64_t num_ = 0;
    std::string str_;
    std::vector<Value> items_;
};

// The length of the single complete type at the start of `sig` (0 when there is none, or it
// is malformed: unbalanced, a dict entry outside an array, nesting beyond the spec's 32).
size_t complete_type_length(std::string_view sig);
// Whether `sig` is a sequence of complete types (a message body's signature), at most 255 bytes.
bool valid_signature(std::string_view sig);

// Appends values in the wire format, little-endian, each aligned as the specification says
// relative to the buffer's start (a message's start: the body begins 8-aligned).
class Writer {
public:
    void write(const Value& v);
    const std::string& bytes() const { return buf_; }
    std::string take() { return std::move(buf_); }
    void align(size_t n);
    void put_u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
    void put_u32(uint32_t v);
    void put_u64(uint64_t v);

private:
    void put_u16(uint16_t v);
    void put_text(const std::string& s, bool short_length);
    std::string buf_;
};

// Reads values of given signatures from a buffer written in either byte order.
class Reader {
public:
    Reader(std::string_view buf, bool big_endian, size_t offset = 0)
        : buf_(buf), big_endian_(big_endian), pos_(offset) {}
    // One value of the single complete type `sig`.
    Result<Value> read(std::string_view sig);
    size_t position() const { return pos_; }
    Result<void> align(size_t n);
    Result<uint8_t> get_u8();
    Result<uint32_t> get_u32();

private:
    Result<Value> read_at_depth(std::string_view sig, int depth);
    Result<uint16_t> get_u16();
    Result<uint64_t> get_u64();
    Result<std::string> get_text(bool short_length);
    std::string_view buf_;
    bool big_endian_;
    size_t pos_;
};

enum class MessageType : uint8_t { Invalid = 0, MethodCall = 1, MethodReturn = 2, Error = 3, Signal = 4 };

inline constexpr uint8_t kNoReplyExpected = 0x1;
inline constexpr uint8_t kNoAutoStart = 0x2;

struct Message {
    MessageType type = MessageType::Invalid;
    uint8_t flags = 0;
    uint32_t serial = 0;
    std::string path, interface, member, error_name, destination, sender;
    uint32_t reply_serial = 0;
    std::vector<Value> body;  // its signature is the concatenation of the values' types

    std::string signature() const;
    // A method call to `destination` (empty on a peer-to-peer connection).
    static Message method_call(std::string destination, std::string path, std::string interface,
                               std::string member, std::vector<Value> body = {});
};

// The whole message (header, its fields, padding, body), little-endian. The serial must be
// set (non-zero); the SIGNATURE field is derived from the body.
std::string encode_message(const Message& m);

// The specification's limit on a message: 128 MiB; systemd's answers are small.
inline constexpr size_t kMaxMessageSize = 128u << 20;
// From a message's first 16 bytes (the fixed header and the fields' array length): how long
// the whole message is. EPROTO for a header no valid message has.
Result<size_t> message_length(std::string_view head);
// Parses one whole message (message_length bytes).
Result<Message> decode_message(std::string_view bytes);

}  // namespace forkbox::dbus
