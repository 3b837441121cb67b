// The D-Bus wire format, byte for byte (the expected bytes are worked out from the
// specification in the comments), and the client's side of a conversation over a socketpair.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>

#include "libforkbox/dbus/connection.hpp"
#include "libforkbox/dbus/message.hpp"
#include "libforkbox/dbus/variant_text.hpp"

using namespace forkbox;
using namespace forkbox::dbus;

namespace {

std::string bytes(std::initializer_list<int> b) {
    std::string s;
    for (int c : b) s.push_back(static_cast<char>(c));
    return s;
}
std::string u32le(uint32_t v) { return bytes({int(v & 0xff), int(v >> 8 & 0xff), int(v >> 16 & 0xff), int(v >> 24)}); }
std::string str(const std::string& s) { return u32le(static_cast<uint32_t>(s.size())) + s + std::string(1, '\0'); }
std::string pad(size_t n) { return std::string(n, '\0'); }

std::string encode(const Value& v) {
    Writer w;
    w.write(v);
    return w.take();
}

}  // namespace

TEST(DbusSignature, CompleteTypesAndTheirLengths) {
    EXPECT_EQ(complete_type_length("s"), 1u);
    EXPECT_EQ(complete_type_length("a(sv)"), 5u);
    EXPECT_EQ(complete_type_length("a{sv}s"), 5u);
    EXPECT_EQ(complete_type_length("a(sa(sv))"), 9u);
    EXPECT_EQ(complete_type_length("(uoss)"), 6u);
    EXPECT_EQ(complete_type_length("{sv}"), 0u);  // a dict entry only inside an array
    EXPECT_EQ(complete_type_length("()"), 0u);
    EXPECT_EQ(complete_type_length("(s"), 0u);
    EXPECT_EQ(complete_type_length("a"), 0u);
    EXPECT_EQ(complete_type_length("a{vs}"), 0u);  // keys are basic
    EXPECT_TRUE(valid_signature("ssa(sv)a(sa(sv))"));
    EXPECT_FALSE(valid_signature("ss)"));
    EXPECT_EQ(complete_type_length(std::string(33, 'a') + "s"), 0u);  // 33 nested arrays
    EXPECT_EQ(complete_type_length(std::string(32, 'a') + "s"), 33u);
}

