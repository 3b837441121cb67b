#include "libforkbox/dbus/message.hpp"

#include <bit>
#include <cstring>

namespace forkbox::dbus {

namespace {

bool is_basic(char c) {
    switch (c) {
    case 'y': case 'b': case 'n': case 'q': case 'i': case 'u': case 'x': case 't': case 'd': case 'h':
    case 's': case 'o': case 'g':
        return true;
    default:
        return false;
    }
}

size_t alignment_of(char c) {
    switch (c) {
    case 'n': case 'q': return 2;
    case 'b': case 'i': case 'u': case 'h': case 's': case 'o': case 'a': return 4;
    case 'x': case 't': case 'd': case '(': case '{': return 8;
    default: return 1;  // y g v
    }
}

// The specification's limits: 32 nested arrays, 32 nested structs, 64 in all.
struct Depth {
    int arrays = 0, structs = 0;
    bool ok() const { return arrays <= 32 && structs <= 32 && arrays + structs <= 64; }
};

size_t type_length(std::string_view sig, Depth d) {
    if (sig.empty()) return 0;
    char c = sig[0];
    if (is_basic(c) || c == 'v') return 1;
    if (c == 'a') {
        ++d.arrays;
        if (!d.ok() || sig.size() < 2) return 0;
        if (sig[1] == '{') {
            // A dict entry: a basic key and one complete value type.
            ++d.structs;
            if (!d.ok() || sig.size() < 4 || !is_basic(sig[2])) return 0;
            size_t value = type_length(sig.substr(3), d);
            if (value == 0 || 3 + value >= sig.size() || sig[3 + value] != '}') return 0;
            return 4 + value;
        }
        size_t element = type_length(sig.substr(1), d);
        return element == 0 ? 0 : 1 + element;
    }
    if (c == '(') {
        ++d.structs;
        if (!d.ok()) return 0;
        size_t i = 1, fields = 0;
        while (i < sig.size() && sig[i] != ')') {
            size_t n = type_length(sig.substr(i), d);
            if (n == 0) return 0;
            i += n;
            ++fields;
        }
        if (i >= sig.size() || fields == 0) return 0;
        return i + 1;
    }
    return 0;  // '{' outside an array, ')' or '}' unbalanced, unknown codes
}

std::string element_of(std::string_view array_sig) { return std::string(array_sig.substr(1)); }

std::unexpected<Error> malformed(const std::string& what) { return fail(EPROTO, "D-Bus message: " + what); }

}  // namespace

size_t complete_type_length(std::string_view sig) { return type_length(sig, Depth{}); }

bool valid_signature(std::string_view sig) {
    if (sig.size() > 255) return false;
    size_t i = 0;
    while (i < sig.size()) {
        size_t n = complete_type_length(sig.substr(i));
        if (n == 0) return false;
        i += n;
    }
    return true;
}

Value Value::basic(const char* sig, uint64_t v) {
    Value out;
    out.sig_ = sig;
    out.num_ = v;
    return out;
}

Value Value::text(const char* sig, std::string v) {
    Value out;
    out.sig_ = sig;
    out.str_ = std::move(v);
    return out;
}

Value Value::dbl(double v) { return basic("d", std::bit_cast<uint64_t>(v)); }

Value Value::array(std::string element, std::vector<Value> items) {
    Value out;
    out.sig_ = "a" + std::move(element);
    out.items_ = std::move(items);
    return out;
}

Value Value::structure(std::vector<Value> fields) {
    Value out;
    out.sig_ = "(";
    for (const auto& f : fields) out.sig_ += f.type();
    out.sig_ += ")";
    out.items_ = std::move(fields);
    return out;
}

Value Value::dict_entry(Value key, Value value) {
    Value out;
    out.sig_ = "{" + key.type() + value.type() + "}";
    out.items_ = {std::move(key), std::move(value)};
    return out;
}

Value Value::variant(Value inner) {
    Value out;
    out.sig_ = "v";
    out.items_ = {std::move(inner)};
    return out;
}

Value Value::strings(const std::vector<std::string>& v) {
    std::vector<Value> items;
    for (const auto& s : v) items.push_back(string(s));
    return array("s", std::move(items));
}

Value Value::uint32s(const std::vector<uint32_t>& v) {
    std::vector<Value> items;
    for (uint32_t u : v) items.push_back(uint32(u));
    return array("u", std::move(items));
}

Value Value::bytes(const std::vector<uint8_t>& v) {
    std::vector<Value> items;
    for (uint8_t b : v) items.push_back(byte(b));
    return array("y", std::move(items));
}

int64_t Value::as_int() const {
    switch (code()) {
    case 'n': return static_cast<int16_t>(num_);
    case 'i': return static_cast<int32_t>(num_);
    default: return static_cast<int64_t>(num_);
    }
}

double Value::as_double() const { return std::bit_cast<double>(num_); }

const Value& Value::unwrapped() const {
    const Value* v = this;
    while (v->code() == 'v' && !v->items_.empty()) v = &v->items_[0];
    return *v;
}

// ---- Writer ----

void Writer::align(size_t n) {
    while (buf_.size() % n) buf_.push_back('\0');
}

void Writer::put_u16(uint16_t v) {
    align(2);
    for (int i = 0; i < 2; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
}

void Writer::put_u32(uint32_t v) {
    align(4);
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
}

void Writer::put_u64(uint64_t v) {
    align(8);
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>(v >> (8 * i)));
}

void Writer::put_text(const std::string& s, bool short_length) {
    if (short_length)
        put_u8(static_cast<uint8_t>(s.size()));
    else
        put_u32(static_cast<uint32_t>(s.size()));
    buf_ += s;
    buf_.push_back('\0');
}

void Writer::write(const Value& v) {
    switch (v.code()) {
    case 'y': put_u8(static_cast<uint8_t>(v.as_uint())); break;
    case 'b': put_u32(v.as_bool() ? 1 : 0); break;
    case 'n': case 'q': put_u16(static_cast<uint16_t>(v.as_uint())); break;
    case 'i': case 'u': case 'h': put_u32(static_cast<uint32_t>(v.as_uint())); break;
    case 'x': case 't': case 'd': put_u64(v.as_uint()); break;
    case 's': case 'o': put_text(v.as_string(), false); break;
    case 'g': put_text(v.as_string(), true); break;
    case 'a': {
        put_u32(0);
        size_t length_at = buf_.size() - 4;
        // The length counts the elements only, not the padding before the first.
        align(alignment_of(v.type()[1]));
        size_t start = buf_.size();
        for (const auto& item : v.items()) write(item);
        uint32_t length = static_cast<uint32_t>(buf_.size() - start);
        for (int i = 0; i < 4; ++i) buf_[length_at + i] = static_cast<char>(length >> (8 * i));
        break;
    }
    case '(': case '{':
        align(8);
        for (const auto& item : v.items()) write(item);
        break;
    case 'v':
        put_text(v.items().empty() ? std::string() : v.items()[0].type(), true);
        if (!v.items().empty()) write(v.items()[0]);
        break;
    default: break;
    }
}

// ---- Reader ----

Result<void> Reader::align(size_t n) {
    size_t to = (pos_ + n - 1) / n * n;
    if (to > buf_.size()) return malformed("truncated");
    for (size_t i = pos_; i < to; ++i)
        if (buf_[i] != '\0') return malformed("padding is not zero");
    pos_ = to;
    return {};
}

Result<uint8_t> Reader::get_u8() {
    if (pos_ + 1 > buf_.size()) return malformed("truncated");
    return static_cast<uint8_t>(buf_[pos_++]);
}

Result<uint16_t> Reader::get_u16() {
    FB_TRY(align(2));
    if (pos_ + 2 > buf_.size()) return malformed("truncated");
    auto b = [&](int i) { return static_cast<uint16_t>(static_cast<uint8_t>(buf_[pos_ + i])); };
    uint16_t v = big_endian_ ? (b(0) << 8 | b(1)) : (b(1) << 8 | b(0));
    pos_ += 2;
    return v;
}

Result<uint32_t> Reader::get_u32() {
    FB_TRY(align(4));
    if (pos_ + 4 > buf_.size()) return malformed("truncated");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v |= static_cast<uint32_t>(static_cast<uint8_t>(buf_[pos_ + i])) << (8 * (big_endian_ ? 3 - i : i));
    pos_ += 4;
    return v;
}

Result<uint64_t> Reader::get_u64() {
    FB_TRY(align(8));
    if (pos_ + 8 > buf_.size()) return malformed("truncated");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v |= static_cast<uint64_t>(static_cast<uint8_t>(buf_[pos_ + i])) << (8 * (big_endian_ ? 7 - i : i));
    pos_ += 8;
    return v;
}

Result<std::string> Reader::get_text(bool short_length) {
    size_t n;
    if (short_length) {
        FB_ASSIGN(uint8_t len, get_u8());
        n = len;
    } else {
        FB_ASSIGN(uint32_t len, get_u32());
        n = len;
    }
    if (n >= buf_.size() || pos_ + n + 1 > buf_.size()) return malformed("truncated string");
    std::string s(buf_.substr(pos_, n));
    if (buf_[pos_ + n] != '\0' || s.find('\0') != std::string::npos) return malformed("string is not terminated");
    pos_ += n + 1;
    return s;
}

Result<Value> Reader::read(std::string_view sig) {
    if (sig.empty() || complete_type_length(sig) != sig.size()) return malformed("bad signature " + std::string(sig));
    return read_at_depth(sig, 0);
}

Result<Value> Reader::read_at_depth(std::string_view sig, int depth) {
    // Variants may nest without arrays or structs: bound the recursion all the same.
    // `sig` is one complete type (a dict entry inside an array), checked by read().
    if (depth > 64) return malformed("nested too deeply");
    switch (sig[0]) {
    case 'y': {
        FB_ASSIGN(uint8_t v, get_u8());
        return Value::byte(v);
    }
    case 'b': {
        FB_ASSIGN(uint32_t v, get_u32());
        if (v > 1) return malformed("boolean is neither 0 nor 1");
        return Value::boolean(v != 0);
    }
    case 'n': {
        FB_ASSIGN(uint16_t v, get_u16());
        return Value::int16(static_cast<int16_t>(v));
    }
    case 'q': {
        FB_ASSIGN(uint16_t v, get_u16());
        return Value::uint16(v);
    }
    case 'i': {
        FB_ASSIGN(uint32_t v, get_u32());
        return Value::int32(static_cast<int32_t>(v));
    }
    case 'u': case 'h': {
        FB_ASSIGN(uint32_t v, get_u32());
        return Value::uint32(v);
    }
    case 'x': {
        FB_ASSIGN(uint64_t v, get_u64());
        return Value::int64(static_cast<int64_t>(v));
    }
    case 't': {
        FB_ASSIGN(uint64_t v, get_u64());
        return Value::uint64(v);
    }
    case 'd': {
        FB_ASSIGN(uint64_t v, get_u64());
        return Value::dbl(std::bit_cast<double>(v));
    }
    case 's': {
        FB_ASSIGN(std::string v, get_text(false));
        return Value::string(std::move(v));
    }
    case 'o': {
        FB_ASSIGN(std::string v, get_text(false));
        return Value::object_path(std::move(v));
    }
    case 'g': {
        FB_ASSIGN(std::string v, get_text(true));
        if (!valid_signature(v)) return malformed("bad signature value");
        return Value::signature(std::move(v));
    }
    case 'a': {
        FB_ASSIGN(uint32_t length, get_u32());
        if (length > (64u << 20)) return malformed("array longer than 64 MiB");
        std::string element = element_of(sig);
        FB_TRY(align(alignment_of(element[0])));
        size_t end = pos_ + length;
        if (end > buf_.size()) return malformed("truncated array");
        std::vector<Value> items;
        while (pos_ < end) {
            FB_ASSIGN(Value item, read_at_depth(element, depth + 1));
            items.push_back(std::move(item));
        }
        if (pos_ != end) return malformed("array length does not match its elements");
        return Value::array(std::move(element), std::move(items));
    }
    case '(': {
        FB_TRY(align(8));
        std::vector<Value> fields;
        size_t i = 1;
        while (sig[i] != ')') {
            size_t n = complete_type_length(sig.substr(i));
            FB_ASSIGN(Value f, read_at_depth(sig.substr(i, n), depth + 1));
            fields.push_back(std::move(f));
            i += n;
        }
        return Value::structure(std::move(fields));
    }
    case '{': {
        FB_TRY(align(8));
        size_t key_len = complete_type_length(sig.substr(1));
        FB_ASSIGN(Value key, read_at_depth(sig.substr(1, key_len), depth + 1));
        std::string_view rest = sig.substr(1 + key_len, sig.size() - key_len - 2);
        FB_ASSIGN(Value value, read_at_depth(rest, depth + 1));
        return Value::dict_entry(std::move(key), std::move(value));
    }
    case 'v': {
        FB_ASSIGN(std::string inner_sig, get_text(true));
        if (inner_sig.empty() || complete_type_length(inner_sig) != inner_sig.size())
            return malformed("variant signature is not one complete type");
        FB_ASSIGN(Value inner, read_at_depth(inner_sig, depth + 1));
        return Value::variant(std::move(inner));
    }
    default:
        return malformed("bad signature " + std::string(sig));
    }
}

// ---- Messages ----

namespace {
enum Field : uint8_t {
    kPath = 1, kInterface = 2, kMember = 3, kErrorName = 4, kReplySerial = 5,
    kDestination = 6, kSender = 7, kSignature = 8, kUnixFds = 9,
};
}  // namespace

std::string Message::signature() const {
    std::string s;
    for (const auto& v : body) s += v.type();
    return s;
}

Message Message::method_call(std::string destination, std::string path, std::string interface,
                             std::string member, std::vector<Value> body) {
    Message m;
    m.type = MessageType::MethodCall;
    m.destination = std::move(destination);
    m.path = std::move(path);
    m.interface = std::move(interface);
    m.member = std::move(member);
    m.body = std::move(body);
    return m;
}

std::string encode_message(const Message& m) {
    std::vector<Value> fields;
    auto field = [&](Field code, Value v) {
        fields.push_back(Value::structure({Value::byte(code), Value::variant(std::move(v))}));
    };
    if (!m.path.empty()) field(kPath, Value::object_path(m.path));
    if (!m.interface.empty()) field(kInterface, Value::string(m.interface));
    if (!m.member.empty()) field(kMember, Value::string(m.member));
    if (!m.error_name.empty()) field(kErrorName, Value::string(m.error_name));
    if (m.reply_serial) field(kReplySerial, Value::uint32(m.reply_serial));
    if (!m.destination.empty()) field(kDestination, Value::string(m.destination));
    if (!m.sender.empty()) field(kSender, Value::string(m.sender));
    std::string sig = m.signature();
    if (!sig.empty()) field(kSignature, Value::signature(sig));

    Writer w;
    w.put_u8('l');
    w.put_u8(static_cast<uint8_t>(m.type));
    w.put_u8(m.flags);
    w.put_u8(1);  // protocol version
    w.put_u32(0);  // body length, patched below
    w.put_u32(m.serial);
    w.write(Value::array("(yv)", std::move(fields)));
    w.align(8);
    size_t body_start = w.bytes().size();
    for (const auto& v : m.body) w.write(v);
    std::string out = w.take();
    uint32_t body_length = static_cast<uint32_t>(out.size() - body_start);
    for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>(body_length >> (8 * i));
    return out;
}

Result<size_t> message_length(std::string_view head) {
    if (head.size() < 16) return malformed("truncated header");
    if (head[0] != 'l' && head[0] != 'B') return malformed("unknown byte order");
    if (head[3] != 1) return malformed("unknown protocol version");
    Reader r(head, head[0] == 'B', 4);
    FB_ASSIGN(uint32_t body, r.get_u32());
    FB_ASSIGN(uint32_t serial, r.get_u32());
    FB_ASSIGN(uint32_t fields, r.get_u32());
    (void)serial;
    if (fields > kMaxMessageSize || body > kMaxMessageSize) return malformed("too large");
    size_t header = (16 + static_cast<size_t>(fields) + 7) / 8 * 8;
    size_t total = header + body;
    if (total > kMaxMessageSize) return malformed("too large");
    return total;
}

Result<Message> decode_message(std::string_view bytes) {
    FB_ASSIGN(size_t total, message_length(bytes));
    if (bytes.size() != total) return malformed("length does not match its header");
    bool big = bytes[0] == 'B';
    Reader r(bytes, big, 1);
    Message m;
    FB_ASSIGN(uint8_t type, r.get_u8());
    FB_ASSIGN(m.flags, r.get_u8());
    FB_ASSIGN(uint8_t version, r.get_u8());
    (void)version;
    FB_ASSIGN(uint32_t body_length, r.get_u32());
    FB_ASSIGN(m.serial, r.get_u32());
    if (type < 1 || type > 4) return malformed("unknown message type");
    m.type = static_cast<MessageType>(type);
    if (m.serial == 0) return malformed("serial 0");
    FB_ASSIGN(Value fields, r.read("a(yv)"));
    std::string sig;
    for (const auto& f : fields.items()) {
        const Value& v = f.items()[1].unwrapped();
        auto want = [&](char code) -> Result<void> {
            if (v.code() != code) return malformed("header field " + std::to_string(f.items()[0].as_uint()) + " has type " + v.type());
            return {};
        };
        switch (f.items()[0].as_uint()) {
        case kPath: FB_TRY(want('o')); m.path = v.as_string(); break;
        case kInterface: FB_TRY(want('s')); m.interface = v.as_string(); break;
        case kMember: FB_TRY(want('s')); m.member = v.as_string(); break;
        case kErrorName: FB_TRY(want('s')); m.error_name = v.as_string(); break;
        case kReplySerial: FB_TRY(want('u')); m.reply_serial = static_cast<uint32_t>(v.as_uint()); break;
        case kDestination: FB_TRY(want('s')); m.destination = v.as_string(); break;
        case kSender: FB_TRY(want('s')); m.sender = v.as_string(); break;
        case kSignature: FB_TRY(want('g')); sig = v.as_string(); break;
        case kUnixFds: return malformed("unix fds were not negotiated");
        default: break;  // unknown fields are ignored, as the specification says
        }
    }
    FB_TRY(r.align(8));
    if (r.position() + body_length != bytes.size()) return malformed("body length does not match");
    switch (m.type) {
    case MessageType::MethodCall:
        if (m.path.empty() || m.member.empty()) return malformed("method call without path or member");
        break;
    case MessageType::Signal:
        if (m.path.empty() || m.member.empty() || m.interface.empty()) return malformed("signal without path, interface or member");
        break;
    case MessageType::Error:
        if (m.error_name.empty()) return malformed("error without a name");
        [[fallthrough]];
    case MessageType::MethodReturn:
        if (m.reply_serial == 0) return malformed("reply without a reply serial");
        break;
    default: break;
    }
    size_t i = 0;
    while (i < sig.size()) {
        size_t n = complete_type_length(std::string_view(sig).substr(i));
        FB_ASSIGN(Value v, r.read(std::string_view(sig).substr(i, n)));
        m.body.push_back(std::move(v));
        i += n;
    }
    if (r.position() != bytes.size()) return malformed("body longer than its signature");
    return m;
}

}  // namespace forkbox::dbus
