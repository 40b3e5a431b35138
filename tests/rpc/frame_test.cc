#include "rpc/frame.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace ajet::rpc {
namespace {

std::vector<std::byte> bytes_of(const Frame& f, const FrameLimits& limits = {}) {
  return flatten(encode_frame(f, limits));
}

// A hand-built frame: prefix + the given header text + payload, for malformed cases.
std::vector<std::byte> raw_frame(std::string_view header, std::vector<std::byte> payload = {},
                                 uint32_t magic = kMagic) {
  std::vector<std::byte> out(kPrefixBytes);
  uint32_t hlen = static_cast<uint32_t>(header.size());
  uint64_t plen = payload.size();
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &hlen, 4);
  std::memcpy(out.data() + 8, &plen, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Expects decode to throw ajet::Error with `code` and a message containing `needle`.
void expect_rejected(const std::vector<std::byte>& bytes, ErrorCode code, std::string_view needle,
                     const FrameLimits& limits = {}) {
  try {
    decode_frame_bytes(bytes, limits);
    ADD_FAILURE() << "decoded a malformed frame; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not contain '" << needle << "'";
  }
}

TEST(Frame, RoundTripsEveryDtypeAndField) {
  Frame f;
  f.kind = FrameKind::kRequest;
  f.id = 42;
  f.method = "generate";
  f.body = {{"temperature", 0.5}, {"tag", "episode-1 \u00e9"}, {"nested", {{"a", {1, 2, 3}}}}};
  std::vector<int32_t> i32{0, -1, std::numeric_limits<int32_t>::max(),
                           std::numeric_limits<int32_t>::min()};
  std::vector<float> f32{0.0f, -1.5f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(),
                         -std::numeric_limits<float>::denorm_min()};
  std::vector<int64_t> i64{std::numeric_limits<int64_t>::min(), 0, 1ll << 40};
  std::vector<uint8_t> u8{0, 1, 255};
  f.add_array("u8", u8);  // 3 bytes first, so the next array must be padded to stay aligned
  f.add_array("i32", i32);
  f.add_array("f32", f32);
  f.add_array("i64", i64);
  f.add_array("empty", std::vector<int32_t>{});

  Frame g = decode_frame_bytes(bytes_of(f), {});
  EXPECT_EQ(g.kind, FrameKind::kRequest);
  EXPECT_EQ(g.id, 42u);
  EXPECT_EQ(g.method, "generate");
  EXPECT_EQ(g.body, f.body);
  ASSERT_EQ(g.arrays.size(), 5u);
  for (const auto& a : g.arrays) EXPECT_EQ(a.offset % dtype_size(a.dtype), 0u) << a.name;
  EXPECT_EQ(g.array<uint8_t>("u8", "t"), u8);
  EXPECT_EQ(g.array<int32_t>("i32", "t"), i32);
  EXPECT_EQ(g.array<int64_t>("i64", "t"), i64);
  EXPECT_TRUE(g.array<int32_t>("empty", "t").empty());
  auto back = g.array<float>("f32", "t");
  ASSERT_EQ(back.size(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    uint32_t a, b;  // bit-exact, NaN included
    std::memcpy(&a, &f32[i], 4);
    std::memcpy(&b, &back[i], 4);
    EXPECT_EQ(a, b) << i;
  }
}

TEST(Frame, RoundTripsEveryKind) {
  for (FrameKind kind : {FrameKind::kReply, FrameKind::kDone, FrameKind::kAbort}) {
    Frame f;
    f.kind = kind;
    f.id = 7;
    Frame g = decode_frame_bytes(bytes_of(f), {});
    EXPECT_EQ(g.kind, kind);
    EXPECT_EQ(g.id, 7u);
    EXPECT_TRUE(g.body.is_object());
  }
  Error e = frame_error(
      decode_frame_bytes(bytes_of(make_error_frame(9, ErrorCode::kNotFound, "no such")), {}));
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_STREQ(e.what(), "no such");
  Frame close =
      decode_frame_bytes(bytes_of(make_close_frame(ErrorCode::kResourceExhausted, "too big")), {});
  EXPECT_EQ(close.kind, FrameKind::kClose);
  EXPECT_EQ(frame_error(close).code(), ErrorCode::kResourceExhausted);
}

TEST(Frame, TypedAccessNamesTheArray) {
  Frame f;
  f.add_array("ids", std::vector<int32_t>{1, 2});
  try {
    f.array<float>("ids", "tokens event");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tokens event: array 'ids' must be f32, got i32");
  }
  try {
    f.array<int32_t>("logprobs", "tokens event");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tokens event: missing required array 'logprobs'");
  }
  EXPECT_THROW(f.add_array("ids", std::vector<int32_t>{3}), Error);
}

TEST(Frame, EncodeRefusesOversizeAndInvalidFrames) {
  FrameLimits small{.max_header_bytes = 64, .max_payload_bytes = 16, .max_arrays = 2};
  Frame f;
  f.kind = FrameKind::kReply;
  f.id = 1;
  f.add_array("a", std::vector<int64_t>(3, 0));  // 24 bytes > 16
  try {
    encode_frame(f, small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("max_payload_bytes"), std::string::npos) << e.what();
  }
  Frame h;
  h.kind = FrameKind::kReply;
  h.id = 1;
  h.body = {{"text", std::string(100, 'x')}};
  EXPECT_THROW(encode_frame(h, small), Error);
  Frame no_method;  // a request without a method
  no_method.id = 1;
  EXPECT_THROW(encode_frame(no_method, {}), Error);
  Frame zero_id;
  zero_id.kind = FrameKind::kReply;
  EXPECT_THROW(encode_frame(zero_id, {}), Error);
}

TEST(Frame, RejectsBadPrefixes) {
  auto good = bytes_of(make_abort_frame(3));
  expect_rejected(raw_frame(R"({"kind":"abort","id":3})", {}, 0x12345678u),
                  ErrorCode::kInvalidArgument, "bad magic 0x12345678");
  expect_rejected(raw_frame(R"({"kind":"abort","id":3})", {}, 0x02524A41u),
                  ErrorCode::kInvalidArgument, "unsupported protocol version 2");
  expect_rejected(raw_frame(""), ErrorCode::kInvalidArgument, "header length is 0");
  expect_rejected({good.begin(), good.begin() + 10}, ErrorCode::kInvalidArgument,
                  "truncated: 10 bytes");
  expect_rejected({good.begin(), good.end() - 1}, ErrorCode::kInvalidArgument,
                  "truncated: prefix announces");
  auto trailing = good;
  trailing.push_back(std::byte{0});
  expect_rejected(trailing, ErrorCode::kInvalidArgument, "1 trailing bytes");
  FrameLimits limits{.max_header_bytes = 16, .max_payload_bytes = 8, .max_arrays = 64};
  expect_rejected(good, ErrorCode::kResourceExhausted, "max_header_bytes", limits);
  expect_rejected(raw_frame("{}", std::vector<std::byte>(9)), ErrorCode::kResourceExhausted,
                  "payload of 9 bytes exceeds the limit of 8 bytes", limits);
  // A prefix announcing an absurd payload is refused from the prefix alone (nothing allocated).
  std::array<std::byte, kPrefixBytes> prefix{};
  uint32_t magic = kMagic, hlen = 2;
  uint64_t plen = ~0ull;
  std::memcpy(prefix.data(), &magic, 4);
  std::memcpy(prefix.data() + 4, &hlen, 4);
  std::memcpy(prefix.data() + 8, &plen, 8);
  EXPECT_THROW(decode_prefix(prefix, FrameLimits{}), Error);
}

TEST(Frame, RejectsBadHeaders) {
  const auto bad = ErrorCode::kInvalidArgument;
  expect_rejected(raw_frame("{not json"), bad, "header: invalid JSON at the top level");
  expect_rejected(raw_frame("[1,2]"), bad, "header must be a JSON object, got array");
  expect_rejected(raw_frame(std::string(100, '[') + std::string(100, ']')), bad,
                  "nested deeper than 64 levels");
  expect_rejected(raw_frame(R"({"id":1})"), bad, "header needs a string 'kind'");
  expect_rejected(raw_frame(R"({"kind":"shout","id":1})"), bad, "unknown frame kind 'shout'");
  expect_rejected(raw_frame(R"({"kind":"reply"})"), bad, "header: missing 'id'");
  expect_rejected(raw_frame(R"({"kind":"reply","id":-4})"), bad,
                  "'id' must be a non-negative integer, got -4");
  expect_rejected(raw_frame(R"({"kind":"reply","id":"4"})"), bad,
                  "'id' must be a non-negative integer, got string");
  expect_rejected(raw_frame(R"({"kind":"reply","id":0})"), bad, "reply frame must have an id >= 1");
  expect_rejected(raw_frame(R"({"kind":"close","id":5,"body":{"code":"io","message":"x"}})"), bad,
                  "close frame must have id 0");
  expect_rejected(raw_frame(R"({"kind":"request","id":1})"), bad, "request 1: missing 'method'");
  expect_rejected(raw_frame(R"({"kind":"request","id":1,"method":7})"), bad,
                  "'method' must be a string");
  expect_rejected(raw_frame(R"({"kind":"reply","id":1,"method":"x"})"), bad,
                  "reply frame must not carry a 'method'");
  expect_rejected(raw_frame(R"({"kind":"reply","id":1,"body":[1]})"), bad,
                  "'body' must be an object, got array");
  expect_rejected(raw_frame(R"({"kind":"error","id":1,"body":{"message":"m"}})"), bad,
                  "body needs a string 'code'");
  expect_rejected(raw_frame("{\"kind\":\"reply\",\"id\":1,\"body\":{\"s\":\"\xff\xfe\"}}"), bad,
                  "header: invalid JSON at body.s");
}

TEST(Frame, RejectsBadArrayDescriptors) {
  const auto bad = ErrorCode::kInvalidArgument;
  std::vector<std::byte> p16(16);
  auto with = [&](std::string arrays, std::vector<std::byte> payload) {
    return raw_frame(R"({"kind":"reply","id":1,"arrays":)" + arrays + "}", std::move(payload));
  };
  expect_rejected(with("{}", p16), bad, "'arrays' must be an array");
  expect_rejected(with("[1]", p16), bad, "arrays[0] must be an object");
  expect_rejected(with(R"([{"dtype":"i32","count":1,"offset":0}])", p16), bad,
                  "arrays[0] needs a non-empty string 'name'");
  expect_rejected(with(R"([{"name":"a","count":1,"offset":0}])", p16), bad,
                  "arrays[0] 'a': missing 'dtype'");
  expect_rejected(with(R"([{"name":"a","dtype":"f16","count":1,"offset":0}])", p16), bad,
                  "unknown dtype 'f16'");
  expect_rejected(with(R"([{"name":"a","dtype":"i32","count":-1,"offset":0}])", p16), bad,
                  "'count' must be a non-negative integer, got -1");
  expect_rejected(with(R"([{"name":"a","dtype":"i32","count":1.5,"offset":0}])", p16), bad,
                  "'count' must be a non-negative integer, got number");
  expect_rejected(with(R"([{"name":"a","dtype":"i32","count":1,"offset":2}])", p16), bad,
                  "offset 2 is not a multiple of the i32 size 4");
  expect_rejected(with(R"([{"name":"a","dtype":"i32","count":5,"offset":0}])", p16), bad,
                  "5 x i32 at offset 0 lies outside the payload of 16 bytes");
  expect_rejected(with(R"([{"name":"a","dtype":"i64","count":1,"offset":16}])", p16), bad,
                  "lies outside the payload");
  expect_rejected(
      with(R"([{"name":"a","dtype":"i64","count":2305843009213693952,"offset":8}])", p16), bad,
      "lies outside the payload");  // count * 8 overflows 64 bits
  expect_rejected(
      with(R"([{"name":"a","dtype":"u8","count":1,"offset":18446744073709551615}])", p16), bad,
      "lies outside the payload");
  expect_rejected(
      with(
          R"([{"name":"a","dtype":"u8","count":1,"offset":0},{"name":"a","dtype":"u8","count":1,"offset":1}])",
          p16),
      bad, "duplicate array name");
  FrameLimits limits;
  limits.max_arrays = 1;
  expect_rejected(
      with(
          R"([{"name":"a","dtype":"u8","count":1,"offset":0},{"name":"b","dtype":"u8","count":1,"offset":1}])",
          p16),
      ErrorCode::kResourceExhausted, "2 arrays exceed the limit of 1", limits);
}

// Whatever bytes arrive, decoding either succeeds or throws ajet::Error: no crash, no other
// exception.
TEST(Frame, SurvivesRandomCorruptionAndEveryTruncation) {
  Frame f;
  f.kind = FrameKind::kReply;
  f.id = 77;
  f.body = {{"event", "tokens"}, {"sample", 1}};
  f.add_array("token_ids", std::vector<int32_t>{1, 2, 3});
  f.add_array("logprobs", std::vector<float>{-0.1f, -0.2f, -0.3f});
  auto good = bytes_of(f);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(decode_frame_bytes(std::span(good.data(), n), {}), Error) << n;
  }
  std::mt19937 rng(12345);
  int decoded = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
    try {
      Frame g = decode_frame_bytes(bytes, {});
      for (const auto& a : g.arrays)
        ASSERT_LE(a.offset + a.count * dtype_size(a.dtype), g.payload.size());
      ++decoded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(decoded, 0);  // flips inside array values are legal frames
}

TEST(Frame, ErrorCodeNamesRoundTrip) {
  for (ErrorCode c : {ErrorCode::kInvalidArgument, ErrorCode::kUnavailable,
                      ErrorCode::kResourceExhausted, ErrorCode::kInternal, ErrorCode::kNotFound}) {
    EXPECT_EQ(error_code_from_name(error_code_name(c)), c);
  }
  EXPECT_FALSE(error_code_from_name("teapot").has_value());
  Frame odd = make_error_frame(1, ErrorCode::kIo, "x");
  odd.body["code"] = "teapot";
  EXPECT_EQ(frame_error(odd).code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace ajet::rpc
