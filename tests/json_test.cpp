#include "libforkbox/base/json.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

using forkbox::json::Document;
using forkbox::json::Value;
using forkbox::json::Writer;

namespace {

Document parse(const std::string& text) {
    auto d = Document::parse(text);
    EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().what());
    return std::move(*d);
}

}  // namespace

TEST(JsonDocument, InvalidJsonIsAnError) {
    auto d = Document::parse("{\"a\": ");
    ASSERT_FALSE(d);
    EXPECT_TRUE(d.error().context().starts_with("invalid JSON")) << d.error().context();
}

TEST(JsonValue, MemberPathsJoinWithDots) {
    Document d = parse(R"({"process": {"user": {"uid": 1}}})");
    auto uid = d.root().get("process")->get("user")->get("uid");
    ASSERT_TRUE(uid);
    EXPECT_EQ(uid->path(), "process.user.uid");
}

TEST(JsonValue, ArrayElementPathsUseBrackets) {
    Document d = parse(R"({"mounts": [{}, {"destination": 3}]})");
    auto dest = d.root().get("mounts")->at(1).get("destination");
    ASSERT_TRUE(dest);
    EXPECT_EQ(dest->path(), "mounts[1].destination");
}

TEST(JsonValue, NullMemberCountsAsAbsent) {
    Document d = parse(R"({"a": null, "b": 1})");
    EXPECT_FALSE(d.root().get("a"));
    EXPECT_FALSE(d.root().get("missing"));
    EXPECT_TRUE(d.root().get("b"));
}

TEST(JsonValue, TypeErrorNamesThePath) {
    Document d = parse(R"({"process": {"cwd": 5}})");
    auto r = d.root().get("process")->get("cwd")->as_string();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context(), "process.cwd: expected string");
}

TEST(JsonValue, RootErrorsSayRoot) {
    Document d = parse("[1]");
    auto r = d.root().expect_object();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context(), "(root): expected object");
}

TEST(JsonValue, Uint64AboveInt64MaxIsExact) {
    Document d = parse(R"({"v": 18446744073709551615})");
    auto v = d.root().get("v")->as_uint64();
    ASSERT_TRUE(v);
    EXPECT_EQ(*v, UINT64_MAX);
}

TEST(JsonValue, Uint64RejectsNegative) {
    Document d = parse(R"({"v": -1})");
    EXPECT_FALSE(d.root().get("v")->as_uint64());
}

TEST(JsonValue, Int64AcceptsMinusOne) {
    Document d = parse(R"({"v": -1})");
    auto v = d.root().get("v")->as_int64();
    ASSERT_TRUE(v);
    EXPECT_EQ(*v, -1);
}

TEST(JsonValue, Int64RejectsFractions) {
    Document d = parse(R"({"v": 1.5})");
    EXPECT_FALSE(d.root().get("v")->as_int64());
}

TEST(JsonValue, ForEachMemberVisitsInOrder) {
    Document d = parse(R"({"b": "1", "a": "2"})");
    std::string keys;
    auto r = d.root().for_each_member([&](std::string_view k, const Value&) -> forkbox::Result<void> {
        keys += k;
        return {};
    });
    ASSERT_TRUE(r);
    EXPECT_EQ(keys, "ba");
}

TEST(JsonWriter, CompactOutput) {
    Writer w;
    w.begin_object().key("a").value(1).key("b").begin_array().value("x").value(true).end_array();
    w.key("c").null().end_object();
    EXPECT_EQ(w.str(), R"({"a":1,"b":["x",true],"c":null})");
}

TEST(JsonWriter, EscapesControlCharactersAndQuotes) {
    Writer w;
    w.value(std::string_view("a\"b\\c\n\x01"));
    EXPECT_EQ(w.str(), "\"a\\\"b\\\\c\\n\\u0001\"");
}

TEST(JsonWriter, PrettyOutputParsesBack) {
    Writer w(true);
    w.begin_object().key("n").value(uint64_t{UINT64_MAX}).key("e").begin_array().end_array();
    w.key("o").begin_object().end_object().end_object();
    Document d = parse(w.str());
    EXPECT_EQ(*d.root().get("n")->as_uint64(), UINT64_MAX);
    EXPECT_EQ(d.root().get("e")->size(), 0u);
    EXPECT_NE(w.str().find('\n'), std::string::npos);
}

TEST(JsonWriter, IntegerOverloadsAgree) {
    Writer w;
    w.begin_array().value(-1).value(2u).value(3L).value(4UL).value(5LL).value(6ULL).end_array();
    EXPECT_EQ(w.str(), "[-1,2,3,4,5,6]");
}