TEST(DbusWriter, AlignsEachTypeFromTheBufferStart) {
    // y at 0, then u at 4 (3 bytes of padding), then t at 8.
    Writer w;
    w.write(Value::byte(7));
    w.write(Value::uint32(0x01020304));
    w.write(Value::uint64(1));
    EXPECT_EQ(w.bytes(), bytes({7, 0, 0, 0, 4, 3, 2, 1}) + bytes({1, 0, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(encode(Value::boolean(true)), u32le(1));
    EXPECT_EQ(encode(Value::int16(-2)), bytes({0xfe, 0xff}));
    EXPECT_EQ(encode(Value::signature("a(sv)")), bytes({5}) + "a(sv)" + pad(1));
}

TEST(DbusWriter, ArrayLengthCountsElementsNotThePaddingBeforeThem) {
    // a(sv) [("Delegate", <true>)]: the length (u32 at 0), padding to 8, then the struct:
    // "Delegate" (4 + 8 + NUL = 13 bytes, to 21), the variant's signature "b" (3, to 24), the
    // boolean (4, to 28): 20 bytes of elements.
    Value props = Value::array("(sv)", {Value::structure({Value::string("Delegate"), Value::variant(Value::boolean(true))})});
    EXPECT_EQ(encode(props), u32le(20) + pad(4) + str("Delegate") + bytes({1, 'b', 0}) + u32le(1));
    // An empty array of structs still pads to where its first element would be.
    EXPECT_EQ(encode(Value::array("(sv)", {})), u32le(0) + pad(4));
    EXPECT_EQ(encode(Value::uint32s({7, 8})), u32le(8) + u32le(7) + u32le(8));
    EXPECT_EQ(encode(Value::bytes({1, 2, 3})), u32le(3) + bytes({1, 2, 3}));
}

TEST(DbusWriter, StartTransientUnitBody) {
    // ssa(sv)a(sa(sv)): "a.scope" (to 12), "fail" (to 21), the properties' length at 24,
    // their elements from 32 to 52, the auxiliary units' empty array's length at 52 (its
    // elements would start at 56, 8-aligned already).
    Writer w;
    w.write(Value::string("a.scope"));
    w.write(Value::string("fail"));
    w.write(Value::array("(sv)", {Value::structure({Value::string("Delegate"), Value::variant(Value::boolean(true))})}));
    w.write(Value::array("(sa(sv))", {}));
    std::string want = str("a.scope") + str("fail") + pad(3) + u32le(20) + pad(4) + str("Delegate") + bytes({1, 'b', 0}) +
                       u32le(1) + u32le(0);
    EXPECT_EQ(w.bytes(), want);
    EXPECT_EQ(w.bytes().size(), 56u);
}

TEST(DbusMessage, HelloCallByteForByte) {
    // Fixed header, then a(yv) from 16: PATH (1, o) to 46, INTERFACE (2, s) at 48 to 77,
    // MEMBER (3, s) at 80 to 94, DESTINATION (6, s) at 96 to 125: 109 bytes of fields, the
    // header padded to 128, no body.
    Message m = Message::method_call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello");
    m.serial = 1;
    std::string want = bytes({'l', 1, 0, 1}) + u32le(0) + u32le(1) + u32le(109) +
                       bytes({1, 1, 'o', 0}) + str("/org/freedesktop/DBus") + pad(2) +
                       bytes({2, 1, 's', 0}) + str("org.freedesktop.DBus") + pad(3) +
                       bytes({3, 1, 's', 0}) + str("Hello") + pad(2) +
                       bytes({6, 1, 's', 0}) + str("org.freedesktop.DBus") + pad(3);
    EXPECT_EQ(encode_message(m), want);
    EXPECT_EQ(want.size(), 128u);
}

TEST(DbusMessage, BodyAndSignatureFieldRoundTrip) {
    Message m = Message::method_call("org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                     "org.freedesktop.systemd1.Manager", "StartTransientUnit",
                                     {Value::string("x.scope"), Value::string("replace"),
                                      Value::array("(sv)", {Value::structure({Value::string("PIDs"),
                                                                              Value::variant(Value::uint32s({42}))})}),
                                      Value::array("(sa(sv))", {})});
    m.serial = 7;
    std::string wire = encode_message(m);
    auto length = message_length(wire.substr(0, 16));
    ASSERT_TRUE(length) << length.error().what();
    EXPECT_EQ(*length, wire.size());
    auto back = decode_message(wire);
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(back->signature(), "ssa(sv)a(sa(sv))");
    EXPECT_EQ(back->member, "StartTransientUnit");
    EXPECT_EQ(back->destination, "org.freedesktop.systemd1");
    EXPECT_EQ(back->serial, 7u);
    ASSERT_EQ(back->body.size(), 4u);
    EXPECT_EQ(back->body, m.body);
    EXPECT_EQ(back->body[2].items()[0].items()[1].unwrapped().items()[0].as_uint(), 42u);
}

TEST(DbusMessage, DecodesABigEndianSignal) {
    // JobRemoved(u 5, o "/j/5", s "x.scope", s "done") as a big-endian peer would send it,
    // laid out by hand: each value aligned from the message's start.
    std::string w;
    auto align = [&](size_t n) { w.resize((w.size() + n - 1) / n * n, '\0'); };
    auto be32 = [&](uint32_t v) {
        align(4);
        w += bytes({int(v >> 24), int(v >> 16 & 0xff), int(v >> 8 & 0xff), int(v & 0xff)});
    };
    auto text = [&](const std::string& s) {
        be32(static_cast<uint32_t>(s.size()));
        w += s;
        w.push_back('\0');
    };
    auto field = [&](int code, char type, const std::string& value) {
        align(8);
        w += bytes({code, 1, type, 0});
        if (type == 'g') {
            w.push_back(static_cast<char>(value.size()));
            w += value;
            w.push_back('\0');
        } else {
            text(value);
        }
    };
    w = bytes({'B', 4, 0, 1});
    be32(0);  // body length, patched
    be32(9);
    be32(0);  // fields length, patched
    field(1, 'o', "/org/freedesktop/systemd1");
    field(2, 's', "org.freedesktop.systemd1.Manager");
    field(3, 's', "JobRemoved");
    field(8, 'g', "uoss");
    uint32_t fields_length = static_cast<uint32_t>(w.size() - 16);
    align(8);
    size_t body_start = w.size();
    be32(5);
    text("/j/5");
    text("x.scope");
    text("done");
    uint32_t body_length = static_cast<uint32_t>(w.size() - body_start);
    for (int i = 0; i < 4; ++i) {
        w[4 + i] = static_cast<char>(body_length >> (8 * (3 - i)));
        w[12 + i] = static_cast<char>(fields_length >> (8 * (3 - i)));
    }
    auto m = decode_message(w);
    ASSERT_TRUE(m) << m.error().what();
    EXPECT_EQ(m->type, MessageType::Signal);
    EXPECT_EQ(m->member, "JobRemoved");
    EXPECT_EQ(m->serial, 9u);
    ASSERT_EQ(m->body.size(), 4u);
    EXPECT_EQ(m->body[0].as_uint(), 5u);
    EXPECT_EQ(m->body[1].as_string(), "/j/5");
    EXPECT_EQ(m->body[3].as_string(), "done");
}

TEST(DbusMessage, RefusesMalformedInput) {
    Message m = Message::method_call("", "/p", "i.f", "M", {Value::boolean(true)});
    m.serial = 1;
    std::string wire = encode_message(m);
    EXPECT_FALSE(decode_message(wire.substr(0, wire.size() - 1)));  // truncated
    std::string bad_bool = wire;
    bad_bool[bad_bool.size() - 4] = 2;  // a boolean must be 0 or 1
    EXPECT_FALSE(decode_message(bad_bool));
    std::string bad_order = wire;
    bad_order[0] = 'x';
    EXPECT_FALSE(message_length(bad_order.substr(0, 16)));
    std::string huge = wire.substr(0, 16);
    huge[7] = 0x7f;  // a body of ~2 GiB
    EXPECT_FALSE(message_length(huge));
    std::string nonzero_padding = bytes({1, 9, 0, 0, 5, 0, 0, 0});
    Reader r(nonzero_padding, false);
    ASSERT_TRUE(r.get_u8());
    EXPECT_FALSE(r.get_u32());
}

TEST(DbusMessage, DictionariesAndNestedVariants) {
    Value dict = Value::array("{sv}", {Value::dict_entry(Value::string("Version"), Value::variant(Value::string("252")))});
    EXPECT_EQ(dict.type(), "a{sv}");
    std::string wire = encode(dict);
    Reader r(wire, false);
    auto back = r.read("a{sv}");
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, dict);
    Value nested = Value::variant(Value::variant(Value::int32(-5)));
    std::string nested_wire = encode(nested);
    Reader r2(nested_wire, false);
    auto v = r2.read("v");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->unwrapped().as_int(), -5);
}

TEST(DbusSasl, ExternalWithTheUidInHexDigits) {
    EXPECT_EQ(sasl_external_preamble(0), std::string(1, '\0') + "AUTH EXTERNAL 30\r\nBEGIN\r\n");
    EXPECT_EQ(sasl_external_preamble(1000), std::string(1, '\0') + "AUTH EXTERNAL 31303030\r\nBEGIN\r\n");
}

TEST(DbusErrors, ReplyErrorsCarryNameTextAndAnErrno) {
    Message e;
    e.type = MessageType::Error;
    e.error_name = "org.freedesktop.systemd1.UnitExists";
    e.body = {Value::string("Unit x.scope already exists.")};
    Error err = reply_error(e);
    EXPECT_EQ(err.errnum(), EEXIST);
    EXPECT_EQ(err.what(), "Unit x.scope already exists. (org.freedesktop.systemd1.UnitExists)");
    e.error_name = "org.example.Odd";
    EXPECT_EQ(reply_error(e).errnum(), EIO);
}

TEST(DbusConnection, AuthenticatesFirstThenSendsHelloAndCallsTogetherAndMatchesTheReply) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    unique_fd server(sv[1]);
    Connection c = Connection::adopt(unique_fd(sv[0]), true);
    uint32_t serial = c.queue(Message::method_call("d", "/p", "i.f", "Ping"));
    EXPECT_EQ(serial, 2u);  // Hello is 1
    // Until the server says OK, only the authentication goes out: sd-bus would leave a
    // message that came with BEGIN unread.
    auto early = c.reply(serial, Clock::now() + std::chrono::milliseconds(20));
    ASSERT_FALSE(early);
    EXPECT_EQ(early.error().errnum(), ETIMEDOUT);
    char buf[4096];
    ssize_t n = ::recv(server.get(), buf, sizeof buf, MSG_DONTWAIT);
    ASSERT_GT(n, 0);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), sasl_external_preamble(::geteuid()));
    // The server's side, written ahead: OK, Hello's reply, a signal, then the reply.
    auto reply_to = [](uint32_t s, uint32_t own) {
        Message r;
        r.type = MessageType::MethodReturn;
        r.reply_serial = s;
        r.serial = own;
        r.body = {Value::string("pong")};
        return encode_message(r);
    };
    Message sig;
    sig.type = MessageType::Signal;
    sig.serial = 3;
    sig.path = "/org/freedesktop/systemd1";
    sig.interface = "org.freedesktop.systemd1.Manager";
    sig.member = "JobRemoved";
    sig.body = {Value::uint32(1), Value::object_path("/j/1"), Value::string("x.scope"), Value::string("done")};
    std::string answers = "OK 0123456789abcdef\r\n" + reply_to(1, 1) + encode_message(sig) + reply_to(2, 4);
    ASSERT_EQ(::write(server.get(), answers.data(), answers.size()), static_cast<ssize_t>(answers.size()));
    auto deadline = Clock::now() + std::chrono::seconds(5);
    auto r = c.reply(serial, deadline);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->body[0].as_string(), "pong");
    // The signal that came before the reply was kept.
    auto s = c.wait_signal([](const Message& m) { return m.member == "JobRemoved"; }, deadline);
    ASSERT_TRUE(s) << s.error().what();
    EXPECT_EQ(s->body[3].as_string(), "done");
    // After OK, Hello and the call in one write.
    n = ::recv(server.get(), buf, sizeof buf, MSG_DONTWAIT);
    ASSERT_GT(n, 0);
    std::string sent(buf, static_cast<size_t>(n));
    auto hello = decode_message(sent.substr(0, 128));
    ASSERT_TRUE(hello) << hello.error().what();
    EXPECT_EQ(hello->member, "Hello");
    auto ping = decode_message(sent.substr(128));
    ASSERT_TRUE(ping) << ping.error().what();
    EXPECT_EQ(ping->member, "Ping");
    // Nothing arrives in time: ETIMEDOUT.
    auto none = c.wait_signal([](const Message&) { return true; }, Clock::now() + std::chrono::milliseconds(20));
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().errnum(), ETIMEDOUT);
}

