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