// ---- the compact tree: shapes, numbers, paths built on demand ----

TEST(JsonDocument, TruncatedInputSaysPrematureEof) {
    auto d = Document::parse(R"({"a": [1, 2)");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: parse error: premature EOF");
}

TEST(JsonDocument, EmptyInputIsAnError) {
    auto d = Document::parse("");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: parse error: premature EOF");
}

// Found by tests/fuzz/sandbox_request.cpp ("sandbox/1 run" with no body): a default
// string_view has no data pointer, and memchr(nullptr, ...) is undefined behaviour (UBSan
// reports it under make check-asan).
TEST(JsonDocument, EmptyViewWithoutDataIsAnError) {
    auto d = Document::parse(std::string_view{});
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: parse error: premature EOF");
}

TEST(JsonDocument, InvalidUtf8IsAnError) {
    auto d = Document::parse("{\"a\": \"\xff\"}");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: lexical error: invalid bytes in UTF8 string.");
}

TEST(JsonDocument, BadCharacterIsALexicalError) {
    auto d = Document::parse(R"({"a": x})");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: lexical error: invalid char in json text.");
}

TEST(JsonDocument, TrailingGarbageIsAnError) {
    auto d = Document::parse("{} {}");
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().context(), "invalid JSON: parse error: trailing garbage");
}

TEST(JsonDocument, CommentsAreAllowedAsYajlTreeDid) {
    Document d = parse("/* c */ {\"a\": 1} // d\n");
    EXPECT_EQ(*d.root().get("a")->as_int64(), 1);
}

TEST(JsonDocument, InputEndsAtTheFirstNulAsBefore) {
    Document d = parse(std::string("{\"a\": 1}\0garbage", 16));
    EXPECT_EQ(*d.root().get("a")->as_int64(), 1);
}

TEST(JsonDocument, DeepNestingNeedsNoStack) {
    const size_t depth = 100000;
    std::string text(depth, '[');
    text += "\"x\"";
    text.append(depth, ']');
    Document d = parse(text);
    Value v = d.root();
    for (size_t i = 0; i < depth; ++i) {
        ASSERT_EQ(v.size(), 1u) << i;
        v = v.at(0);
    }
    EXPECT_EQ(*v.as_string(), "x");
    std::string path;
    for (size_t i = 0; i < depth; ++i) path += "[0]";
    EXPECT_EQ(v.path(), path);
}

TEST(JsonDocument, BigArrayKeepsOrder) {
    const size_t n = 100000;
    std::string text = "[";
    for (size_t i = 0; i < n; ++i) text += (i ? "," : "") + std::to_string(i);
    text += "]";
    Document d = parse(text);
    ASSERT_EQ(d.root().size(), n);
    for (size_t i = 0; i < n; i += 997) EXPECT_EQ(*d.root().at(i).as_uint64(), i);
    EXPECT_EQ(*d.root().at(n - 1).as_uint64(), n - 1);
    EXPECT_EQ(d.root().at(n - 1).path(), "[99999]");
}

TEST(JsonDocument, ValuesSurviveMovingTheDocument) {
    Document d = parse(R"({"a": ["b"]})");
    Value b = d.root().get("a")->at(0);
    Document moved = std::move(d);
    EXPECT_EQ(*b.as_string(), "b");
    EXPECT_EQ(b.path(), "a[0]");
}

TEST(JsonValue, EscapesAreDecoded) {
    Document d = parse(R"({"k\"ey": "a\nb\u00e9\ud83d\ude00"})");
    auto v = d.root().get("k\"ey");
    ASSERT_TRUE(v);
    EXPECT_EQ(*v->as_string(), "a\nb\xc3\xa9\xf0\x9f\x98\x80");
    EXPECT_EQ(v->path(), "k\"ey");
}

TEST(JsonValue, StringsKeepEmbeddedNul) {
    Document d = parse(R"({"a": "x\u0000y"})");
    EXPECT_EQ(*d.root().get("a")->as_string(), std::string("x\0y", 3));
}

TEST(JsonValue, DuplicateKeysGetFindsTheFirst) {
    Document d = parse(R"({"a": 1, "b": 2, "a": 3})");
    EXPECT_EQ(*d.root().get("a")->as_int64(), 1);
}

