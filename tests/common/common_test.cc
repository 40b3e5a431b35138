#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/encoding.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/strings.h"

namespace ajet {
namespace {

TEST(Base64, RoundTripsAllLengths) {
  std::string s;
  for (int i = 0; i < 40; ++i) {
    auto decoded = base64_decode(base64_encode(s));
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, s);
    s += char(i * 37);
  }
}

TEST(Base64, KnownVectorsAndRejects) {
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_decode("Zm8").value(), "fo");
  EXPECT_FALSE(base64_decode("Zm9v!mFy").has_value());
  EXPECT_FALSE(base64_decode("Z").has_value());
}

TEST(Hmac, Rfc4231Case2) {
  std::string mac = hmac_sha256("Jefe", "what do ya want for nothing?");
  EXPECT_EQ(hex_encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Uuid, IsHexAndUnique) {
  std::string a = new_uuid_hex(), b = new_uuid_hex();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(Json, ErrorsNameTheField) {
  Json body = Json::parse(R"({"max_tokens": "ten", "n": 2})");
  try {
    get_int(body, "max_tokens", "request body");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "request body: field 'max_tokens' must be an integer, got string");
  }
  EXPECT_EQ(get_int(body, "n", "body"), 2);
  EXPECT_FALSE(get_optional_int(body, "seed", "body").has_value());
  EXPECT_THROW(get_string(body, "model", "body"), Error);
  EXPECT_THROW(parse_json("{\"a\":", "x.json"), Error);
  // Found by fuzzing: nlohmann throws out_of_range (not parse_error) for an overflowing number.
  EXPECT_THROW(parse_json("[1e+600]", "x.json"), Error);
  Json huge = Json::parse(R"({"n": 1e30, "m": 3.0, "f": 2.5})");
  EXPECT_THROW(get_int(huge, "n", "body"), Error);
  EXPECT_EQ(get_int(huge, "m", "body"), 3);
  EXPECT_THROW(get_int(huge, "f", "body"), Error);
}

std::string parse_error_of(std::string_view text, int max_depth = kMaxJsonDepth) {
  try {
    parse_json(text, "body", max_depth);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "expected an error for " << text.substr(0, 80);
  return "";
}

TEST(Json, ParseErrorsNameThePathWhereTheParserStopped) {
  EXPECT_EQ(parse_error_of(R"({"temperature": 1e400})"),
            "body: invalid JSON at temperature: number overflow parsing '1e400'");
  EXPECT_THAT(
      parse_error_of("{\"messages\": [{\"role\": \"user\"}, {\"content\": \"a\xff\"}]}"),
      ::testing::StartsWith("body: invalid JSON at messages[1].content: parse error at line 1"));
  EXPECT_THAT(parse_error_of(R"({"stop": ["\ud800"]})"),
              ::testing::StartsWith("body: invalid JSON at stop[0]: parse error"));
  EXPECT_THAT(parse_error_of(R"({"a b": {"c": tru}})"),
              ::testing::StartsWith("body: invalid JSON at [\"a b\"].c:"));
  EXPECT_THAT(parse_error_of("{\"a\":"),
              ::testing::StartsWith("body: invalid JSON at a: parse error"));
  EXPECT_THAT(parse_error_of("nope"),
              ::testing::StartsWith("body: invalid JSON at the top level: parse error"));
  EXPECT_THAT(parse_error_of("{} x"),
              ::testing::StartsWith("body: invalid JSON at the top level: parse error"));
  // A parsed value is the same as nlohmann's own parse gives.
  const std::string text =
      R"({"b": [1, 2.5, "x", null, true, {"c": []}], "a": -3, "u": 18446744073709551615})";
  EXPECT_EQ(parse_json(text, "body"), Json::parse(text));
  EXPECT_EQ(parse_ordered_json(text, "body").dump(), nlohmann::ordered_json::parse(text).dump());
}

TEST(Json, NestingBeyondTheLimitIsRefusedNamingWhereItStarted) {
  const std::string deep_ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json(deep_ok, "body"));
  const std::string too_deep = "[" + deep_ok + "]";
  EXPECT_THAT(parse_error_of(too_deep), ::testing::HasSubstr("nested deeper than 128 levels"));
  // 20,000 levels of a tool schema: refused while reading, the path elided after a dozen names.
  std::string schema = R"({"tools": [{"function": {"parameters": )";
  for (int i = 0; i < 20000; ++i) schema += R"({"properties": )";
  const std::string msg = parse_error_of(schema);
  EXPECT_THAT(msg,
              ::testing::StartsWith(
                  "body: invalid JSON at tools[0].function.parameters.properties.properties."));
  EXPECT_THAT(msg, ::testing::HasSubstr(
                       "... (128 levels deep): arrays and objects nested deeper than 128 levels"));
  EXPECT_THAT(parse_error_of(R"({"a": {"b": 1}})", 1),
              ::testing::StartsWith("body: invalid JSON at a: arrays"));
  // Keys named in the path are capped; a long key does not make a long message.
  const std::string long_key = std::string(5000, 'k');
  EXPECT_LT(parse_error_of("{\"" + long_key + "\": x}").size(), 400u);
}

TEST(Json, TryParseGivesNothingForTextThatIsNotJsonOrTooDeep) {
  EXPECT_EQ(try_parse_json(R"({"a": 1})"), Json({{"a", 1}}));
  EXPECT_FALSE(try_parse_json("{\"a\": ").has_value());
  EXPECT_FALSE(try_parse_json(std::string(200, '[') + std::string(200, ']')).has_value());
  EXPECT_EQ(try_parse_ordered_json("[3]")->dump(), "[3]");
}

// A tool call's arguments may be any text; JSON in them deeper than the limit is refused naming the
// field (before issue 38 it was parsed without a limit elsewhere and overflowed the stack in
// dump()).
TEST(Json, RequireDepthRefusesOnlyJsonNestedTooDeep) {
  const std::string deep = std::string(70000, '[') + std::string(70000, ']');
  try {
    require_json_depth(deep, "messages[1].tool_calls[0].function.arguments");
    ADD_FAILURE() << "70,000 levels passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                ::testing::StartsWith(
                    "messages[1].tool_calls[0].function.arguments: invalid JSON at [0][0]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nested deeper than 128 levels"));
  }
  // Deep but cut off, or deep inside text that is not JSON at its start: still refused once it
  // opens the 129th level as JSON; any other text passes, JSON or not.
  EXPECT_THROW(require_json_depth("{\"a\": " + std::string(200, '['), "args"), Error);
  EXPECT_NO_THROW(require_json_depth(std::string(128, '[') + std::string(128, ']'), "args"));
  EXPECT_NO_THROW(require_json_depth("not json " + std::string(500, '['), "args"));
  EXPECT_NO_THROW(require_json_depth("{\"a\": ", "args"));
  EXPECT_NO_THROW(require_json_depth("", "args"));
  EXPECT_NO_THROW(require_json_depth(R"({"city": "Paris"})", "args"));
}