TEST(DbusConnection, ARejectedAuthenticationAndAnErrorReply) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    unique_fd server(sv[1]);
    Connection c = Connection::adopt(unique_fd(sv[0]), false);
    std::string no = "REJECTED EXTERNAL\r\n";
    ASSERT_EQ(::write(server.get(), no.data(), no.size()), static_cast<ssize_t>(no.size()));
    auto r = c.call(Message::method_call("", "/p", "i.f", "M"), Clock::now() + std::chrono::seconds(5));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().errnum(), EACCES);

    int sv2[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), 0);
    unique_fd server2(sv2[1]);
    Connection c2 = Connection::adopt(unique_fd(sv2[0]), false);
    Message e;
    e.type = MessageType::Error;
    e.serial = 1;
    e.reply_serial = 1;  // no Hello on a peer connection: the call is serial 1
    e.error_name = "org.freedesktop.systemd1.NoSuchUnit";
    e.body = {Value::string("Unit x.scope not loaded.")};
    std::string answers = "OK 00\r\n" + encode_message(e);
    ASSERT_EQ(::write(server2.get(), answers.data(), answers.size()), static_cast<ssize_t>(answers.size()));
    auto r2 = c2.call(Message::method_call("", "/p", "i.f", "M"), Clock::now() + std::chrono::seconds(5));
    ASSERT_FALSE(r2);
    EXPECT_EQ(r2.error().errnum(), ENOENT);
    EXPECT_EQ(r2.error().what(), "Unit x.scope not loaded. (org.freedesktop.systemd1.NoSuchUnit)");
}

