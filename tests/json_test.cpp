#include "oci/json.hpp"

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