// A reader of events gets the same limit and errors as parse_json.
TEST(Json, SaxParseForwardsEventsWithTheSameLimit) {
  struct Counter final : nlohmann::json_sax<Json> {
    int keys = 0, values = 0, opened = 0;
    bool null() override { return ++values; }
    bool boolean(bool) override { return ++values; }
    bool number_integer(number_integer_t) override { return ++values; }
    bool number_unsigned(number_unsigned_t) override { return ++values; }
    bool number_float(number_float_t, const string_t&) override { return ++values; }
    bool string(string_t&) override { return ++values; }
    bool binary(binary_t&) override { return ++values; }
    bool start_object(std::size_t) override { return ++opened; }
    bool key(string_t&) override { return ++keys; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return ++opened; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  };
  Counter c;
  EXPECT_TRUE(sax_parse_json(R"({"a": [1, "x", null], "b": {"c": 2.5}})", "file", c));
  EXPECT_EQ(c.keys, 3);
  EXPECT_EQ(c.values, 4);
  EXPECT_EQ(c.opened, 3);
  Counter deep;
  try {
    sax_parse_json("{\"v\": " + std::string(5000, '['), "tokenizer.json", deep);
    ADD_FAILURE() << "5,000 levels passed";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("tokenizer.json: invalid JSON at v[0][0]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nested deeper than 128 levels"));
  }
  EXPECT_LE(deep.opened, kMaxJsonDepth);
  Counter bad;
  EXPECT_THROW(sax_parse_json(R"({"a": tru})", "file", bad), Error);
}

TEST(Fs, AtomicWriteThenRead) {
  auto path = std::filesystem::temp_directory_path() / ("ajet_fs_test_" + new_uuid_hex());
  write_file_atomic(path, "hello");
  EXPECT_EQ(read_file(path), "hello");
  std::filesystem::remove(path);
  try {
    read_file(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
}

// A directory written beside its target appears whole: a first publish creates it, a second
// replaces it (the old one moved aside, then removed), and a failed rename into place puts the old
// one back.
TEST(Fs, PublishDirReplacesWholeAndRestoresTheOldOneWhenItFails) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ajet_publish_test_" + new_uuid_hex());
  const fs::path dir = root / "model";
  fs::create_directories(root);
  const fs::path tmp = temp_sibling(dir, "tmp");
  EXPECT_EQ(tmp.parent_path(), root);
  EXPECT_EQ(tmp.filename().string().rfind(".model.tmp-", 0), 0u) << tmp;
  fs::create_directory(tmp);
  write_file_atomic(tmp / "a", "first");
  publish_dir(tmp, dir);
  EXPECT_EQ(read_file(dir / "a"), "first");
  EXPECT_FALSE(fs::exists(tmp));

  fs::create_directory(tmp);
  write_file_atomic(tmp / "b", "second");
  publish_dir(tmp, dir);
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_EQ(read_file(dir / "b"), "second");
  EXPECT_FALSE(fs::exists(temp_sibling(dir, "old")));

  try {  // nothing at tmp: the rename fails, the error names the target, and `dir` is still the old
         // one
    publish_dir(tmp, dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(dir / "b"), "second");
  fs::remove_all(root);
}

}  // namespace
}  // namespace ajet

namespace ajet {
namespace {

TEST(ClosestName, FindsTheNearSpellingAndNothingFarAway) {
  const std::vector<std::string> flags = {"--conf", "--backbone", "--exp-dir"};
  EXPECT_EQ(closest_name("--cnf", flags), "--conf");
  EXPECT_EQ(closest_name("--backbon", flags), "--backbone");
  EXPECT_EQ(closest_name("strat", {"start", "overwatch"}), "start");  // a transposition: 2 edits
  EXPECT_EQ(closest_name("--verbose", flags), "");
  EXPECT_EQ(closest_name("x", {"start"}), "");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

}  // namespace
}  // namespace ajet