TEST(JsonValue, DuplicateKeysForEachMemberSeesAll) {
    Document d = parse(R"({"a": 1, "b": 2, "a": 3})");
    std::string seen;
    auto r = d.root().for_each_member([&](std::string_view k, const Value& v) -> forkbox::Result<void> {
        seen += std::string(k) + "=" + std::to_string(*v.as_int64()) + " " + v.path() + ";";
        return {};
    });
    ASSERT_TRUE(r);
    EXPECT_EQ(seen, "a=1 a;b=2 b;a=3 a;");
}

TEST(JsonValue, DuplicateKeyNullFirstCountsAsAbsent) {
    Document d = parse(R"({"a": null, "a": 1})");
    EXPECT_FALSE(d.root().get("a"));
}

TEST(JsonValue, ForEachMemberStopsAtTheFirstError) {
    Document d = parse(R"({"a": 1, "b": "x", "c": 2})");
    int calls = 0;
    auto r = d.root().for_each_member([&](std::string_view, const Value& v) -> forkbox::Result<void> {
        ++calls;
        FB_TRY(v.as_int64());
        return {};
    });
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context(), "b: expected integer");
    EXPECT_EQ(calls, 2);
}

TEST(JsonValue, LazyPathNamesDeepArrayElements) {
    std::string names;
    for (int i = 0; i < 12; ++i) names += "\"n" + std::to_string(i) + "\",";
    names += "7";
    Document d = parse(R"({"linux": {"seccomp": {"syscalls": [{}, {}, {}, {"names": [)" + names + "]}]}}}");
    auto r = d.root().get("linux")->get("seccomp")->get("syscalls")->at(3).get("names")->at(12).as_string();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().context(), "linux.seccomp.syscalls[3].names[12]: expected string");
}

TEST(JsonValue, PathOfARootArrayElement) {
    Document d = parse(R"([{"a": [0, {"b": 1}]}])");
    EXPECT_EQ(d.root().at(0).get("a")->at(1).get("b")->path(), "[0].a[1].b");
}

TEST(JsonValue, PathWithAnEmptyKeyAtTheRootJoinsAsChildPathDid) {
    Document d = parse(R"({"": {"a": 1}})");
    EXPECT_EQ(d.root().get("")->get("a")->path(), "a");
    EXPECT_EQ(forkbox::json::child_path(forkbox::json::child_path("", ""), "a"), "a");
}

TEST(JsonValue, Uint64JustAboveInt64MaxIsExact) {
    Document d = parse(R"({"v": 9223372036854775808})");
    EXPECT_EQ(*d.root().get("v")->as_uint64(), uint64_t{9223372036854775808u});
    EXPECT_FALSE(d.root().get("v")->as_int64());
}

TEST(JsonValue, Uint64AboveUint64MaxIsOutOfRange) {
    Document d = parse(R"({"v": 18446744073709551616})");
    auto v = d.root().get("v")->as_uint64();
    ASSERT_FALSE(v);
    EXPECT_EQ(v.error().context(), "v: integer out of range");
}

TEST(JsonValue, Int64Limits) {
    Document d = parse(R"([9223372036854775807, -9223372036854775807, -0])");
    EXPECT_EQ(*d.root().at(0).as_int64(), INT64_MAX);
    EXPECT_EQ(*d.root().at(1).as_int64(), -INT64_MAX);
    EXPECT_EQ(*d.root().at(2).as_int64(), 0);
    EXPECT_EQ(*d.root().at(2).as_uint64(), 0u);
}

TEST(JsonValue, ExponentIsANumberButNotAnInteger) {
    Document d = parse(R"([1e3, 2.5])");
    EXPECT_EQ(*d.root().at(0).as_double(), 1000.0);
    EXPECT_EQ(*d.root().at(1).as_double(), 2.5);
    EXPECT_FALSE(d.root().at(0).as_int64());
    EXPECT_FALSE(d.root().at(0).as_uint64());
}

TEST(JsonValue, ScalarsAndTheirTypeErrors) {
    Document d = parse(R"({"t": true, "f": false, "s": "x", "n": 1})");
    Value r = d.root();
    EXPECT_TRUE(*r.get("t")->as_bool());
    EXPECT_FALSE(*r.get("f")->as_bool());
    EXPECT_EQ(r.get("s")->as_bool().error().context(), "s: expected boolean");
    EXPECT_EQ(r.get("n")->as_string().error().context(), "n: expected string");
    EXPECT_EQ(r.get("t")->as_double().error().context(), "t: expected number");
    EXPECT_EQ(r.get("s")->size(), 0u);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_FALSE(r.get("s")->get("x"));
}