TEST(VariantText, LiteralsKeywordsAndAnnotations) {
    auto t = [](const char* text) {
        auto v = parse_variant_text(text);
        EXPECT_TRUE(v) << text << ": " << (v ? "" : v.error().what());
        return v ? *v : Value();
    };
    EXPECT_EQ(t("true"), Value::boolean(true));
    EXPECT_EQ(t("42"), Value::int32(42));
    EXPECT_EQ(t("-7"), Value::int32(-7));
    EXPECT_EQ(t("1.5"), Value::dbl(1.5));
    EXPECT_EQ(t("uint64 123456789"), Value::uint64(123456789));
    EXPECT_EQ(t("@t 5"), Value::uint64(5));
    EXPECT_EQ(t("byte 0x10"), Value::byte(16));
}

TEST(VariantText, StringsArraysAndTuples) {
    auto ok = [](const char* text) { return parse_variant_text(text); };
    EXPECT_EQ(*ok("'a b'"), Value::string("a b"));
    EXPECT_EQ(*ok(R"("it\"s")"), Value::string("it\"s"));
    EXPECT_EQ(*ok("['a', 'b']"), Value::strings({"a", "b"}));
    EXPECT_EQ(*ok("@as []"), Value::strings({}));
    EXPECT_EQ(*ok("[uint32 1, 2]"), Value::uint32s({1, 2}));
    EXPECT_EQ(*ok("('/dev/null', 'rwm')"), Value::structure({Value::string("/dev/null"), Value::string("rwm")}));
    EXPECT_EQ(*ok("@a(ss) [('/dev/null', 'rw')]"),
              Value::array("(ss)", {Value::structure({Value::string("/dev/null"), Value::string("rw")})}));
    EXPECT_EQ(*ok("objectpath '/a'"), Value::object_path("/a"));
    EXPECT_FALSE(ok("[]"));          // an empty array needs its type
    EXPECT_FALSE(ok("[1, 'a']"));    // mixed types
    EXPECT_FALSE(ok("uint32 -1"));
    EXPECT_FALSE(ok("byte 256"));
    EXPECT_FALSE(ok("'open"));
    EXPECT_FALSE(ok("1 2"));
    EXPECT_FALSE(ok("bogus"));
}

TEST(DbusAddress, TheSessionBusFromTheEnvironmentElseTheRuntimeDirectory) {
    ::unsetenv("DBUS_SESSION_BUS_ADDRESS");
    EXPECT_EQ(session_bus_path("/run/user/1000").value(), "/run/user/1000/bus");
    ::setenv("DBUS_SESSION_BUS_ADDRESS", "tcp:host=x;unix:guid=1,path=/run/user/1000/my%20bus", 1);
    EXPECT_EQ(session_bus_path("/run/user/1000").value(), "/run/user/1000/my bus");
    ::setenv("DBUS_SESSION_BUS_ADDRESS", "unix:abstract=/tmp/dbus-x", 1);
    EXPECT_FALSE(session_bus_path("/run/user/1000"));
    ::unsetenv("DBUS_SESSION_BUS_ADDRESS");
}
